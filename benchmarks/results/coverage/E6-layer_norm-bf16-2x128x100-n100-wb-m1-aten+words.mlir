#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
#map3 = affine_map<(d0, d1, d2) -> (d2)>
#map4 = affine_map<(d0, d1, d2) -> ()>
module @module {
  util.func public @layer_norm_bf16_2x128x100_n100_wb_m1_aten$async(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view, %arg2: !hal.buffer_view, %arg3: !hal.fence, %arg4: !hal.fence) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {inlining_policy = #util.inline.never, iree.abi.model = "coarse-fences", iree.abi.stub, preprocessing_pipeline = #util.preprocessing_pipeline<"iree-preprocessing-make-single-dispatch">} {
    %cst = arith.constant 1.000000e-05 : f64
    %cst_0 = arith.constant dense<65536> : tensor<i64>
    %cst_1 = arith.constant 0x7FF0000000000000 : f64
    %cst_2 = arith.constant dense<0x7FC00000> : tensor<2x128x1xf32>
    %cst_3 = arith.constant dense<2143289344> : tensor<2x128x100xi32>
    %cst_4 = arith.constant 0.000000e+00 : f64
    %cst_5 = arith.constant 0.000000e+00 : f32
    %c65536_i32 = arith.constant 65536 : i32
    %c-65536_i32 = arith.constant -65536 : i32
    %cst_6 = arith.constant 1.000000e+02 : f64
    %cst_7 = arith.constant 1.000000e+02 : f32
    %c1_i32 = arith.constant 1 : i32
    %c32767_i32 = arith.constant 32767 : i32
    %c65535_i32 = arith.constant 65535 : i32
    %0 = hal.tensor.import wait(%arg3) => %arg0 : !hal.buffer_view -> tensor<2x128x100xbf16>
    %1 = hal.tensor.import wait(%arg3) => %arg1 : !hal.buffer_view -> tensor<100xbf16>
    %2 = hal.tensor.import wait(%arg3) => %arg2 : !hal.buffer_view -> tensor<100xbf16>
    %3 = iree_tensor_ext.bitcast %0 : tensor<2x128x100xbf16> -> tensor<2x128x50xi32>
    %4 = tensor.empty() : tensor<2x128x50xi32>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x128x50xi32>) outs(%4 : tensor<2x128x50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.muli %in, %c65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x50xi32>
    %6 = iree_tensor_ext.bitcast %5 : tensor<2x128x50xi32> -> tensor<2x128x50xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%3 : tensor<2x128x50xi32>) outs(%4 : tensor<2x128x50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.andi %in, %c-65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x50xi32>
    %8 = iree_tensor_ext.bitcast %7 : tensor<2x128x50xi32> -> tensor<2x128x50xf32>
    %expanded = tensor.expand_shape %6 [[0], [1], [2, 3]] output_shape [2, 128, 50, 1] : tensor<2x128x50xf32> into tensor<2x128x50x1xf32>
    %expanded_8 = tensor.expand_shape %8 [[0], [1], [2, 3]] output_shape [2, 128, 50, 1] : tensor<2x128x50xf32> into tensor<2x128x50x1xf32>
    %concat = tensor.concat dim(3) %expanded, %expanded_8 : (tensor<2x128x50x1xf32>, tensor<2x128x50x1xf32>) -> tensor<2x128x50x2xf32>
    %collapsed = tensor.collapse_shape %concat [[0], [1], [2, 3]] : tensor<2x128x50x2xf32> into tensor<2x128x100xf32>
    %9 = iree_tensor_ext.bitcast %1 : tensor<100xbf16> -> tensor<50xi32>
    %10 = tensor.empty() : tensor<50xi32>
    %11 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%9 : tensor<50xi32>) outs(%10 : tensor<50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.muli %in, %c65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<50xi32>
    %12 = iree_tensor_ext.bitcast %11 : tensor<50xi32> -> tensor<50xf32>
    %13 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%9 : tensor<50xi32>) outs(%10 : tensor<50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.andi %in, %c-65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<50xi32>
    %14 = iree_tensor_ext.bitcast %13 : tensor<50xi32> -> tensor<50xf32>
    %expanded_9 = tensor.expand_shape %12 [[0, 1]] output_shape [50, 1] : tensor<50xf32> into tensor<50x1xf32>
    %expanded_10 = tensor.expand_shape %14 [[0, 1]] output_shape [50, 1] : tensor<50xf32> into tensor<50x1xf32>
    %concat_11 = tensor.concat dim(1) %expanded_9, %expanded_10 : (tensor<50x1xf32>, tensor<50x1xf32>) -> tensor<50x2xf32>
    %collapsed_12 = tensor.collapse_shape %concat_11 [[0, 1]] : tensor<50x2xf32> into tensor<100xf32>
    %15 = iree_tensor_ext.bitcast %2 : tensor<100xbf16> -> tensor<50xi32>
    %16 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%15 : tensor<50xi32>) outs(%10 : tensor<50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.muli %in, %c65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<50xi32>
    %17 = iree_tensor_ext.bitcast %16 : tensor<50xi32> -> tensor<50xf32>
    %18 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%15 : tensor<50xi32>) outs(%10 : tensor<50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.andi %in, %c-65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<50xi32>
    %19 = iree_tensor_ext.bitcast %18 : tensor<50xi32> -> tensor<50xf32>
    %expanded_13 = tensor.expand_shape %17 [[0, 1]] output_shape [50, 1] : tensor<50xf32> into tensor<50x1xf32>
    %expanded_14 = tensor.expand_shape %19 [[0, 1]] output_shape [50, 1] : tensor<50xf32> into tensor<50x1xf32>
    %concat_15 = tensor.concat dim(1) %expanded_13, %expanded_14 : (tensor<50x1xf32>, tensor<50x1xf32>) -> tensor<50x2xf32>
    %collapsed_16 = tensor.collapse_shape %concat_15 [[0, 1]] : tensor<50x2xf32> into tensor<100xf32>
    %20 = tensor.empty() : tensor<2x128x100xf64>
    %21 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapsed : tensor<2x128x100xf32>) outs(%20 : tensor<2x128x100xf64>) {
    ^bb0(%in: f32, %out: f64):
      %64 = arith.extf %in : f32 to f64
      linalg.yield %64 : f64
    } -> tensor<2x128x100xf64>
    %22 = tensor.empty() : tensor<2x128x1xf64>
    %23 = linalg.fill ins(%cst_4 : f64) outs(%22 : tensor<2x128x1xf64>) -> tensor<2x128x1xf64>
    %24 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%21 : tensor<2x128x100xf64>) outs(%23 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %64 = arith.addf %in, %out : f64
      linalg.yield %64 : f64
    } -> tensor<2x128x1xf64>
    %25 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%24 : tensor<2x128x1xf64>) outs(%22 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %64 = arith.divf %in, %cst_6 : f64
      linalg.yield %64 : f64
    } -> tensor<2x128x1xf64>
    %26 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%21, %25 : tensor<2x128x100xf64>, tensor<2x128x1xf64>) outs(%20 : tensor<2x128x100xf64>) {
    ^bb0(%in: f64, %in_21: f64, %out: f64):
      %64 = arith.subf %in, %in_21 : f64
      linalg.yield %64 : f64
    } -> tensor<2x128x100xf64>
    %27 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%26, %26 : tensor<2x128x100xf64>, tensor<2x128x100xf64>) outs(%20 : tensor<2x128x100xf64>) {
    ^bb0(%in: f64, %in_21: f64, %out: f64):
      %64 = arith.mulf %in, %in_21 : f64
      linalg.yield %64 : f64
    } -> tensor<2x128x100xf64>
    %28 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%27 : tensor<2x128x100xf64>) outs(%23 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %64 = arith.addf %in, %out : f64
      linalg.yield %64 : f64
    } -> tensor<2x128x1xf64>
    %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%28 : tensor<2x128x1xf64>) outs(%22 : tensor<2x128x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %64 = arith.divf %in, %cst_6 : f64
      linalg.yield %64 : f64
    } -> tensor<2x128x1xf64>
    %30 = tensor.empty() : tensor<2x128x1xf32>
    %31 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%29 : tensor<2x128x1xf64>) outs(%30 : tensor<2x128x1xf32>) {
    ^bb0(%in: f64, %out: f32):
      %64 = arith.truncf %in : f64 to f32
      linalg.yield %64 : f32
    } -> tensor<2x128x1xf32>
    %32 = linalg.fill ins(%cst_5 : f32) outs(%30 : tensor<2x128x1xf32>) -> tensor<2x128x1xf32>
    %33 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "parallel", "reduction"]} ins(%collapsed : tensor<2x128x100xf32>) outs(%32 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %64 = arith.addf %in, %out : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x1xf32>
    %34 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%33 : tensor<2x128x1xf32>) outs(%30 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %64 = arith.divf %in, %cst_7 : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x1xf32>
    %35 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%31 : tensor<2x128x1xf32>) outs(%30 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %64 = arith.truncf %cst : f64 to f32
      %65 = arith.addf %in, %64 : f32
      linalg.yield %65 : f32
    } -> tensor<2x128x1xf32>
    %36 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%35 : tensor<2x128x1xf32>) outs(%30 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %64 = math.rsqrt %in : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x1xf32>
    %37 = tensor.empty() : tensor<2x128x100xf32>
    %38 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapsed, %34 : tensor<2x128x100xf32>, tensor<2x128x1xf32>) outs(%37 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_21: f32, %out: f32):
      %64 = arith.subf %in, %in_21 : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x100xf32>
    %39 = linalg.generic {indexing_maps = [#map, #map2, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%38, %36 : tensor<2x128x100xf32>, tensor<2x128x1xf32>) outs(%37 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_21: f32, %out: f32):
      %64 = arith.mulf %in, %in_21 : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x100xf32>
    %40 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%39, %collapsed_12 : tensor<2x128x100xf32>, tensor<100xf32>) outs(%37 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_21: f32, %out: f32):
      %64 = arith.mulf %in, %in_21 : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x100xf32>
    %41 = linalg.generic {indexing_maps = [#map, #map3, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%40, %collapsed_16 : tensor<2x128x100xf32>, tensor<100xf32>) outs(%37 : tensor<2x128x100xf32>) {
    ^bb0(%in: f32, %in_21: f32, %out: f32):
      %64 = arith.addf %in, %in_21 : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x100xf32>
    %42 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%34 : tensor<2x128x1xf32>) outs(%30 : tensor<2x128x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %64 = math.absf %in : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x1xf32>
    %43 = tensor.empty() : tensor<2x128x1xi1>
    %44 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%42 : tensor<2x128x1xf32>) outs(%43 : tensor<2x128x1xi1>) {
    ^bb0(%in: f32, %out: i1):
      %64 = arith.extf %in : f32 to f64
      %65 = arith.cmpf oeq, %64, %cst_1 : f64
      linalg.yield %65 : i1
    } -> tensor<2x128x1xi1>
    %45 = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%44, %cst_2, %34 : tensor<2x128x1xi1>, tensor<2x128x1xf32>, tensor<2x128x1xf32>) outs(%30 : tensor<2x128x1xf32>) {
    ^bb0(%in: i1, %in_21: f32, %in_22: f32, %out: f32):
      %64 = arith.select %in, %in_21, %in_22 : f32
      linalg.yield %64 : f32
    } -> tensor<2x128x1xf32>
    %46 = iree_tensor_ext.bitcast %41 : tensor<2x128x100xf32> -> tensor<2x128x100xi32>
    %47 = tensor.empty() : tensor<2x128x100xi32>
    %48 = linalg.generic {indexing_maps = [#map, #map4, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%46, %cst_0 : tensor<2x128x100xi32>, tensor<i64>) outs(%47 : tensor<2x128x100xi32>) {
    ^bb0(%in: i32, %in_21: i64, %out: i32):
      %64 = arith.trunci %in_21 : i64 to i32
      %65 = arith.sitofp %in : i32 to f64
      %66 = arith.sitofp %64 : i32 to f64
      %67 = arith.divf %65, %66 : f64
      %68 = math.floor %67 : f64
      %69 = arith.fptosi %68 : f64 to i32
      linalg.yield %69 : i32
    } -> tensor<2x128x100xi32>
    %49 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%48 : tensor<2x128x100xi32>) outs(%47 : tensor<2x128x100xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.andi %in, %c1_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x100xi32>
    %50 = tensor.empty() : tensor<2x128x100xi1>
    %51 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%41, %41 : tensor<2x128x100xf32>, tensor<2x128x100xf32>) outs(%50 : tensor<2x128x100xi1>) {
    ^bb0(%in: f32, %in_21: f32, %out: i1):
      %64 = arith.cmpf une, %in, %in_21 : f32
      linalg.yield %64 : i1
    } -> tensor<2x128x100xi1>
    %52 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%46 : tensor<2x128x100xi32>) outs(%47 : tensor<2x128x100xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.addi %in, %c32767_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x100xi32>
    %53 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%52, %49 : tensor<2x128x100xi32>, tensor<2x128x100xi32>) outs(%47 : tensor<2x128x100xi32>) {
    ^bb0(%in: i32, %in_21: i32, %out: i32):
      %64 = arith.addi %in, %in_21 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x100xi32>
    %54 = linalg.generic {indexing_maps = [#map, #map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%51, %cst_3, %53 : tensor<2x128x100xi1>, tensor<2x128x100xi32>, tensor<2x128x100xi32>) outs(%47 : tensor<2x128x100xi32>) {
    ^bb0(%in: i1, %in_21: i32, %in_22: i32, %out: i32):
      %64 = arith.select %in, %in_21, %in_22 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x100xi32>
    %55 = linalg.generic {indexing_maps = [#map, #map4, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%54, %cst_0 : tensor<2x128x100xi32>, tensor<i64>) outs(%47 : tensor<2x128x100xi32>) {
    ^bb0(%in: i32, %in_21: i64, %out: i32):
      %64 = arith.trunci %in_21 : i64 to i32
      %65 = arith.sitofp %in : i32 to f64
      %66 = arith.sitofp %64 : i32 to f64
      %67 = arith.divf %65, %66 : f64
      %68 = math.floor %67 : f64
      %69 = arith.fptosi %68 : f64 to i32
      linalg.yield %69 : i32
    } -> tensor<2x128x100xi32>
    %expanded_17 = tensor.expand_shape %55 [[0], [1], [2, 3]] output_shape [2, 128, 50, 2] : tensor<2x128x100xi32> into tensor<2x128x50x2xi32>
    %extracted_slice = tensor.extract_slice %expanded_17[0, 0, 0, 0] [2, 128, 50, 1] [1, 1, 1, 1] : tensor<2x128x50x2xi32> to tensor<2x128x50x1xi32>
    %collapsed_18 = tensor.collapse_shape %extracted_slice [[0], [1], [2, 3]] : tensor<2x128x50x1xi32> into tensor<2x128x50xi32>
    %56 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapsed_18 : tensor<2x128x50xi32>) outs(%4 : tensor<2x128x50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.andi %in, %c65535_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x50xi32>
    %extracted_slice_19 = tensor.extract_slice %expanded_17[0, 0, 0, 1] [2, 128, 50, 1] [1, 1, 1, 1] : tensor<2x128x50x2xi32> to tensor<2x128x50x1xi32>
    %collapsed_20 = tensor.collapse_shape %extracted_slice_19 [[0], [1], [2, 3]] : tensor<2x128x50x1xi32> into tensor<2x128x50xi32>
    %57 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%collapsed_20 : tensor<2x128x50xi32>) outs(%4 : tensor<2x128x50xi32>) {
    ^bb0(%in: i32, %out: i32):
      %64 = arith.muli %in, %c65536_i32 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x50xi32>
    %58 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%56, %57 : tensor<2x128x50xi32>, tensor<2x128x50xi32>) outs(%4 : tensor<2x128x50xi32>) {
    ^bb0(%in: i32, %in_21: i32, %out: i32):
      %64 = arith.ori %in, %in_21 : i32
      linalg.yield %64 : i32
    } -> tensor<2x128x50xi32>
    %59 = iree_tensor_ext.bitcast %58 : tensor<2x128x50xi32> -> tensor<2x128x100xbf16>
    %60:3 = hal.tensor.barrier join(%59, %45, %36 : tensor<2x128x100xbf16>, tensor<2x128x1xf32>, tensor<2x128x1xf32>) => %arg4 : !hal.fence
    %61 = hal.tensor.export %60#0 : tensor<2x128x100xbf16> -> !hal.buffer_view
    %62 = hal.tensor.export %60#1 : tensor<2x128x1xf32> -> !hal.buffer_view
    %63 = hal.tensor.export %60#2 : tensor<2x128x1xf32> -> !hal.buffer_view
    util.return %61, %62, %63 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
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
