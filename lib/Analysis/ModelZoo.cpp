//===- ModelZoo.cpp - Synthetic transformer and ResNet cost graphs --------===//
//
// Per-layer formulas (b batch, s sequence, h hidden, a heads, g KV heads,
// d = h/a, f FFN width, V vocabulary; FLOPs count a multiply-add as 2):
//   QKV projection  2*b*s*h*(h + 2*g*d)    params h*(h + 2*g*d) (+bias)
//   scores, attn*V  2*b*s*s*h each         softmax 5*b*a*s*s
//   output proj     2*b*s*h*h              params h*h (+bias)
//   MLP             4*b*s*h*f (GELU) or 6*b*s*h*f (SwiGLU)
//   norms, adds     5*b*s*h, b*s*h
// GPT-2 (f = 4h, biases, LayerNorm): 12h^2 + 13h params per layer.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/ModelZoo.h"

using namespace strait;

TransformerShape strait::gpt2SmallShape(unsigned batch) {
  TransformerShape s;
  s.name = "gpt2-small";
  s.batch = batch;
  return s;
}

TransformerShape strait::llama7BShape(unsigned batch) {
  TransformerShape s;
  s.name = "llama-7b";
  s.layers = 32;
  s.hidden = 4096;
  s.heads = s.kvHeads = 32;
  s.ffn = 11008;
  s.vocab = 32000;
  s.seqLen = 2048;
  s.batch = batch;
  s.gatedMlp = true;
  s.learnedPositions = false;
  s.tiedEmbeddings = false;
  return s;
}

TransformerShape strait::llama70BShape(unsigned batch) {
  TransformerShape s = llama7BShape(batch);
  s.name = "llama-70b";
  s.layers = 80;
  s.hidden = 8192;
  s.heads = 64;
  s.kvHeads = 8;
  s.ffn = 28672;
  s.seqLen = 4096;
  return s;
}

namespace {
/// Adds nodes of one layer and keeps the running graph.
struct Builder {
  CostGraph &graph;
  double elemBytes;
  int layer = 0;

  unsigned add(const char *name, OpKind kind, DType dtype, double flops,
               double params, double inElems, double outElems, bool keep) {
    CostNode n;
    n.name = "L" + std::to_string(layer) + "." + name;
    n.kind = kind;
    n.dtype = dtype;
    n.fwdFlops = flops;
    n.paramBytes = params * elemBytes;
    n.bytesRead = inElems * elemBytes + n.paramBytes;
    n.bytesWritten = outElems * elemBytes;
    n.activationBytes = keep ? outElems * elemBytes : 0;
    n.layer = layer;
    return graph.addNode(std::move(n));
  }
  void edge(unsigned a, unsigned b, double elems) {
    graph.addEdge(a, b, elems * elemBytes);
  }
};
} // namespace

double strait::transformerLayerParams(const TransformerShape &t) {
  double h = t.hidden, d = h / t.heads, kv = 2.0 * t.kvHeads * d;
  bool bias = !t.gatedMlp;
  double attn = h * (h + kv) + h * h + (bias ? h + kv + h : 0);
  double mlp = (t.gatedMlp ? 3 : 2) * h * t.ffn + (bias ? t.ffn + h : 0);
  double norms = (t.gatedMlp ? 2 : 4) * h;
  return attn + mlp + norms;
}

double strait::transformerLayerFlops(const TransformerShape &t) {
  double b = t.batch, s = t.seqLen, h = t.hidden, d = h / t.heads;
  double kv = 2.0 * t.kvHeads * d;
  double tokens = b * s;
  double proj = 2 * tokens * h * (h + kv) + 2 * tokens * h * h;
  double attn = 4 * tokens * s * h + 5 * b * t.heads * s * s;
  double mlp = (t.gatedMlp ? 6 : 4) * tokens * h * t.ffn +
               (t.gatedMlp ? 4 : 8) * tokens * t.ffn;
  double other = 2 * 5 * tokens * h + 2 * tokens * h;
  return proj + attn + mlp + other;
}

