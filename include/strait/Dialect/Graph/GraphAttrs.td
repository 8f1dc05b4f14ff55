//===- GraphAttrs.td - Graph dialect enums ------------------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHATTRS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHATTRS_TD

include "strait/Dialect/Graph/GraphDialect.td"
include "mlir/IR/EnumAttr.td"

class Graph_I32Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::strait::graph";
  let genSpecializedAttr = 0;
}

class Graph_EnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<Graph_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

def Graph_PadMode : Graph_I32Enum<"PadMode", "padding mode of Pad", [
  I32EnumAttrCase<"constant", 0>, I32EnumAttrCase<"reflect", 1>,
  I32EnumAttrCase<"edge", 2>, I32EnumAttrCase<"wrap", 3>]>;
def Graph_PadModeAttr : Graph_EnumAttr<Graph_PadMode, "pad_mode">;

def Graph_GeluApprox : Graph_I32Enum<"GeluApprox", "Gelu approximation", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"tanh", 1>]>;
def Graph_GeluApproxAttr : Graph_EnumAttr<Graph_GeluApprox, "gelu_approx">;

def Graph_ResizeMode : Graph_I32Enum<"ResizeMode", "interpolation of Resize", [
  I32EnumAttrCase<"nearest", 0>, I32EnumAttrCase<"linear", 1>,
  I32EnumAttrCase<"cubic", 2>]>;
def Graph_ResizeModeAttr : Graph_EnumAttr<Graph_ResizeMode, "resize_mode">;

def Graph_CoordMode : Graph_I32Enum<"CoordMode",
    "coordinate transformation of Resize", [
  I32EnumAttrCase<"half_pixel", 0>, I32EnumAttrCase<"asymmetric", 1>,
  I32EnumAttrCase<"align_corners", 2>, I32EnumAttrCase<"pytorch_half_pixel", 3>,
  I32EnumAttrCase<"tf_crop_and_resize", 4>, I32EnumAttrCase<"half_pixel_symmetric", 5>,
  I32EnumAttrCase<"tf_half_pixel_for_nn", 6>]>;
def Graph_CoordModeAttr : Graph_EnumAttr<Graph_CoordMode, "coord_mode">;

def Graph_NearestMode : Graph_I32Enum<"NearestMode", "rounding of nearest Resize", [
  I32EnumAttrCase<"round_prefer_floor", 0>, I32EnumAttrCase<"round_prefer_ceil", 1>,
  I32EnumAttrCase<"floor", 2>, I32EnumAttrCase<"ceil", 3>]>;
def Graph_NearestModeAttr : Graph_EnumAttr<Graph_NearestMode, "nearest_mode">;

def Graph_ScatterReduction : Graph_I32Enum<"ScatterReduction",
    "reduction of ScatterElements/ScatterND", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"add", 1>, I32EnumAttrCase<"mul", 2>,
  I32EnumAttrCase<"max", 3>, I32EnumAttrCase<"min", 4>]>;
def Graph_ScatterReductionAttr : Graph_EnumAttr<Graph_ScatterReduction, "scatter_reduction">;

def Graph_DepthToSpaceMode : Graph_I32Enum<"DepthToSpaceMode", "DepthToSpace layout", [
  I32EnumAttrCase<"DCR", 0>, I32EnumAttrCase<"CRD", 1>]>;
def Graph_DepthToSpaceModeAttr : Graph_EnumAttr<Graph_DepthToSpaceMode, "d2s_mode">;

def Graph_LossReduction : Graph_I32Enum<"LossReduction", "reduction of a loss", [
  I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"sum", 1>, I32EnumAttrCase<"mean", 2>]>;
def Graph_LossReductionAttr : Graph_EnumAttr<Graph_LossReduction, "loss_reduction">;

def Graph_ShiftDirection : Graph_I32Enum<"ShiftDirection", "direction of BitShift", [
  I32EnumAttrCase<"left", 0>, I32EnumAttrCase<"right", 1>]>;
def Graph_ShiftDirectionAttr : Graph_EnumAttr<Graph_ShiftDirection, "shift_direction">;

def Graph_GridSampleMode : Graph_I32Enum<"GridSampleMode", "interpolation of GridSample", [
  I32EnumAttrCase<"linear", 0>, I32EnumAttrCase<"nearest", 1>, I32EnumAttrCase<"cubic", 2>]>;
def Graph_GridSampleModeAttr : Graph_EnumAttr<Graph_GridSampleMode, "grid_sample_mode">;

def Graph_GridPaddingMode : Graph_I32Enum<"GridPaddingMode",
    "out-of-bound handling of GridSample", [
  I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"border", 1>,
  I32EnumAttrCase<"reflection", 2>]>;
def Graph_GridPaddingModeAttr : Graph_EnumAttr<Graph_GridPaddingMode, "grid_padding_mode">;

#endif // STRAIT_DIALECT_GRAPH_GRAPHATTRS_TD
