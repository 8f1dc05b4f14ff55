//===- GraphOps.td - All graph dialect ops -----------------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHOPS_TD

include "strait/Dialect/Graph/GraphElementwiseOps.td"
include "strait/Dialect/Graph/GraphReductionOps.td"
include "strait/Dialect/Graph/GraphNNOps.td"
include "strait/Dialect/Graph/GraphTensorOps.td"
include "strait/Dialect/Graph/GraphTrainingOps.td"
include "strait/Dialect/Graph/GraphFusionOps.td"
include "strait/Dialect/Graph/GraphExpertOps.td"

#endif // STRAIT_DIALECT_GRAPH_GRAPHOPS_TD
