#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#map2 = affine_map<(d0, d1, d2) -> (d2)>
module @module {
  util.func public @layer_norm_bf16_2x128x100_n100_wb_m1_aten$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.fence, %arg4: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub, preprocessing_pipeline = #util.preprocessing_pipeline<"iree-preprocessing-make-single-dispatch">} {
    %cst = arith.constant 0.000000e+00 : f64
    %cst_0 = arith.constant 0.000000e+00 : f32
    %cst_1 = arith.constant dense<0x7FC0> : tensor<2x128x1xbf16>
    %cst_2 = arith.constant 0x7FF0000000000000 : f64
    %cst_3 = arith.constant 1.000000e-05 : f64
    %cst_4 = arith.constant 1.000000e+02 : f64
    %cst_5 = arith.constant 1.000000e+02 : f32
    %0 = hal.tensor.import wait(%arg3) => %arg0 : !hal.buffer_view -> tensor<2x128x100xbf16>
    %1 = hal.tensor.import wait(%arg3) => %arg1 : !hal.buffer_view -> tensor<100xbf16>
    %2 = hal.tensor.import wait(%arg3) => %arg2 : !hal.buffer_view -> tensor<100xbf16>
    %3 = tensor.empty() : tensor<2x128x100xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%0 : tensor<2x128x100xbf16>) outs(%3 : tensor<2x128x100xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %41 = arith.extf %in : bf16 to f32
      linalg.yield %41 : f32
    } -> tensor<2x128x100xf32>
    %5 = tensor.empty() : tensor<2x128x100xf64>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4 : tensor<2x128x100xf32>) outs(%5 : tensor<2x128x100xf64>) {
    ^bb0(%in: f32, %out: f64):
      %41 = arith.extf %in : f32 to f64
      linalg.yield %41 : f64
    } -> tensor<2x128x100xf64>
    %7 = tensor.empty() : tensor<2x128x1xf64>
    %8 = linalg.fill ins(%cst : f64) outs(%7 : tensor<2x128x1xf64>) -> tensor<2x128x1xf64>
    %9 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%6 : tensor<2x128x100xf64>) outs(%8 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %41 = arith.addf %in, %out : f64
      linalg.yield %41 : f64
    } -> tensor<2x128x1xf64>
    %10 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%9 : tensor<2x128x1xf64>) outs(%7 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %41 = arith.divf %in, %cst_4 : f64
      linalg.yield %41 : f64
    } -> tensor<2x128x1xf64>
    %11 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %10 : tensor<2x128x100xf64>, tensor<2x128x1xf64>) outs(%5 : tensor<2x128x100xf64>) {
    ^bb0(%in: f64, %in_6: f64, %out: f64):
      %41 = arith.subf %in, %in_6 : f64
      linalg.yield %41 : f64
    } -> tensor<2x128x100xf64>
    %12 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%11, %11 : tensor<2x128x100xf64>, tensor<2x128x100xf64>) outs(%5 : tensor<2x128x100xf64>) {
    ^bb0(%in: f64, %in_6: f64, %out: f64):
      %41 = arith.mulf %in, %in_6 : f64
      linalg.yield %41 : f64
    } -> tensor<2x128x100xf64>
    %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%12 : tensor<2x128x100xf64>) outs(%8 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %41 = arith.addf %in, %out : f64
      linalg.yield %41 : f64
    } -> tensor<2x128x1xf64>
    %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13 : tensor<2x128x1xf64>) outs(%7 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %41 = arith.divf %in, %cst_4 : f64
      linalg.yield %41 : f64
    } -> tensor<2x128x1xf64>
    %15 = tensor.empty() : tensor<2x128x1xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%14 : tensor<2x128x1xf64>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: f64, %out: f32):
      %41 = arith.truncf %in : f64 to f32
      linalg.yield %41 : f32
    } -> tensor<2x128x1xf32>
    %17 = linalg.fill ins(%cst_0 : f32) outs(%15 : tensor<2x128x1xf32>) -> tensor<2x128x1xf32>
    %18 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction"]} ins(%4 : tensor<2x128x100xf32>) outs(%17 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %41 = arith.addf %in, %out : f32
      linalg.yield %41 : f32
    } -> tensor<2x128x1xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%18 : tensor<2x128x1xf32>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %41 = arith.divf %in, %cst_5 : f32
      linalg.yield %41 : f32
    } -> tensor<2x128x1xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%16 : tensor<2x128x1xf32>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %41 = arith.truncf %cst_3 : f64 to f32
      %42 = arith.addf %in, %41 : f32
      linalg.yield %42 : f32
    } -> tensor<2x128x1xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%20 : tensor<2x128x1xf32>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %41 = math.rsqrt %in : f32
      linalg.yield %41 : f32
    } -> tensor<2x128x1xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%4, %19 : tensor<2x128x100xf32>, tensor<2x128x1xf32>) outs(%3 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %41 = arith.subf %in, %in_6 : f32
      linalg.yield %41 : f32
    } -> tensor<2x128x100xf32>
    %23 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%22, %21 : tensor<2x128x100xf32>, tensor<2x128x1xf32>) outs(%3 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %41 = arith.mulf %in, %in_6 : f32
      linalg.yield %41 : f32
    } -> tensor<2x128x100xf32>
    %24 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%23, %1 : tensor<2x128x100xf32>, tensor<100xbf16>) outs(%3 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_6: bf16, %out: f32):
      %41 = arith.extf %in_6 : bf16 to f32
      %42 = arith.mulf %in, %41 : f32
      linalg.yield %42 : f32
    } -> tensor<2x128x100xf32>
    %25 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%24, %2 : tensor<2x128x100xf32>, tensor<100xbf16>) outs(%3 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_6: bf16, %out: f32):
      %41 = arith.extf %in_6 : bf16 to f32
      %42 = arith.addf %in, %41 : f32
      linalg.yield %42 : f32
    } -> tensor<2x128x100xf32>
    %26 = tensor.empty() : tensor<2x128x100xbf16>
    %27 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%25 : tensor<2x128x100xf32>) outs(%26 : tensor<2x128x100xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %41 = arith.truncf %in : f32 to bf16
      linalg.yield %41 : bf16
    } -> tensor<2x128x100xbf16>
    %28 = tensor.empty() : tensor<2x128x1xbf16>
    %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%19 : tensor<2x128x1xf32>) outs(%28 : tensor<2x128x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %41 = arith.truncf %in : f32 to bf16
      linalg.yield %41 : bf16
    } -> tensor<2x128x1xbf16>
    %30 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%21 : tensor<2x128x1xf32>) outs(%28 : tensor<2x128x1xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %41 = arith.truncf %in : f32 to bf16
      linalg.yield %41 : bf16
    } -> tensor<2x128x1xbf16>
    %31 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%29 : tensor<2x128x1xbf16>) outs(%28 : tensor<2x128x1xbf16>) {
    ^bb0(%in: bf16, %out: bf16):
      %41 = math.absf %in : bf16
      linalg.yield %41 : bf16
    } -> tensor<2x128x1xbf16>
    %32 = tensor.empty() : tensor<2x128x1xi1>
    %33 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%31 : tensor<2x128x1xbf16>) outs(%32 : tensor<2x128x1xi1>) {
    ^bb0(%in: bf16, %out: i1):
      %41 = arith.extf %in : bf16 to f64
      %42 = arith.cmpf oeq, %41, %cst_2 : f64
      linalg.yield %42 : i1
    } -> tensor<2x128x1xi1>
    %34 = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%33, %cst_1, %29 : tensor<2x128x1xi1>, tensor<2x128x1xbf16>, tensor<2x128x1xbf16>) outs(%28 : tensor<2x128x1xbf16>) {
    ^bb0(%in: i1, %in_6: bf16, %in_7: bf16, %out: bf16):
      %41 = arith.select %in, %in_6, %in_7 : bf16
      linalg.yield %41 : bf16
    } -> tensor<2x128x1xbf16>
    %35 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%34 : tensor<2x128x1xbf16>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %41 = arith.extf %in : bf16 to f32
      linalg.yield %41 : f32
    } -> tensor<2x128x1xf32>
    %36 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%30 : tensor<2x128x1xbf16>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %41 = arith.extf %in : bf16 to f32
      linalg.yield %41 : f32
    } -> tensor<2x128x1xf32>
    %37:3 = hal.tensor.barrier join(%27, %35, %36 : tensor<2x128x100xbf16>, tensor<2x128x1xf32>, tensor<2x128x1xf32>) => %arg4 : !hal.fence
    %38 = hal.tensor.export %37#0 : tensor<2x128x100xbf16> -> !hal.buffer_view
    %39 = hal.tensor.export %37#1 : tensor<2x128x1xf32> -> !hal.buffer_view
    %40 = hal.tensor.export %37#2 : tensor<2x128x1xf32> -> !hal.buffer_view
    util.return %38, %39, %40 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
  util.func public @layer_norm_bf16_2x128x100_n100_wb_m1_aten(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = util.null : !hal.fence
    %c-1_i32 = arith.constant -1 : i32
    %c0 = arith.constant 0 : index
    %device_0 = hal.devices.get %c0 : !hal.device
    %fence = hal.fence.create device(%device_0 : !hal.device) flags("None") : !hal.fence
    %1:3 = util.call @layer_norm_bf16_2x128x100_n100_wb_m1_aten$async(%arg0, %arg1, %arg2, %0, %fence) : (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.fence, !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view)
    %status = hal.fence.await until([%fence]) timeout_millis(%c-1_i32) flags("None") : i32
    util.return %1#0, %1#1, %1#2 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
}
