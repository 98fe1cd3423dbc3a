#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
#map3 = affine_map<(d0, d1) -> (d1)>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map5 = affine_map<(d0, d1, d2) -> (0, d1, 0)>
#map6 = affine_map<(d0, d1, d2) -> (d0, 0, d2)>
#map7 = affine_map<(d0, d1, d2) -> ()>
#map8 = affine_map<(d0, d1, d2) -> (d1, d2)>
module @module {
  util.func public @layer_norm_bf16_2x128x4096_n4096_wb_m14_manual$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view, %arg5: !hal.fence, %arg6: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub} {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant dense<1.000000e+00> : tensor<f32>
    %cst_1 = arith.constant 4.096000e+03 : f32
    %0 = hal.tensor.import wait(%arg5) => %arg0 : !hal.buffer_view -> tensor<2x128x4096xbf16>
    %1 = hal.tensor.import wait(%arg5) => %arg1 : !hal.buffer_view -> tensor<2x128x4096xbf16>
    %2 = hal.tensor.import wait(%arg5) => %arg2 : !hal.buffer_view -> tensor<2x128x1xf32>
    %3 = hal.tensor.import wait(%arg5) => %arg3 : !hal.buffer_view -> tensor<2x128x1xf32>
    %4 = hal.tensor.import wait(%arg5) => %arg4 : !hal.buffer_view -> tensor<4096xbf16>
    %collapsed = tensor.collapse_shape %0 [[0, 1], [2]] : tensor<2x128x4096xbf16> into tensor<256x4096xbf16>
    %5 = tensor.empty() : tensor<256x4096xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed : tensor<256x4096xbf16>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %52 = arith.extf %in : bf16 to f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %collapsed_2 = tensor.collapse_shape %1 [[0, 1], [2]] : tensor<2x128x4096xbf16> into tensor<256x4096xbf16>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_2 : tensor<256x4096xbf16>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %52 = arith.extf %in : bf16 to f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %collapsed_3 = tensor.collapse_shape %3 [[0, 1], [2]] : tensor<2x128x1xf32> into tensor<256x1xf32>
    %collapsed_4 = tensor.collapse_shape %2 [[0, 1], [2]] : tensor<2x128x1xf32> into tensor<256x1xf32>
    %8 = tensor.empty() : tensor<4096xf32>
    %9 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%4 : tensor<4096xbf16>) outs(%8 : tensor<4096xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %52 = arith.extf %in : bf16 to f32
      linalg.yield %52 : f32
    } -> tensor<4096xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %collapsed_4 : tensor<256x4096xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.subf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %11 = linalg.generic {indexing_maps = [#map3, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%9, %6 : tensor<4096xf32>, tensor<256x4096xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %12 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%10, %11 : tensor<256x4096xf32>, tensor<256x4096xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %13 = tensor.empty() : tensor<256x1xf32>
    %14 = linalg.fill ins(%cst : f32) outs(%13 : tensor<256x1xf32>) -> tensor<256x1xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%12 : tensor<256x4096xf32>) outs(%14 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %52 = arith.addf %in, %out : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %collapsed_3 : tensor<256x4096xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%16, %9 : tensor<256x4096xf32>, tensor<4096xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %18 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_4 : tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %52 = arith.negf %in : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %18 : tensor<256x4096xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.addf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_3, %collapsed_3 : tensor<256x1xf32>, tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%20, %collapsed_3 : tensor<256x1xf32>, tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%15 : tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %52 = arith.divf %in, %cst_1 : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %23 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%21, %22 : tensor<256x1xf32>, tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %24 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%19, %23 : tensor<256x4096xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %25 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%17, %24 : tensor<256x4096xf32>, tensor<256x4096xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.subf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %9 : tensor<256x4096xf32>, tensor<4096xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %27 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%26 : tensor<256x4096xf32>) outs(%14 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %52 = arith.addf %in, %out : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%27 : tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %52 = arith.divf %in, %cst_1 : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %29 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_3, %28 : tensor<256x1xf32>, tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x1xf32>
    %30 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%25, %29 : tensor<256x4096xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.subf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %expanded = tensor.expand_shape %30 [[0, 1], [2]] output_shape [2, 128, 4096] : tensor<256x4096xf32> into tensor<2x128x4096xf32>
    %31 = linalg.generic {indexing_maps = [#map2, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%18, %7 : tensor<256x1xf32>, tensor<256x4096xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.addf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %32 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%31, %collapsed_3 : tensor<256x4096xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x4096xf32>
    %33 = tensor.empty() : tensor<2xi64>
    %34 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%33 : tensor<2xi64>) {
    ^bb0(%out: i64):
      %52 = linalg.index 0 : index
      %53 = arith.index_cast %52 : index to i64
      linalg.yield %53 : i64
    } -> tensor<2xi64>
    %expanded_5 = tensor.expand_shape %34 [[0, 1, 2]] output_shape [1, 2, 1] : tensor<2xi64> into tensor<1x2x1xi64>
    %35 = tensor.empty() : tensor<1x2x1xi1>
    %36 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded_5 : tensor<1x2x1xi64>) outs(%35 : tensor<1x2x1xi1>) {
    ^bb0(%in: i64, %out: i1):
      %52 = arith.cmpi eq, %in, %c0_i64 : i64
      linalg.yield %52 : i1
    } -> tensor<1x2x1xi1>
    %expanded_6 = tensor.expand_shape %6 [[0], [1, 2]] output_shape [256, 1, 4096] : tensor<256x4096xf32> into tensor<256x1x4096xf32>
    %expanded_7 = tensor.expand_shape %32 [[0], [1, 2]] output_shape [256, 1, 4096] : tensor<256x4096xf32> into tensor<256x1x4096xf32>
    %37 = tensor.empty() : tensor<256x2x4096xf32>
    %38 = linalg.generic {indexing_maps = [#map5, #map6, #map7, #map4], iterator_types = ["parallel", "parallel", "parallel"]} ins(%36, %expanded_7, %cst_0 : tensor<1x2x1xi1>, tensor<256x1x4096xf32>, tensor<f32>) outs(%37 : tensor<256x2x4096xf32>) {
    ^bb0(%in: i1, %in_11: f32, %in_12: f32, %out: f32):
      %52 = arith.select %in, %in_11, %in_12 : f32
      linalg.yield %52 : f32
    } -> tensor<256x2x4096xf32>
    %39 = linalg.generic {indexing_maps = [#map6, #map4, #map4], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded_6, %38 : tensor<256x1x4096xf32>, tensor<256x2x4096xf32>) outs(%37 : tensor<256x2x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %52 = arith.mulf %in, %in_11 : f32
      linalg.yield %52 : f32
    } -> tensor<256x2x4096xf32>
    %40 = tensor.empty() : tensor<2x4096xf32>
    %41 = linalg.fill ins(%cst : f32) outs(%40 : tensor<2x4096xf32>) -> tensor<2x4096xf32>
    %42 = linalg.generic {indexing_maps = [#map4, #map8], iterator_types = ["reduction", "parallel", "parallel"]} ins(%39 : tensor<256x2x4096xf32>) outs(%41 : tensor<2x4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %52 = arith.addf %in, %out : f32
      linalg.yield %52 : f32
    } -> tensor<2x4096xf32>
    %extracted_slice = tensor.extract_slice %42[0, 0] [1, 4096] [1, 1] : tensor<2x4096xf32> to tensor<1x4096xf32>
    %collapsed_8 = tensor.collapse_shape %extracted_slice [[0, 1]] : tensor<1x4096xf32> into tensor<4096xf32>
    %extracted_slice_9 = tensor.extract_slice %42[1, 0] [1, 4096] [1, 1] : tensor<2x4096xf32> to tensor<1x4096xf32>
    %collapsed_10 = tensor.collapse_shape %extracted_slice_9 [[0, 1]] : tensor<1x4096xf32> into tensor<4096xf32>
    %43 = tensor.empty() : tensor<2x128x4096xbf16>
    %44 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded : tensor<2x128x4096xf32>) outs(%43 : tensor<2x128x4096xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %52 = arith.truncf %in : f32 to bf16
      linalg.yield %52 : bf16
    } -> tensor<2x128x4096xbf16>
    %45 = tensor.empty() : tensor<4096xbf16>
    %46 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%collapsed_8 : tensor<4096xf32>) outs(%45 : tensor<4096xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %52 = arith.truncf %in : f32 to bf16
      linalg.yield %52 : bf16
    } -> tensor<4096xbf16>
    %47 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%collapsed_10 : tensor<4096xf32>) outs(%45 : tensor<4096xbf16>) {
    ^bb0(%in: f32, %out: bf16):
      %52 = arith.truncf %in : f32 to bf16
      linalg.yield %52 : bf16
    } -> tensor<4096xbf16>
    %48:3 = hal.tensor.barrier join(%44, %46, %47 : tensor<2x128x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>) => %arg6 : !hal.fence
    %49 = hal.tensor.export %48#0 : tensor<2x128x4096xbf16> -> !hal.buffer_view
    %50 = hal.tensor.export %48#1 : tensor<4096xbf16> -> !hal.buffer_view
    %51 = hal.tensor.export %48#2 : tensor<4096xbf16> -> !hal.buffer_view
    util.return %49, %50, %51 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
  util.func public @layer_norm_bf16_2x128x4096_n4096_wb_m14_manual(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = util.null : !hal.fence
    %c-1_i32 = arith.constant -1 : i32
    %c0 = arith.constant 0 : index
    %device_0 = hal.devices.get %c0 : !hal.device
    %fence = hal.fence.create device(%device_0 : !hal.device) flags("None") : !hal.fence
    %1:3 = util.call @layer_norm_bf16_2x128x4096_n4096_wb_m14_manual$async(%arg0, %arg1, %arg2, %arg3, %arg4, %0, %fence) : (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.fence, !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view)
    %status = hal.fence.await until([%fence]) timeout_millis(%c-1_i32) flags("None") : i32
    util.return %1#0, %1#1, %1#2 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
}
