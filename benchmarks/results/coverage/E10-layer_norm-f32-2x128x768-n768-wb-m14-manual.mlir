#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0, 0)>
#map2 = affine_map<(d0, d1) -> (d1)>
#map3 = affine_map<(d0) -> (d0)>
module @module {
  util.func public @layer_norm_f32_2x128x768_n768_wb_m14_manual$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view, %arg5: !hal.fence, %arg6: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub} {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 7.680000e+02 : f32
    %0 = hal.tensor.import wait(%arg5) => %arg0 : !hal.buffer_view -> tensor<2x128x768xf32>
    %1 = hal.tensor.import wait(%arg5) => %arg1 : !hal.buffer_view -> tensor<2x128x768xf32>
    %2 = hal.tensor.import wait(%arg5) => %arg2 : !hal.buffer_view -> tensor<2x128x1xf32>
    %3 = hal.tensor.import wait(%arg5) => %arg3 : !hal.buffer_view -> tensor<2x128x1xf32>
    %4 = hal.tensor.import wait(%arg5) => %arg4 : !hal.buffer_view -> tensor<768xf32>
    %collapsed = tensor.collapse_shape %0 [[0, 1], [2]] : tensor<2x128x768xf32> into tensor<256x768xf32>
    %collapsed_1 = tensor.collapse_shape %1 [[0, 1], [2]] : tensor<2x128x768xf32> into tensor<256x768xf32>
    %collapsed_2 = tensor.collapse_shape %2 [[0, 1], [2]] : tensor<2x128x1xf32> into tensor<256x1xf32>
    %5 = tensor.empty() : tensor<256x768xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_1, %collapsed_2 : tensor<256x768xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.subf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %collapsed_3 = tensor.collapse_shape %3 [[0, 1], [2]] : tensor<2x128x1xf32> into tensor<256x1xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %4 : tensor<256x768xf32>, tensor<768xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %8 = tensor.empty() : tensor<256xf32>
    %9 = linalg.fill ins(%cst : f32) outs(%8 : tensor<256xf32>) -> tensor<256xf32>
    %10 = linalg.matvec ins(%collapsed, %4 : tensor<256x768xf32>, tensor<768xf32>) outs(%9 : tensor<256xf32>) -> tensor<256xf32>
    %expanded = tensor.expand_shape %10 [[0, 1]] output_shape [256, 1] : tensor<256xf32> into tensor<256x1xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %6 : tensor<256x768xf32>, tensor<256x768xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %12 = linalg.matvec ins(%11, %4 : tensor<256x768xf32>, tensor<768xf32>) outs(%9 : tensor<256xf32>) -> tensor<256xf32>
    %expanded_4 = tensor.expand_shape %12 [[0, 1]] output_shape [256, 1] : tensor<256xf32> into tensor<256x1xf32>
    %13 = tensor.empty() : tensor<256x1xf32>
    %14 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%expanded : tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %90 = arith.divf %in, %cst_0 : f32
      linalg.yield %90 : f32
    } -> tensor<256x1xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%7, %14 : tensor<256x768xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.subf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed_3, %collapsed_3 : tensor<256x1xf32>, tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x1xf32>
    %17 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%expanded_4, %16 : tensor<256x1xf32>, tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x1xf32>
    %18 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%17 : tensor<256x1xf32>) outs(%13 : tensor<256x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %90 = arith.divf %in, %cst_0 : f32
      linalg.yield %90 : f32
    } -> tensor<256x1xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%6, %18 : tensor<256x768xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %20 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%15, %19 : tensor<256x768xf32>, tensor<256x768xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.subf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %21 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%20, %collapsed_3 : tensor<256x768xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %expanded_5 = tensor.expand_shape %21 [[0, 1], [2]] output_shape [2, 128, 768] : tensor<256x768xf32> into tensor<2x128x768xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%collapsed, %collapsed_3 : tensor<256x768xf32>, tensor<256x1xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %23 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%22, %6 : tensor<256x768xf32>, tensor<256x768xf32>) outs(%5 : tensor<256x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.mulf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<256x768xf32>
    %extracted_slice = tensor.extract_slice %23[0, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %extracted_slice_6 = tensor.extract_slice %23[16, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %24 = tensor.empty() : tensor<16x768xf32>
    %25 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice, %extracted_slice_6 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_7 = tensor.extract_slice %23[32, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%25, %extracted_slice_7 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_8 = tensor.extract_slice %23[48, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %27 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%26, %extracted_slice_8 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_9 = tensor.extract_slice %23[64, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%27, %extracted_slice_9 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_10 = tensor.extract_slice %23[80, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %29 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%28, %extracted_slice_10 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_11 = tensor.extract_slice %23[96, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %30 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%29, %extracted_slice_11 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_12 = tensor.extract_slice %23[112, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %31 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%30, %extracted_slice_12 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_13 = tensor.extract_slice %23[128, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %32 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%31, %extracted_slice_13 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_14 = tensor.extract_slice %23[144, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %33 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%32, %extracted_slice_14 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_15 = tensor.extract_slice %23[160, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %34 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%33, %extracted_slice_15 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_16 = tensor.extract_slice %23[176, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %35 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%34, %extracted_slice_16 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_17 = tensor.extract_slice %23[192, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %36 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%35, %extracted_slice_17 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_18 = tensor.extract_slice %23[208, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %37 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%36, %extracted_slice_18 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_19 = tensor.extract_slice %23[224, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %38 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%37, %extracted_slice_19 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_20 = tensor.extract_slice %23[240, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %39 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%38, %extracted_slice_20 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_21 = tensor.extract_slice %39[0, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_22 = tensor.collapse_shape %extracted_slice_21 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %extracted_slice_23 = tensor.extract_slice %39[1, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_24 = tensor.collapse_shape %extracted_slice_23 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %40 = tensor.empty() : tensor<768xf32>
    %41 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%collapsed_22, %collapsed_24 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_25 = tensor.extract_slice %39[2, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_26 = tensor.collapse_shape %extracted_slice_25 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %42 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%41, %collapsed_26 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_27 = tensor.extract_slice %39[3, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_28 = tensor.collapse_shape %extracted_slice_27 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %43 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%42, %collapsed_28 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_29 = tensor.extract_slice %39[4, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_30 = tensor.collapse_shape %extracted_slice_29 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %44 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%43, %collapsed_30 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_31 = tensor.extract_slice %39[5, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_32 = tensor.collapse_shape %extracted_slice_31 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %45 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%44, %collapsed_32 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_33 = tensor.extract_slice %39[6, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_34 = tensor.collapse_shape %extracted_slice_33 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %46 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%45, %collapsed_34 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_35 = tensor.extract_slice %39[7, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_36 = tensor.collapse_shape %extracted_slice_35 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %47 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%46, %collapsed_36 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_37 = tensor.extract_slice %39[8, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_38 = tensor.collapse_shape %extracted_slice_37 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %48 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%47, %collapsed_38 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_39 = tensor.extract_slice %39[9, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_40 = tensor.collapse_shape %extracted_slice_39 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %49 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%48, %collapsed_40 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_41 = tensor.extract_slice %39[10, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_42 = tensor.collapse_shape %extracted_slice_41 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %50 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%49, %collapsed_42 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_43 = tensor.extract_slice %39[11, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_44 = tensor.collapse_shape %extracted_slice_43 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %51 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%50, %collapsed_44 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_45 = tensor.extract_slice %39[12, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_46 = tensor.collapse_shape %extracted_slice_45 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %52 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%51, %collapsed_46 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_47 = tensor.extract_slice %39[13, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_48 = tensor.collapse_shape %extracted_slice_47 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %53 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%52, %collapsed_48 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_49 = tensor.extract_slice %39[14, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_50 = tensor.collapse_shape %extracted_slice_49 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %54 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%53, %collapsed_50 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_51 = tensor.extract_slice %39[15, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_52 = tensor.collapse_shape %extracted_slice_51 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %55 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%54, %collapsed_52 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_53 = tensor.extract_slice %collapsed[0, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %extracted_slice_54 = tensor.extract_slice %collapsed[16, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %56 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice_53, %extracted_slice_54 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_55 = tensor.extract_slice %collapsed[32, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %57 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%56, %extracted_slice_55 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_56 = tensor.extract_slice %collapsed[48, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %58 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%57, %extracted_slice_56 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_57 = tensor.extract_slice %collapsed[64, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %59 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%58, %extracted_slice_57 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_58 = tensor.extract_slice %collapsed[80, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %60 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%59, %extracted_slice_58 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_59 = tensor.extract_slice %collapsed[96, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %61 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%60, %extracted_slice_59 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_60 = tensor.extract_slice %collapsed[112, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %62 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%61, %extracted_slice_60 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_61 = tensor.extract_slice %collapsed[128, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %63 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%62, %extracted_slice_61 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_62 = tensor.extract_slice %collapsed[144, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %64 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%63, %extracted_slice_62 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_63 = tensor.extract_slice %collapsed[160, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %65 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%64, %extracted_slice_63 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_64 = tensor.extract_slice %collapsed[176, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %66 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%65, %extracted_slice_64 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_65 = tensor.extract_slice %collapsed[192, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %67 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%66, %extracted_slice_65 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_66 = tensor.extract_slice %collapsed[208, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %68 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%67, %extracted_slice_66 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_67 = tensor.extract_slice %collapsed[224, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %69 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%68, %extracted_slice_67 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_68 = tensor.extract_slice %collapsed[240, 0] [16, 768] [1, 1] : tensor<256x768xf32> to tensor<16x768xf32>
    %70 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%69, %extracted_slice_68 : tensor<16x768xf32>, tensor<16x768xf32>) outs(%24 : tensor<16x768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<16x768xf32>
    %extracted_slice_69 = tensor.extract_slice %70[0, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_70 = tensor.collapse_shape %extracted_slice_69 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %extracted_slice_71 = tensor.extract_slice %70[1, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_72 = tensor.collapse_shape %extracted_slice_71 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %71 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%collapsed_70, %collapsed_72 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_73 = tensor.extract_slice %70[2, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_74 = tensor.collapse_shape %extracted_slice_73 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %72 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%71, %collapsed_74 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_75 = tensor.extract_slice %70[3, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_76 = tensor.collapse_shape %extracted_slice_75 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %73 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%72, %collapsed_76 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_77 = tensor.extract_slice %70[4, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_78 = tensor.collapse_shape %extracted_slice_77 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %74 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%73, %collapsed_78 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_79 = tensor.extract_slice %70[5, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_80 = tensor.collapse_shape %extracted_slice_79 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %75 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%74, %collapsed_80 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_81 = tensor.extract_slice %70[6, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_82 = tensor.collapse_shape %extracted_slice_81 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %76 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%75, %collapsed_82 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_83 = tensor.extract_slice %70[7, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_84 = tensor.collapse_shape %extracted_slice_83 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %77 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%76, %collapsed_84 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_85 = tensor.extract_slice %70[8, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_86 = tensor.collapse_shape %extracted_slice_85 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %78 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%77, %collapsed_86 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_87 = tensor.extract_slice %70[9, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_88 = tensor.collapse_shape %extracted_slice_87 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %79 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%78, %collapsed_88 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_89 = tensor.extract_slice %70[10, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_90 = tensor.collapse_shape %extracted_slice_89 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %80 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%79, %collapsed_90 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_91 = tensor.extract_slice %70[11, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_92 = tensor.collapse_shape %extracted_slice_91 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %81 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%80, %collapsed_92 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_93 = tensor.extract_slice %70[12, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_94 = tensor.collapse_shape %extracted_slice_93 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %82 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%81, %collapsed_94 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_95 = tensor.extract_slice %70[13, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_96 = tensor.collapse_shape %extracted_slice_95 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %83 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%82, %collapsed_96 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_97 = tensor.extract_slice %70[14, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_98 = tensor.collapse_shape %extracted_slice_97 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %84 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%83, %collapsed_98 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %extracted_slice_99 = tensor.extract_slice %70[15, 0] [1, 768] [1, 1] : tensor<16x768xf32> to tensor<1x768xf32>
    %collapsed_100 = tensor.collapse_shape %extracted_slice_99 [[0, 1]] : tensor<1x768xf32> into tensor<768xf32>
    %85 = linalg.generic {indexing_maps = [#map3, #map3, #map3], iterator_types = ["parallel"]} ins(%84, %collapsed_100 : tensor<768xf32>, tensor<768xf32>) outs(%40 : tensor<768xf32>) {
    ^bb0(%in: f32, %in_101: f32, %out: f32):
      %90 = arith.addf %in, %in_101 : f32
      linalg.yield %90 : f32
    } -> tensor<768xf32>
    %86:3 = hal.tensor.barrier join(%expanded_5, %55, %85 : tensor<2x128x768xf32>, tensor<768xf32>, tensor<768xf32>) => %arg6 : !hal.fence
    %87 = hal.tensor.export %86#0 : tensor<2x128x768xf32> -> !hal.buffer_view
    %88 = hal.tensor.export %86#1 : tensor<768xf32> -> !hal.buffer_view
    %89 = hal.tensor.export %86#2 : tensor<768xf32> -> !hal.buffer_view
    util.return %87, %88, %89 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
  util.func public @layer_norm_f32_2x128x768_n768_wb_m14_manual(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.buffer_view, %arg4: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = util.null : !hal.fence
    %c-1_i32 = arith.constant -1 : i32
    %c0 = arith.constant 0 : index
    %device_0 = hal.devices.get %c0 : !hal.device
    %fence = hal.fence.create device(%device_0 : !hal.device) flags("None") : !hal.fence
    %1:3 = util.call @layer_norm_f32_2x128x768_n768_wb_m14_manual$async(%arg0, %arg1, %arg2, %arg3, %arg4, %0, %fence) : (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.fence, !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view)
    %status = hal.fence.await until([%fence]) timeout_millis(%c-1_i32) flags("None") : i32
    util.return %1#0, %1#1, %1#2 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
}
