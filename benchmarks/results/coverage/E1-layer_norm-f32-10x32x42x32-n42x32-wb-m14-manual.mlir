#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0, 0)>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0) -> (d0)>
module @module {
  util.func public @layer_norm_f32_10x32x42x32_n42x32_wb_m14_manual$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view, %arg5: !hal.fence, %arg6: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub} {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.344000e+03 : f32
    %0 = hal.tensor.import wait(%arg5) => %arg0 : !hal.buffer_view -> tensor<10x32x42x32xf32>
    %1 = hal.tensor.import wait(%arg5) => %arg1 : !hal.buffer_view -> tensor<10x32x42x32xf32>
    %2 = hal.tensor.import wait(%arg5) => %arg2 : !hal.buffer_view -> tensor<10x32x1x1xf32>
    %3 = hal.tensor.import wait(%arg5) => %arg3 : !hal.buffer_view -> tensor<10x32x1x1xf32>
    %4 = hal.tensor.import wait(%arg5) => %arg4 : !hal.buffer_view -> tensor<42x32xf32>
    %collapsed = tensor.collapse_shape %0 [[0, 1], [2, 3]] : tensor<10x32x42x32xf32> into tensor<320x1344xf32>
    %collapsed_1 = tensor.collapse_shape %1 [[0, 1], [2, 3]] : tensor<10x32x42x32xf32> into tensor<320x1344xf32>
    %collapsed_2 = tensor.collapse_shape %2 [[0, 1, 2], [3]] : tensor<10x32x1x1xf32> into tensor<320x1xf32>
    %5 = tensor.empty() : tensor<320x1344xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_1, %collapsed_2 : tensor<320x1344xf32>, tensor<320x1xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.subf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %collapsed_3 = tensor.collapse_shape %3 [[0, 1, 2], [3]] : tensor<10x32x1x1xf32> into tensor<320x1xf32>
    %collapsed_4 = tensor.collapse_shape %4 [[0, 1]] : tensor<42x32xf32> into tensor<1344xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %collapsed_4 : tensor<320x1344xf32>, tensor<1344xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %8 = tensor.empty() : tensor<320xf32>
    %9 = linalg.fill ins(%cst : f32) outs(%8 : tensor<320xf32>) -> tensor<320xf32>
    %10 = linalg.matvec ins(%collapsed, %collapsed_4 : tensor<320x1344xf32>, tensor<1344xf32>) outs(%9 : tensor<320xf32>) -> tensor<320xf32>
    %expanded = tensor.expand_shape %10 [[0, 1]] output_shape [320, 1] : tensor<320xf32> into tensor<320x1xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %6 : tensor<320x1344xf32>, tensor<320x1344xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %12 = linalg.matvec ins(%11, %collapsed_4 : tensor<320x1344xf32>, tensor<1344xf32>) outs(%9 : tensor<320xf32>) -> tensor<320xf32>
    %expanded_5 = tensor.expand_shape %12 [[0, 1]] output_shape [320, 1] : tensor<320xf32> into tensor<320x1xf32>
    %13 = tensor.empty() : tensor<320x1xf32>
    %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%expanded : tensor<320x1xf32>) outs(%13 : tensor<320x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %99 = arith.divf %in, %cst_0 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %14 : tensor<320x1344xf32>, tensor<320x1xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.subf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_3, %collapsed_3 : tensor<320x1xf32>, tensor<320x1xf32>) outs(%13 : tensor<320x1xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%expanded_5, %16 : tensor<320x1xf32>, tensor<320x1xf32>) outs(%13 : tensor<320x1xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1xf32>
    %18 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%17 : tensor<320x1xf32>) outs(%13 : tensor<320x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %99 = arith.divf %in, %cst_0 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %18 : tensor<320x1344xf32>, tensor<320x1xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%15, %19 : tensor<320x1344xf32>, tensor<320x1344xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.subf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%20, %collapsed_3 : tensor<320x1344xf32>, tensor<320x1xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %expanded_6 = tensor.expand_shape %21 [[0, 1], [2, 3]] output_shape [10, 32, 42, 32] : tensor<320x1344xf32> into tensor<10x32x42x32xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %collapsed_3 : tensor<320x1344xf32>, tensor<320x1xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %23 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%22, %6 : tensor<320x1344xf32>, tensor<320x1344xf32>) outs(%5 : tensor<320x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.mulf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<320x1344xf32>
    %extracted_slice = tensor.extract_slice %23[0, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %extracted_slice_7 = tensor.extract_slice %23[20, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %24 = tensor.empty() : tensor<20x1344xf32>
    %25 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice, %extracted_slice_7 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_8 = tensor.extract_slice %23[40, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%25, %extracted_slice_8 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_9 = tensor.extract_slice %23[60, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %27 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%26, %extracted_slice_9 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_10 = tensor.extract_slice %23[80, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%27, %extracted_slice_10 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_11 = tensor.extract_slice %23[100, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %29 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%28, %extracted_slice_11 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_12 = tensor.extract_slice %23[120, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %30 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%29, %extracted_slice_12 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_13 = tensor.extract_slice %23[140, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%30, %extracted_slice_13 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_14 = tensor.extract_slice %23[160, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %32 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%31, %extracted_slice_14 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_15 = tensor.extract_slice %23[180, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %33 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%32, %extracted_slice_15 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_16 = tensor.extract_slice %23[200, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %34 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%33, %extracted_slice_16 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_17 = tensor.extract_slice %23[220, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %35 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%34, %extracted_slice_17 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_18 = tensor.extract_slice %23[240, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %36 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%35, %extracted_slice_18 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_19 = tensor.extract_slice %23[260, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %37 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%36, %extracted_slice_19 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_20 = tensor.extract_slice %23[280, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %38 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%37, %extracted_slice_20 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_21 = tensor.extract_slice %23[300, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %39 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%38, %extracted_slice_21 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_22 = tensor.extract_slice %39[16, 0] [4, 1344] [1, 1] : tensor<20x1344xf32> to tensor<4x1344xf32>
    %extracted_slice_23 = tensor.extract_slice %39[0, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %extracted_slice_24 = tensor.extract_slice %39[1, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %40 = tensor.empty() : tensor<1x1344xf32>
    %41 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice_23, %extracted_slice_24 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_25 = tensor.extract_slice %39[2, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %42 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%41, %extracted_slice_25 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_26 = tensor.extract_slice %39[3, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %43 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%42, %extracted_slice_26 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_27 = tensor.extract_slice %39[4, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %44 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%43, %extracted_slice_27 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_28 = tensor.extract_slice %39[5, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %45 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%44, %extracted_slice_28 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_29 = tensor.extract_slice %39[6, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %46 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%45, %extracted_slice_29 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_30 = tensor.extract_slice %39[7, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %47 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%46, %extracted_slice_30 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_31 = tensor.extract_slice %39[8, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %48 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%47, %extracted_slice_31 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_32 = tensor.extract_slice %39[9, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %49 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%48, %extracted_slice_32 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_33 = tensor.extract_slice %39[10, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %50 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%49, %extracted_slice_33 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_34 = tensor.extract_slice %39[11, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %51 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%50, %extracted_slice_34 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_35 = tensor.extract_slice %39[12, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %52 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%51, %extracted_slice_35 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_36 = tensor.extract_slice %39[13, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %53 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%52, %extracted_slice_36 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_37 = tensor.extract_slice %39[14, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %54 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%53, %extracted_slice_37 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_38 = tensor.extract_slice %39[15, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %55 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%54, %extracted_slice_38 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %collapsed_39 = tensor.collapse_shape %55 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %extracted_slice_40 = tensor.extract_slice %extracted_slice_22[0, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_41 = tensor.collapse_shape %extracted_slice_40 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %56 = tensor.empty() : tensor<1344xf32>
    %57 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%collapsed_39, %collapsed_41 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %extracted_slice_42 = tensor.extract_slice %extracted_slice_22[1, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_43 = tensor.collapse_shape %extracted_slice_42 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %58 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%57, %collapsed_43 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %extracted_slice_44 = tensor.extract_slice %extracted_slice_22[2, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_45 = tensor.collapse_shape %extracted_slice_44 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %59 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%58, %collapsed_45 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %extracted_slice_46 = tensor.extract_slice %extracted_slice_22[3, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_47 = tensor.collapse_shape %extracted_slice_46 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %60 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%59, %collapsed_47 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %expanded_48 = tensor.expand_shape %60 [[0, 1]] output_shape [42, 32] : tensor<1344xf32> into tensor<42x32xf32>
    %extracted_slice_49 = tensor.extract_slice %collapsed[0, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %extracted_slice_50 = tensor.extract_slice %collapsed[20, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %61 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice_49, %extracted_slice_50 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_51 = tensor.extract_slice %collapsed[40, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %62 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%61, %extracted_slice_51 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_52 = tensor.extract_slice %collapsed[60, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %63 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%62, %extracted_slice_52 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_53 = tensor.extract_slice %collapsed[80, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %64 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%63, %extracted_slice_53 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_54 = tensor.extract_slice %collapsed[100, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %65 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%64, %extracted_slice_54 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_55 = tensor.extract_slice %collapsed[120, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %66 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%65, %extracted_slice_55 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_56 = tensor.extract_slice %collapsed[140, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %67 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%66, %extracted_slice_56 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_57 = tensor.extract_slice %collapsed[160, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %68 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%67, %extracted_slice_57 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_58 = tensor.extract_slice %collapsed[180, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %69 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%68, %extracted_slice_58 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_59 = tensor.extract_slice %collapsed[200, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %70 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%69, %extracted_slice_59 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_60 = tensor.extract_slice %collapsed[220, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %71 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%70, %extracted_slice_60 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_61 = tensor.extract_slice %collapsed[240, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %72 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%71, %extracted_slice_61 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_62 = tensor.extract_slice %collapsed[260, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %73 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%72, %extracted_slice_62 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_63 = tensor.extract_slice %collapsed[280, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %74 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%73, %extracted_slice_63 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_64 = tensor.extract_slice %collapsed[300, 0] [20, 1344] [1, 1] : tensor<320x1344xf32> to tensor<20x1344xf32>
    %75 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%74, %extracted_slice_64 : tensor<20x1344xf32>, tensor<20x1344xf32>) outs(%24 : tensor<20x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<20x1344xf32>
    %extracted_slice_65 = tensor.extract_slice %75[16, 0] [4, 1344] [1, 1] : tensor<20x1344xf32> to tensor<4x1344xf32>
    %extracted_slice_66 = tensor.extract_slice %75[0, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %extracted_slice_67 = tensor.extract_slice %75[1, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %76 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice_66, %extracted_slice_67 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_68 = tensor.extract_slice %75[2, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %77 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%76, %extracted_slice_68 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_69 = tensor.extract_slice %75[3, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %78 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%77, %extracted_slice_69 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_70 = tensor.extract_slice %75[4, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %79 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%78, %extracted_slice_70 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_71 = tensor.extract_slice %75[5, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %80 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%79, %extracted_slice_71 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_72 = tensor.extract_slice %75[6, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %81 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%80, %extracted_slice_72 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_73 = tensor.extract_slice %75[7, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %82 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%81, %extracted_slice_73 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_74 = tensor.extract_slice %75[8, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %83 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%82, %extracted_slice_74 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_75 = tensor.extract_slice %75[9, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %84 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%83, %extracted_slice_75 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_76 = tensor.extract_slice %75[10, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %85 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%84, %extracted_slice_76 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_77 = tensor.extract_slice %75[11, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %86 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%85, %extracted_slice_77 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_78 = tensor.extract_slice %75[12, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %87 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%86, %extracted_slice_78 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_79 = tensor.extract_slice %75[13, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %88 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%87, %extracted_slice_79 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_80 = tensor.extract_slice %75[14, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %89 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%88, %extracted_slice_80 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %extracted_slice_81 = tensor.extract_slice %75[15, 0] [1, 1344] [1, 1] : tensor<20x1344xf32> to tensor<1x1344xf32>
    %90 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%89, %extracted_slice_81 : tensor<1x1344xf32>, tensor<1x1344xf32>) outs(%40 : tensor<1x1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1x1344xf32>
    %collapsed_82 = tensor.collapse_shape %90 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %extracted_slice_83 = tensor.extract_slice %extracted_slice_65[0, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_84 = tensor.collapse_shape %extracted_slice_83 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %91 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%collapsed_82, %collapsed_84 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %extracted_slice_85 = tensor.extract_slice %extracted_slice_65[1, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_86 = tensor.collapse_shape %extracted_slice_85 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %92 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%91, %collapsed_86 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %extracted_slice_87 = tensor.extract_slice %extracted_slice_65[2, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_88 = tensor.collapse_shape %extracted_slice_87 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %93 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%92, %collapsed_88 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %extracted_slice_89 = tensor.extract_slice %extracted_slice_65[3, 0] [1, 1344] [1, 1] : tensor<4x1344xf32> to tensor<1x1344xf32>
    %collapsed_90 = tensor.collapse_shape %extracted_slice_89 [[0, 1]] : tensor<1x1344xf32> into tensor<1344xf32>
    %94 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%93, %collapsed_90 : tensor<1344xf32>, tensor<1344xf32>) outs(%56 : tensor<1344xf32>) {
    ^bb0(%in: f32, %in_92: f32, %out: f32):
      %99 = arith.addf %in, %in_92 : f32
      linalg.yield %99 : f32
    } -> tensor<1344xf32>
    %expanded_91 = tensor.expand_shape %94 [[0, 1]] output_shape [42, 32] : tensor<1344xf32> into tensor<42x32xf32>
    %95:3 = hal.tensor.barrier join(%expanded_6, %expanded_48, %expanded_91 : tensor<10x32x42x32xf32>, tensor<42x32xf32>, tensor<42x32xf32>) => %arg6 : !hal.fence
    %96 = hal.tensor.export %95#0 : tensor<10x32x42x32xf32> -> !hal.buffer_view
    %97 = hal.tensor.export %95#1 : tensor<42x32xf32> -> !hal.buffer_view
    %98 = hal.tensor.export %95#2 : tensor<42x32xf32> -> !hal.buffer_view
    util.return %96, %97, %98 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
  util.func public @layer_norm_f32_10x32x42x32_n42x32_wb_m14_manual(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = util.null : !hal.fence
    %c-1_i32 = arith.constant -1 : i32
    %c0 = arith.constant 0 : index
    %device_0 = hal.devices.get %c0 : !hal.device
    %fence = hal.fence.create device(%device_0 : !hal.device) flags("None") : !hal.fence
    %1:3 = util.call @layer_norm_f32_10x32x42x32_n42x32_wb_m14_manual$async(%arg0, %arg1, %arg2, %arg3, %arg4, %0, %fence) : (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.fence, !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view)
    %status = hal.fence.await until([%fence]) timeout_millis(%c-1_i32) flags("None") : i32
    util.return %1#0, %1#1, %1#2 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
}
