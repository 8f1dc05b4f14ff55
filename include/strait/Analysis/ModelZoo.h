//===- ModelZoo.h - Synthetic cost graphs for known models -----*- C++ -*-===//
//
// Shape-only generators with exact per-layer FLOP and parameter formulas:
// GPT-2-small, LLaMA-7B, LLaMA-70B-shaped decoders and ResNet-50/101/152.
// See docs/planner.md for the formulas.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_MODELZOO_H
#define STRAIT_ANALYSIS_MODELZOO_H

#include "strait/Analysis/CostGraph.h"

namespace strait {

struct TransformerShape {
  std::string name;
  unsigned layers = 12, hidden = 768, heads = 12, kvHeads = 12;
  unsigned ffn = 3072, vocab = 50257, seqLen = 1024, batch = 1;
  bool gatedMlp = false;      ///< SwiGLU (LLaMA) vs GELU MLP (GPT-2)
  bool learnedPositions = true;
  bool tiedEmbeddings = true; ///< LM head shares the embedding matrix
  DType dtype = DType::F16;
};

TransformerShape gpt2SmallShape(unsigned batch = 8);
TransformerShape llama7BShape(unsigned batch = 8);
TransformerShape llama70BShape(unsigned batch = 8);

/// Parameters of one decoder layer (weights and norm/bias vectors).
double transformerLayerParams(const TransformerShape &shape);
/// Forward FLOPs of one decoder layer for the whole batch.
double transformerLayerFlops(const TransformerShape &shape);

CostGraph buildTransformerGraph(const TransformerShape &shape);

struct ResNetShape {
  unsigned depth = 101; ///< 50, 101 or 152
  unsigned batch = 32, imageSize = 224, classes = 1000;
  DType dtype = DType::F32;
};

CostGraph buildResNetGraph(const ResNetShape &shape);

} // namespace strait

#endif // STRAIT_ANALYSIS_MODELZOO_H