/// Adds one decoder layer reading `x`; returns its output node.
static unsigned addDecoderLayer(Builder &bld, const TransformerShape &t,
                                unsigned x) {
  double b = t.batch, s = t.seqLen, h = t.hidden, d = h / t.heads;
  double kv = 2.0 * t.kvHeads * d, tokens = b * s, scores = b * t.heads * s * s;
  bool bias = !t.gatedMlp;
  double normParams = t.gatedMlp ? h : 2 * h;
  DType dt = t.dtype;
  unsigned ln1 = bld.add("ln1", OpKind::Norm, dt, 5 * tokens * h, normParams,
                         tokens * h, tokens * h, true);
  unsigned qkv = bld.add("qkv", OpKind::MatMul, dt, 2 * tokens * h * (h + kv),
                         h * (h + kv) + (bias ? h + kv : 0), tokens * h,
                         tokens * (h + kv), true);
  unsigned sc = bld.add("scores", OpKind::MatMul, dt, 2 * tokens * s * h, 0,
                        tokens * (h + kv / 2), scores, false);
  unsigned sm = bld.add("softmax", OpKind::Softmax, dt, 5 * scores, 0, scores,
                        scores, true);
  unsigned av = bld.add("attn_v", OpKind::MatMul, dt, 2 * tokens * s * h, 0,
                        scores + tokens * kv / 2, tokens * h, true);
  unsigned out = bld.add("out_proj", OpKind::MatMul, dt, 2 * tokens * h * h,
                         h * h + (bias ? h : 0), tokens * h, tokens * h, false);
  unsigned add1 = bld.add("add1", OpKind::Elementwise, dt, tokens * h, 0,
                          2 * tokens * h, tokens * h, true);
  unsigned ln2 = bld.add("ln2", OpKind::Norm, dt, 5 * tokens * h, normParams,
                         tokens * h, tokens * h, true);
  double upWidth = (t.gatedMlp ? 2.0 : 1.0) * t.ffn;
  unsigned up = bld.add("mlp_up", OpKind::MatMul, dt, 2 * tokens * h * upWidth,
                        h * upWidth + (bias ? t.ffn : 0), tokens * h,
                        tokens * upWidth, true);
  unsigned act = bld.add("mlp_act", OpKind::Elementwise, dt,
                         (t.gatedMlp ? 4 : 8) * tokens * t.ffn, 0,
                         tokens * upWidth, tokens * t.ffn, true);
  unsigned down = bld.add("mlp_down", OpKind::MatMul, dt,
                          2 * tokens * h * t.ffn, h * t.ffn + (bias ? h : 0),
                          tokens * t.ffn, tokens * h, false);
  unsigned add2 = bld.add("add2", OpKind::Elementwise, dt, tokens * h, 0,
                          2 * tokens * h, tokens * h, true);
  bld.edge(x, ln1, tokens * h);
  bld.edge(x, add1, tokens * h); // residual
  bld.edge(ln1, qkv, tokens * h);
  bld.edge(qkv, sc, tokens * (h + kv / 2));
  bld.edge(qkv, av, tokens * kv / 2);
  bld.edge(sc, sm, scores);
  bld.edge(sm, av, scores);
  bld.edge(av, out, tokens * h);
  bld.edge(out, add1, tokens * h);
  bld.edge(add1, ln2, tokens * h);
  bld.edge(add1, add2, tokens * h); // residual
  bld.edge(ln2, up, tokens * h);
  bld.edge(up, act, tokens * upWidth);
  bld.edge(act, down, tokens * t.ffn);
  bld.edge(down, add2, tokens * h);
  return add2;
}

