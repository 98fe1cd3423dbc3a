#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, 0)>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map5 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
module @module {
  util.func public @group_norm_f32_1x512x64x64_g32_wb_m14_manual$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view, %arg5: !hal.fence, %arg6: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub} {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 6.553600e+04 : f32
    %0 = hal.tensor.import wait(%arg5) => %arg0 : !hal.buffer_view -> tensor<1x512x64x64xf32>
    %1 = hal.tensor.import wait(%arg5) => %arg1 : !hal.buffer_view -> tensor<1x512x64x64xf32>
    %2 = hal.tensor.import wait(%arg5) => %arg2 : !hal.buffer_view -> tensor<1x32xf32>
    %3 = hal.tensor.import wait(%arg5) => %arg3 : !hal.buffer_view -> tensor<1x32xf32>
    %4 = hal.tensor.import wait(%arg5) => %arg4 : !hal.buffer_view -> tensor<512xf32>
    %collapsed = tensor.collapse_shape %1 [[0], [1], [2, 3]] : tensor<1x512x64x64xf32> into tensor<1x512x4096xf32>
    %expanded = tensor.expand_shape %collapsed [[0], [1, 2], [3]] output_shape [1, 32, 16, 4096] : tensor<1x512x4096xf32> into tensor<1x32x16x4096xf32>
    %expanded_1 = tensor.expand_shape %2 [[0], [1, 2, 3]] output_shape [1, 32, 1, 1] : tensor<1x32xf32> into tensor<1x32x1x1xf32>
    %5 = tensor.empty() : tensor<1x32x16x4096xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded, %expanded_1 : tensor<1x32x16x4096xf32>, tensor<1x32x1x1xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.subf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %expanded_2 = tensor.expand_shape %3 [[0], [1, 2, 3]] output_shape [1, 32, 1, 1] : tensor<1x32xf32> into tensor<1x32x1x1xf32>
    %collapsed_3 = tensor.collapse_shape %0 [[0], [1], [2, 3]] : tensor<1x512x64x64xf32> into tensor<1x512x4096xf32>
    %expanded_4 = tensor.expand_shape %collapsed_3 [[0], [1, 2], [3]] output_shape [1, 32, 16, 4096] : tensor<1x512x4096xf32> into tensor<1x32x16x4096xf32>
    %expanded_5 = tensor.expand_shape %4 [[0, 1, 2, 3]] output_shape [1, 32, 16, 1] : tensor<512xf32> into tensor<1x32x16x1xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_4, %expanded_5 : tensor<1x32x16x4096xf32>, tensor<1x32x16x1xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %8 = tensor.empty() : tensor<1x32x1x1xf32>
    %9 = linalg.fill ins(%cst : f32) outs(%8 : tensor<1x32x1x1xf32>) -> tensor<1x32x1x1xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%7 : tensor<1x32x16x4096xf32>) outs(%9 : tensor<1x32x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %31 = arith.addf %in, %out : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x1x1xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%10 : tensor<1x32x1x1xf32>) outs(%8 : tensor<1x32x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %31 = arith.divf %in, %cst_0 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x1x1xf32>
    %12 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %6 : tensor<1x32x16x4096xf32>, tensor<1x32x16x4096xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%12 : tensor<1x32x16x4096xf32>) outs(%9 : tensor<1x32x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %31 = arith.addf %in, %out : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x1x1xf32>
    %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%13 : tensor<1x32x1x1xf32>) outs(%8 : tensor<1x32x1x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %31 = arith.divf %in, %cst_0 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x1x1xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%7, %11 : tensor<1x32x16x4096xf32>, tensor<1x32x1x1xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.subf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_2, %expanded_2 : tensor<1x32x1x1xf32>, tensor<1x32x1x1xf32>) outs(%8 : tensor<1x32x1x1xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x1x1xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%14, %16 : tensor<1x32x1x1xf32>, tensor<1x32x1x1xf32>) outs(%8 : tensor<1x32x1x1xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x1x1xf32>
    %18 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%6, %17 : tensor<1x32x16x4096xf32>, tensor<1x32x1x1xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%15, %18 : tensor<1x32x16x4096xf32>, tensor<1x32x16x4096xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.subf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%19, %expanded_2 : tensor<1x32x16x4096xf32>, tensor<1x32x1x1xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %collapsed_6 = tensor.collapse_shape %20 [[0], [1, 2], [3]] : tensor<1x32x16x4096xf32> into tensor<1x512x4096xf32>
    %expanded_7 = tensor.expand_shape %collapsed_6 [[0], [1], [2, 3]] output_shape [1, 512, 64, 64] : tensor<1x512x4096xf32> into tensor<1x512x64x64xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_4, %6 : tensor<1x32x16x4096xf32>, tensor<1x32x16x4096xf32>) outs(%5 : tensor<1x32x16x4096xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16x4096xf32>
    %22 = tensor.empty() : tensor<1x32x16xf32>
    %23 = linalg.fill ins(%cst : f32) outs(%22 : tensor<1x32x16xf32>) -> tensor<1x32x16xf32>
    %24 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%21 : tensor<1x32x16x4096xf32>) outs(%23 : tensor<1x32x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %31 = arith.addf %in, %out : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16xf32>
    %expanded_8 = tensor.expand_shape %3 [[0], [1, 2]] output_shape [1, 32, 1] : tensor<1x32xf32> into tensor<1x32x1xf32>
    %25 = linalg.generic {indexing_maps = [#map4, #map5, #map4], iterator_types = ["parallel", "parallel", "parallel"]} ins(%24, %expanded_8 : tensor<1x32x16xf32>, tensor<1x32x1xf32>) outs(%22 : tensor<1x32x16xf32>) {
    ^bb0(%in: f32, %in_11: f32, %out: f32):
      %31 = arith.mulf %in, %in_11 : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16xf32>
    %collapsed_9 = tensor.collapse_shape %25 [[0, 1, 2]] : tensor<1x32x16xf32> into tensor<512xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%expanded_4 : tensor<1x32x16x4096xf32>) outs(%23 : tensor<1x32x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %31 = arith.addf %in, %out : f32
      linalg.yield %31 : f32
    } -> tensor<1x32x16xf32>
    %collapsed_10 = tensor.collapse_shape %26 [[0, 1, 2]] : tensor<1x32x16xf32> into tensor<512xf32>
    %27:3 = hal.tensor.barrier join(%expanded_7, %collapsed_9, %collapsed_10 : tensor<1x512x64x64xf32>, tensor<512xf32>, tensor<512xf32>) => %arg6 : !hal.fence
    %28 = hal.tensor.export %27#0 : tensor<1x512x64x64xf32> -> !hal.buffer_view
    %29 = hal.tensor.export %27#1 : tensor<512xf32> -> !hal.buffer_view
    %30 = hal.tensor.export %27#2 : tensor<512xf32> -> !hal.buffer_view
    util.return %28, %29, %30 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
  util.func public @group_norm_f32_1x512x64x64_g32_wb_m14_manual(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = util.null : !hal.fence
    %c-1_i32 = arith.constant -1 : i32
    %c0 = arith.constant 0 : index
    %device_0 = hal.devices.get %c0 : !hal.device
    %fence = hal.fence.create device(%device_0 : !hal.device) flags("None") : !hal.fence
    %1:3 = util.call @group_norm_f32_1x512x64x64_g32_wb_m14_manual$async(%arg0, %arg1, %arg2, %arg3, %arg4, %0, %fence) : (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.fence, !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view)
    %status = hal.fence.await until([%fence]) timeout_millis(%c-1_i32) flags("None") : i32
    util.return %1#0, %1#1, %1#2 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
}
