//===- GraphTensorOps.td - Data movement and shape ops -----*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHTENSOROPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHTENSOROPS_TD

include "strait/Dialect/Graph/GraphBase.td"

def Graph_ConstantOp : Graph_Op<"Constant", [ConstantLike, Pure, InferTypeOpAdaptor]> {
  let summary = "a constant tensor";
  let description = [{
    ```mlir
    %c = graph.Constant dense<[1, 2]> : tensor<2xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs AnyTensor:$output);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Graph_VariableOp : Graph_Op<"Variable", [Symbol]> {
  let summary = "a model weight (module-level)";
  let description = [{
    A weight of the model: an ONNX float initializer. `value` is absent when
    the model was imported shape-only. `frozen` variables are not trained.

    ```mlir
    graph.Variable @wte : tensor<50257x768xf32>
    graph.Variable @ln_f.bias : tensor<768xf32> = dense<0.0> : tensor<768xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                   OptionalAttr<ElementsAttr>:$value, UnitAttr:$frozen);
  let assemblyFormat = "$sym_name attr-dict `:` $type (`=` $value^)?";
  let hasVerifier = 1;
}

def Graph_ReadVariableOp : Graph_Op<"ReadVariable", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead]>]> {
  let summary = "the current value of a variable";
  let description = [{
    ```mlir
    %w = graph.ReadVariable @wte : tensor<50257x768xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$variable);
  let results = (outs AnyTensor:$value);
  let assemblyFormat = "$variable attr-dict `:` type($value)";
}

def Graph_ReshapeOp : Graph_GenericOp<"Reshape", [Pure]> {
  let summary = "same data, new shape";
  let description = [{
    `shape` follows ONNX: 0 copies the input dimension (unless allowzero),
    -1 is inferred.

    ```mlir
    %y = graph.Reshape %x {shape = array<i64: 0, -1>} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$shape,
                   DefaultValuedAttr<I64Attr, "0">:$allowzero);
  let results = (outs AnyTensor:$reshaped);
  let hasFolder = 1;
}

def Graph_TransposeOp : Graph_GenericOp<"Transpose", [Pure]> {
  let summary = "permute dimensions";
  let description = [{
    ```mlir
    %y = graph.Transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$perm);
  let results = (outs AnyTensor:$transposed);
  let hasFolder = 1;
}

def Graph_FlattenOp : Graph_GenericOp<"Flatten", [Pure]> {
  let summary = "reshape to 2-D at axis";
  let description = [{
    ```mlir
    %y = graph.Flatten %x {axis = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs AnyTensor:$output);
}

def Graph_SqueezeOp : Graph_GenericOp<"Squeeze", [Pure]> {
  let summary = "remove unit dimensions";
  let description = [{
    ```mlir
    %y = graph.Squeeze %x {axes = array<i64: 0>} : (tensor<1x3xf32>) -> tensor<3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$axes);
  let results = (outs AnyTensor:$squeezed);
  let hasFolder = 1;
}

def Graph_UnsqueezeOp : Graph_GenericOp<"Unsqueeze", [Pure]> {
  let summary = "insert unit dimensions";
  let description = [{
    `axes` index the output.

    ```mlir
    %y = graph.Unsqueeze %x {axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<1x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$axes);
  let results = (outs AnyTensor:$expanded);
  let hasFolder = 1;
}

def Graph_ConcatOp : Graph_GenericOp<"Concat", [Pure]> {
  let summary = "join tensors along axis";
  let description = [{
    ```mlir
    %y = graph.Concat %a, %b {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>) -> tensor<3xi64>
    ```
  }];
  let arguments = (ins Variadic<AnyTensor>:$inputs, I64Attr:$axis);
  let results = (outs AnyTensor:$concat_result);
  let hasFolder = 1;
}

def Graph_SplitOp : Graph_GenericOp<"Split", [Pure]> {
  let summary = "cut a tensor into pieces along axis";
  let description = [{
    `split` holds each piece's length (the importer fills it for the
    equal-split form).

    ```mlir
    %a:3 = graph.Split %x {axis = 2 : i64, split = array<i64: 768, 768, 768>} : (tensor<8x128x2304xf32>) -> (tensor<8x128x768xf32>, tensor<8x128x768xf32>, tensor<8x128x768xf32>)
    ```
  }];
  let arguments = (ins AnyTensor:$input, DefaultValuedAttr<I64Attr, "0">:$axis,
                   DenseI64ArrayAttr:$split);
  let results = (outs Variadic<AnyTensor>:$outputs);
}

def Graph_SliceOp : Graph_GenericOp<"Slice", [Pure]> {
  let summary = "strided slice";
  let description = [{
    starts, ends, axes and steps are explicit and of equal length; ends are
    clamped as ONNX specifies.

    ```mlir
    %y = graph.Slice %x {axes = array<i64: 1>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$ends, DenseI64ArrayAttr:$axes,
                   DenseI64ArrayAttr:$steps);
  let results = (outs AnyTensor:$output);
  let hasFolder = 1;
}

def Graph_GatherOp : Graph_GenericOp<"Gather", [Pure]> {
  let summary = "take entries along axis";
  let description = [{
    The result shape is data[:axis] + indices + data[axis+1:]; negative
    indices count from the end.

    ```mlir
    %e = graph.Gather %wte, %ids {axis = 0 : i64} : (tensor<50257x768xf32>, tensor<8x128xi64>) -> tensor<8x128x768xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, AnyTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs AnyTensor:$output);
  let hasFolder = 1;
}

def Graph_GatherElementsOp : Graph_GenericOp<"GatherElements", [Pure]> {
  let summary = "take entries along axis at per-element indices";
  let description = [{
    ```mlir
    %y = graph.GatherElements %x, %i {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x2xi64>) -> tensor<2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, AnyTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs AnyTensor:$output);
}

def Graph_GatherNDOp : Graph_GenericOp<"GatherND", [Pure]> {
  let summary = "take slices at index tuples";
  let description = [{
    ```mlir
    %y = graph.GatherND %x, %i {batch_dims = 0 : i64} : (tensor<2x2xf32>, tensor<2x2xi64>) -> tensor<2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, AnyTensor:$indices,
                   DefaultValuedAttr<I64Attr, "0">:$batch_dims);
  let results = (outs AnyTensor:$output);
}

def Graph_ScatterElementsOp : Graph_GenericOp<"ScatterElements", [Pure]> {
  let summary = "write updates at per-element indices along axis";
  let description = [{
    ```mlir
    %y = graph.ScatterElements %x, %i, %u {axis = 0 : i64} : (tensor<3x3xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<3x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, AnyTensor:$indices, AnyTensor:$updates,
                   DefaultValuedAttr<I64Attr, "0">:$axis,
                   DefaultValuedAttr<Graph_ScatterReductionAttr, "ScatterReduction::none">:$reduction);
  let results = (outs AnyTensor:$output);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_ScatterNDOp : Graph_GenericOp<"ScatterND", [Pure]> {
  let summary = "write slices at index tuples";
  let description = [{
    ```mlir
    %y = graph.ScatterND %x, %i, %u : (tensor<8xf32>, tensor<4x1xi64>, tensor<4xf32>) -> tensor<8xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, AnyTensor:$indices, AnyTensor:$updates,
                   DefaultValuedAttr<Graph_ScatterReductionAttr, "ScatterReduction::none">:$reduction);
  let results = (outs AnyTensor:$output);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_ExpandOp : Graph_GenericOp<"Expand", [Pure]> {
  let summary = "broadcast to a shape";
  let description = [{
    ```mlir
    %y = graph.Expand %x {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs AnyTensor:$output);
  let hasFolder = 1;
}

def Graph_TileOp : Graph_GenericOp<"Tile", [Pure]> {
  let summary = "repeat along each dimension";
  let description = [{
    ```mlir
    %y = graph.Tile %x {repeats = array<i64: 2, 1>} : (tensor<2x3xf32>) -> tensor<4x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DenseI64ArrayAttr:$repeats);
  let results = (outs AnyTensor:$output);
}

def Graph_PadOp : Graph_GenericOp<"Pad", [Pure]> {
  let summary = "pad with a constant or by reflection";
  let description = [{
    `pads` holds the begins of every axis then the ends (negative crops).

    ```mlir
    %y = graph.Pad %x {mode = #graph.pad_mode<constant>, pads = array<i64: 0, 1, 0, 1>, value = 0.0 : f64} : (tensor<2x3xf32>) -> tensor<2x5xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<Graph_PadModeAttr, "PadMode::constant">:$mode,
                   DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs AnyTensor:$output);
}

def Graph_ShapeOp : Graph_GenericOp<"Shape", [Pure]> {
  let summary = "the shape as a 1-D int64 tensor";
  let description = [{
    Folds to a constant when the input shape is static.

    ```mlir
    %s = graph.Shape %x {end = 2 : i64, start = 0 : i64} : (tensor<8x128xi64>) -> tensor<2xi64>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DefaultValuedAttr<I64Attr, "0">:$start,
                   OptionalAttr<I64Attr>:$end);
  let results = (outs AnyTensor:$shape);
  let hasFolder = 1;
}

def Graph_SizeOp : Graph_GenericOp<"Size", [Pure]> {
  let summary = "the number of elements as an int64 scalar";
  let description = [{
    ```mlir
    %n = graph.Size %x : (tensor<2x3xf32>) -> tensor<i64>
    ```
  }];
  let arguments = (ins AnyTensor:$data);
  let results = (outs AnyTensor:$size);
  let hasFolder = 1;
}

def Graph_OneHotOp : Graph_GenericOp<"OneHot", [Pure]> {
  let summary = "one-hot encoding";
  let description = [{
    values holds [off, on]; depth is folded to an attribute.

    ```mlir
    %y = graph.OneHot %i, %v {axis = -1 : i64, depth = 10 : i64} : (tensor<4xi64>, tensor<2xf32>) -> tensor<4x10xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$indices, AnyTensor:$values, I64Attr:$depth,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs AnyTensor:$output);
}

def Graph_TriluOp : Graph_GenericOp<"Trilu", [Pure]> {
  let summary = "upper or lower triangle of the last two dims";
  let description = [{
    ```mlir
    %y = graph.Trilu %x {k = 0 : i64, upper = 1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, DefaultValuedAttr<I64Attr, "0">:$k,
                   DefaultValuedAttr<I64Attr, "1">:$upper);
  let results = (outs AnyTensor:$output);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_CumSumOp : Graph_GenericOp<"CumSum", [Pure]> {
  let summary = "cumulative sum along axis";
  let description = [{
    ```mlir
    %y = graph.CumSum %x {axis = 0 : i64, exclusive = 0 : i64, reverse = 0 : i64} : (tensor<5xf32>) -> tensor<5xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$x, I64Attr:$axis,
                   DefaultValuedAttr<I64Attr, "0">:$exclusive,
                   DefaultValuedAttr<I64Attr, "0">:$reverse);
  let results = (outs AnyTensor:$y);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_TopKOp : Graph_GenericOp<"TopK", [Pure]> {
  let summary = "k largest (or smallest) entries along axis";
  let description = [{
    ```mlir
    %v, %i = graph.TopK %x {axis = -1 : i64, k = 2 : i64, largest = 1 : i64, sorted = 1 : i64} : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
    ```
  }];
  let arguments = (ins AnyTensor:$X, I64Attr:$k, DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<I64Attr, "1">:$largest,
                   DefaultValuedAttr<I64Attr, "1">:$sorted);
  let results = (outs AnyTensor:$Values, AnyTensor:$Indices);
}

def Graph_ResizeOp : Graph_GenericOp<"Resize", [Pure]> {
  let summary = "resize by interpolation";
  let description = [{
    `sizes` is the output shape, resolved from ONNX's scales or sizes;
    `scales` is kept for the coordinate transformation.

    ```mlir
    %y = graph.Resize %x {coordinate_transformation_mode = #graph.coord_mode<asymmetric>, mode = #graph.resize_mode<nearest>, nearest_mode = #graph.nearest_mode<floor>, scales = array<f32: 1.0, 1.0, 2.0, 2.0>, sizes = array<i64: 1, 4, 8, 8>} : (tensor<1x4x4x4xf32>) -> tensor<1x4x8x8xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, DenseI64ArrayAttr:$sizes, DenseF32ArrayAttr:$scales,
      DefaultValuedAttr<Graph_ResizeModeAttr, "ResizeMode::nearest">:$mode,
      DefaultValuedAttr<Graph_CoordModeAttr, "CoordMode::half_pixel">:$coordinate_transformation_mode,
      DefaultValuedAttr<Graph_NearestModeAttr, "NearestMode::round_prefer_floor">:$nearest_mode,
      DefaultValuedAttr<F32Attr, "-0.75">:$cubic_coeff_a,
      DefaultValuedAttr<I64Attr, "0">:$exclude_outside);
  let results = (outs AnyTensor:$Y);
}

def Graph_DepthToSpaceOp : Graph_GenericOp<"DepthToSpace", [Pure]> {
  let summary = "move channel blocks into spatial blocks";
  let description = [{
    ```mlir
    %y = graph.DepthToSpace %x {blocksize = 2 : i64, mode = #graph.d2s_mode<DCR>} : (tensor<1x8x2x2xf32>) -> tensor<1x2x4x4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, I64Attr:$blocksize,
      DefaultValuedAttr<Graph_DepthToSpaceModeAttr, "DepthToSpaceMode::DCR">:$mode);
  let results = (outs AnyTensor:$output);
}

def Graph_SpaceToDepthOp : Graph_GenericOp<"SpaceToDepth", [Pure]> {
  let summary = "move spatial blocks into channels";
  let description = [{
    ```mlir
    %y = graph.SpaceToDepth %x {blocksize = 2 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x8x2x2xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, I64Attr:$blocksize);
  let results = (outs AnyTensor:$output);
}

def Graph_ReverseSequenceOp : Graph_GenericOp<"ReverseSequence", [Pure]> {
  let summary = "reverse the first sequence_lens[b] entries along time_axis";
  let description = [{
    ```mlir
    %y = graph.ReverseSequence %x, %lens {batch_axis = 1 : i64, time_axis = 0 : i64} : (tensor<4x4xf32>, tensor<4xi64>) -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$input, AnyTensor:$sequence_lens,
                   DefaultValuedAttr<I64Attr, "1">:$batch_axis,
                   DefaultValuedAttr<I64Attr, "0">:$time_axis);
  let results = (outs AnyTensor:$Y);
  let extraClassDefinition = Graph_InferVia<"inferSameAsFirst">.inferDef;
}

def Graph_GridSampleOp : Graph_GenericOp<"GridSample", [Pure]> {
  let summary = "sample X at the normalized coordinates of grid";
  let description = [{
    X is N x C x D1...Dr, grid N x H1...Hr x r; the result is N x C x H1...Hr.
    The importer maps opset-16 mode names (bilinear, bicubic) to opset 20's.

    ```mlir
    %y = graph.GridSample %x, %g {align_corners = 0 : i64, mode = #graph.grid_sample_mode<linear>, padding_mode = #graph.grid_padding_mode<zeros>} : (tensor<1x1x4x4xf32>, tensor<1x6x6x2xf32>) -> tensor<1x1x6x6xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X, AnyTensor:$grid,
      DefaultValuedAttr<I64Attr, "0">:$align_corners,
      DefaultValuedAttr<Graph_GridSampleModeAttr, "GridSampleMode::linear">:$mode,
      DefaultValuedAttr<Graph_GridPaddingModeAttr, "GridPaddingMode::zeros">:$padding_mode);
  let results = (outs AnyTensor:$Y);
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHTENSOROPS_TD