CostGraph strait::buildTransformerGraph(const TransformerShape &t) {
  CostGraph graph;
  graph.name = t.name;
  graph.batchSamples = t.batch;
  Builder bld{graph, double(dtypeBytes(t.dtype))};
  double tokens = double(t.batch) * t.seqLen, h = t.hidden;
  double embParams = double(t.vocab) * h + (t.learnedPositions ? t.seqLen * h : 0);
  unsigned x = bld.add("embed", OpKind::Embedding, t.dtype, tokens * h,
                       embParams, tokens, tokens * h, false);
  graph.nodes[x].bytesRead = tokens * h * bld.elemBytes; // rows gathered
  for (unsigned l = 1; l <= t.layers; ++l) {
    bld.layer = l;
    x = addDecoderLayer(bld, t, x);
  }
  bld.layer = t.layers + 1;
  unsigned norm = bld.add("final_norm", OpKind::Norm, t.dtype, 5 * tokens * h,
                          t.gatedMlp ? h : 2 * h, tokens * h, tokens * h, true);
  unsigned head = bld.add("lm_head", OpKind::MatMul, t.dtype,
                          2 * tokens * h * t.vocab,
                          t.tiedEmbeddings ? 0 : double(t.vocab) * h,
                          tokens * h, tokens * t.vocab, false);
  if (t.tiedEmbeddings) // reads the embedding matrix it shares
    graph.nodes[head].bytesRead += double(t.vocab) * h * bld.elemBytes;
  unsigned loss = bld.add("loss", OpKind::Softmax, t.dtype, 5 * tokens * t.vocab,
                          0, tokens * t.vocab, tokens, true);
  bld.edge(x, norm, tokens * h);
  bld.edge(norm, head, tokens * h);
  bld.edge(head, loss, tokens * t.vocab);
  return graph;
}

namespace {
struct ConvShape {
  double cin, cout, k, hout;
};
} // namespace

/// A convolution with its batch norm and ReLU folded in.
static unsigned addConv(Builder &bld, const char *name, double batch,
                        ConvShape c, double hin, DType dt) {
  double outElems = batch * c.hout * c.hout * c.cout;
  double flops = 2 * outElems * c.cin * c.k * c.k + 5 * outElems;
  double params = c.cin * c.cout * c.k * c.k + 2 * c.cout;
  return bld.add(name, OpKind::Conv, dt, flops, params,
                 batch * hin * hin * c.cin, outElems, true);
}

CostGraph strait::buildResNetGraph(const ResNetShape &r) {
  CostGraph graph;
  graph.name = "resnet-" + std::to_string(r.depth);
  graph.batchSamples = r.batch;
  Builder bld{graph, double(dtypeBytes(r.dtype))};
  unsigned counts50[] = {3, 4, 6, 3}, counts101[] = {3, 4, 23, 3},
           counts152[] = {3, 8, 36, 3};
  unsigned *counts = r.depth == 50 ? counts50 : r.depth == 152 ? counts152
                                                               : counts101;
  double b = r.batch, size = r.imageSize / 2;
  unsigned x = addConv(bld, "stem", b, {3, 64, 7, size}, r.imageSize, r.dtype);
  size /= 2; // max pool
  double cin = 64;
  for (unsigned stage = 0; stage < 4; ++stage) {
    double mid = 64.0 * (1u << stage), cout = 4 * mid;
    for (unsigned blk = 0; blk < counts[stage]; ++blk) {
      bld.layer++;
      bool down = blk == 0;
      double hin = size, hout = (down && stage > 0) ? size / 2 : size;
      unsigned c1 = addConv(bld, "conv1", b, {cin, mid, 1, hin}, hin, r.dtype);
      unsigned c2 = addConv(bld, "conv2", b, {mid, mid, 3, hout}, hin, r.dtype);
      unsigned c3 = addConv(bld, "conv3", b, {mid, cout, 1, hout}, hout, r.dtype);
      double outElems = b * hout * hout * cout;
      unsigned add = bld.add("add", OpKind::Elementwise, r.dtype, 2 * outElems,
                             0, 2 * outElems, outElems, true);
      bld.edge(x, c1, b * hin * hin * cin);
      bld.edge(c1, c2, b * hin * hin * mid);
      bld.edge(c2, c3, b * hout * hout * mid);
      bld.edge(c3, add, outElems);
      unsigned skip = x;
      if (down) {
        skip = addConv(bld, "downsample", b, {cin, cout, 1, hout}, hin, r.dtype);
        bld.edge(x, skip, b * hin * hin * cin);
      }
      bld.edge(skip, add, outElems); // residual
      x = add;
      cin = cout;
      size = hout;
    }
  }
  bld.layer++;
  unsigned fc = bld.add("fc", OpKind::MatMul, r.dtype,
                        2 * b * cin * r.classes + b * cin * size * size,
                        cin * r.classes + r.classes, b * cin * size * size,
                        b * r.classes, true);
  bld.edge(x, fc, b * cin * size * size);
  return graph;
}
