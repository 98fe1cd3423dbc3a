#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#map3 = affine_map<(d0, d1, d2) -> (d2)>
module @module {
  util.func public @layer_norm_bf16_2x128x4544_n4544_wb_m14_aten$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view, %arg5: !hal.fence, %arg6: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub} {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 4.544000e+03 : f32
    %0 = hal.tensor.import wait(%arg5) => %arg0 : !hal.buffer_view -> tensor<2x128x4544xbf16>
    %1 = hal.tensor.import wait(%arg5) => %arg1 : !hal.buffer_view -> tensor<2x128x4544xbf16>
    %2 = hal.tensor.import wait(%arg5) => %arg2 : !hal.buffer_view -> tensor<2x128x1xf32>
    %3 = hal.tensor.import wait(%arg5) => %arg3 : !hal.buffer_view -> tensor<2x128x1xf32>
    %4 = hal.tensor.import wait(%arg5) => %arg4 : !hal.buffer_view -> tensor<4544xbf16>
    %5 = tensor.empty() : tensor<2x128x4544xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%0 : tensor<2x128x4544xbf16>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %37 = arith.extf %in : bf16 to f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%1 : tensor<2x128x4544xbf16>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %37 = arith.extf %in : bf16 to f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %8 = tensor.empty() : tensor<4544xf32>
    %9 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%4 : tensor<4544xbf16>) outs(%8 : tensor<4544xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %37 = arith.extf %in : bf16 to f32
      linalg.yield %37 : f32
    } -> tensor<4544xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%7, %2 : tensor<2x128x4544xf32>, tensor<2x128x1xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.subf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%10, %3 : tensor<2x128x4544xf32>, tensor<2x128x1xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.mulf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %12 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %9 : tensor<2x128x4544xf32>, tensor<4544xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.mulf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%12 : tensor<2x128x4544xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %out: f32):
      %37 = arith.mulf %in, %cst_0 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %14 = tensor.empty() : tensor<2x128x1xf32>
    %15 = linalg.fill ins(%cst : f32) outs(%14 : tensor<2x128x1xf32>) -> tensor<2x128x1xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%12 : tensor<2x128x4544xf32>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %37 = arith.addf %in, %out : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x1xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%12, %11 : tensor<2x128x4544xf32>, tensor<2x128x4544xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.mulf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %18 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%17 : tensor<2x128x4544xf32>) outs(%15 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %37 = arith.addf %in, %out : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x1xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%11, %18 : tensor<2x128x4544xf32>, tensor<2x128x1xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.mulf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13, %16 : tensor<2x128x4544xf32>, tensor<2x128x1xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.subf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%20, %19 : tensor<2x128x4544xf32>, tensor<2x128x4544xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.subf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x128x1xf32>) outs(%14 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %37 = arith.divf %in, %cst_0 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x1xf32>
    %23 = linalg.generic {indexing_maps = [#map2, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%22, %21 : tensor<2x128x1xf32>, tensor<2x128x4544xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.mulf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %24 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %11 : tensor<2x128x4544xf32>, tensor<2x128x4544xf32>) outs(%5 : tensor<2x128x4544xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %37 = arith.mulf %in, %in_1 : f32
      linalg.yield %37 : f32
    } -> tensor<2x128x4544xf32>
    %25 = linalg.fill ins(%cst : f32) outs(%8 : tensor<4544xf32>) -> tensor<4544xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["reduction", "reduction", "parallel"]} ins(%24 : tensor<2x128x4544xf32>) outs(%25 : tensor<4544xf32>) {
    ^bb0(%in: f32, %out: f32):
      %37 = arith.addf %in, %out : f32
      linalg.yield %37 : f32
    } -> tensor<4544xf32>
    %27 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["reduction", "reduction", "parallel"]} ins(%6 : tensor<2x128x4544xf32>) outs(%25 : tensor<4544xf32>) {
    ^bb0(%in: f32, %out: f32):
      %37 = arith.addf %in, %out : f32
      linalg.yield %37 : f32
    } -> tensor<4544xf32>
    %28 = tensor.empty() : tensor<2x128x4544xbf16>
    %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%23 : tensor<2x128x4544xf32>) outs(%28 : tensor<2x128x4544xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %37 = arith.truncf %in : f32 to bf16
      linalg.yield %37 : bf16
    } -> tensor<2x128x4544xbf16>
    %30 = tensor.empty() : tensor<4544xbf16>
    %31 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%26 : tensor<4544xf32>) outs(%30 : tensor<4544xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %37 = arith.truncf %in : f32 to bf16
      linalg.yield %37 : bf16
    } -> tensor<4544xbf16>
    %32 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%27 : tensor<4544xf32>) outs(%30 : tensor<4544xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %37 = arith.truncf %in : f32 to bf16
      linalg.yield %37 : bf16
    } -> tensor<4544xbf16>
    %33:3 = hal.tensor.barrier join(%29, %31, %32 : tensor<2x128x4544xbf16>, tensor<4544xbf16>, tensor<4544xbf16>) => %arg6 : !hal.fence
    %34 = hal.tensor.export %33#0 : tensor<2x128x4544xbf16> -> !hal.buffer_view
    %35 = hal.tensor.export %33#1 : tensor<4544xbf16> -> !hal.buffer_view
    %36 = hal.tensor.export %33#2 : tensor<4544xbf16> -> !hal.buffer_view
    util.return %34, %35, %36 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
  util.func public @layer_norm_bf16_2x128x4544_n4544_wb_m14_aten(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = util.null : !hal.fence
    %c-1_i32 = arith.constant -1 : i32
    %c0 = arith.constant 0 : index
    %device_0 = hal.devices.get %c0 : !hal.device
    %fence = hal.fence.create device(%device_0 : !hal.device) flags("None") : !hal.fence
    %1:3 = util.call @layer_norm_bf16_2x128x4544_n4544_wb_m14_aten$async(%arg0, %arg1, %arg2, %arg3, %arg4, %0, %fence) : (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.fence, !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view)
    %status = hal.fence.await until([%fence]) timeout_millis(%c-1_i32) flags("None") : i32
    util.return %1#0, %1#1, %1#2 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
}
