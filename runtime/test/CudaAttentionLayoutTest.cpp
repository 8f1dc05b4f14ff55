//===- CudaAttentionLayoutTest.cpp - FusedAttention on permuted operands --===//
//
// FusedAttention(+Grad) with q_perm, kt_perm, v_perm, y_perm (the heads'
// layouts graph-fold-transposes gives them): the harness against the CPU
// kernels (runs everywhere), the flash path's stride and dispatch logic
// (pure host functions, run everywhere), and the flash and cuBLAS paths on
// the GPU against the double reference and the CPU kernels (skip without a
// GPU).
//
//===----------------------------------------------------------------------===//
#include "CudaAttentionTestUtil.h"

namespace {
class CudaAttentionLayout : public Cuda {};
} // namespace

// The permuted operands' harness (laidOut, logicalOf, the perm attributes)
// against the CPU kernels, which address permuted operands themselves:
// GPT-2's heads, the Kt form, a mix, f32 with a bias and bf16 causal.
TEST(CudaAttentionReference, PermutedMatchesCpuKernels) {
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  uint32_t seed = 900;
  for (auto layout : {gpt2Layout, ktFormLayout, mixedLayout}) {
    Problem p;
    p.batch = {2, 3};
    p.tq = p.tk = 21;
    p.d = 8;
    p.dv = 8;
    p.hasBias = true;
    p.biasShape = {21, 21};
    layout(p);
    checkAttention(cpu, p, seed++, f32Tol(), {"cpu"});
    p.hasBias = false;
    p.causal = true;
    p.dtype = program::DTYPE_BF16;
    p.tk = 13;
    checkAttention(cpu, p, seed++, bf16Tol(), {"cpu"});
  }
}

// GPT-2's heads read out of the packed [B, T, 3, H, D] projection (q_select,
// kt_select, v_select = [2, i]): the harness's packing against the CPU
// kernels and the double reference, f32 with a bias and bf16 causal.
TEST(CudaAttentionReference, PackedMatchesCpuKernels) {
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  Problem p;
  p.batch = {2, 3};
  p.tq = p.tk = 21;
  p.d = p.dv = 8;
  p.hasBias = true;
  p.biasShape = {21, 21};
  gpt2Layout(p);
  p.packAxis = 2;
  checkAttention(cpu, p, 950, f32Tol(), {"cpu"});
  p.hasBias = false;
  p.causal = true;
  p.dtype = program::DTYPE_BF16;
  checkAttention(cpu, p, 951, bf16Tol(), {"cpu"});
  p.packedGrad = true; // one dQKV output
  checkAttention(cpu, p, 952, bf16Tol(), {"cpu"});
}

// --- Permuted operands (q_perm, kt_perm, v_perm, y_perm) -------------------

namespace {

/// The shared checks' layout (AttnLayout) of a logical [b..., rows, cols]
/// operand laid out by `perm` (empty: dense), from its tensor's row-major
/// strides: logical dim i steps by the stride of tensor dim perm[i].
AttnLayout layoutOf(const Shape &logical, const std::vector<int64_t> &perm) {
  size_t r = logical.size();
  Shape tensor = logical;
  for (size_t i = 0; i < perm.size(); ++i)
    tensor[perm[i]] = logical[i];
  std::vector<int64_t> st(r, 1);
  for (size_t k = r; k-- > 1;)
    st[k - 1] = st[k] * tensor[k];
  AttnLayout l;
  for (size_t i = 0; i < r; ++i) {
    int64_t s = st[perm.empty() ? i : size_t(perm[i])];
    if (i + 2 < r)
      l.batch.push_back(s);
    else if (i + 2 == r)
      l.row = s;
    else
      l.col = s;
  }
  return l;
}

/// The shared checks' result for problem p (no tensors).
AttentionArgs argsOf(const Problem &p) {
  AttentionArgs a;
  a.dtype = p.dtype;
  a.batch = p.batch;
  a.nBatch = p.entries();
  a.tq = p.tq;
  a.tk = p.tk;
  a.d = p.d;
  a.dv = p.dv;
  a.scale = p.scale;
  a.causal = p.causal;
  a.qL = layoutOf(p.full({p.tq, p.d}), p.qPerm);
  a.ktL = layoutOf(p.full({p.d, p.tk}), p.ktPerm);
  a.vL = layoutOf(p.full({p.tk, p.dv}), p.vPerm);
  a.yL = layoutOf(p.full({p.tq, p.dv}), p.yPerm);
  // No select: the gradients take their operands' layouts.
  a.dqL = a.qL;
  a.dktL = a.ktL;
  a.dvL = a.vL;
  return a;
}

Problem flashProblemFor(Shape batch, int64_t t, int64_t d) {
  Problem p;
  p.batch = std::move(batch);
  p.tq = p.tk = t;
  p.d = p.dv = d;
  p.dtype = program::DTYPE_BF16;
  return p;
}

} // namespace

// GPT-2 small's heads (B 2, T 77, H 3, D 64): two batch dims that do not
// merge, every operand's strides as [B, T, H, D] tensors give them, K in
// the rows form, and each entry's offset b * T*H*D + h * D. No GPU needed.
TEST(CudaFlashAttentionLayout, Gpt2HeadsAddressTheBthdTensors) {
  Problem pr = flashProblemFor({2, 3}, 77, 64);
  gpt2Layout(pr);
  AttentionArgs a = argsOf(pr);
  const int64_t T = 77, H = 3, D = 64, THD = T * H * D;
  ASSERT_EQ(a.ktL.batch, (std::vector<int64_t>{THD, D}));
  ASSERT_EQ(a.ktL.row, 1);     // D
  ASSERT_EQ(a.ktL.col, H * D); // Tk
  cuda::FlashQuery q = cuda::flashQueryOf(a, true);
  EXPECT_EQ(q.batchRank, 2);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(a);
  EXPECT_EQ(p.entries, 6);
  EXPECT_EQ(p.tq, T);
  EXPECT_EQ(p.tk, T);
  EXPECT_EQ(p.d, D);
  EXPECT_TRUE(p.bf16);
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_EQ(p.batch[0], 2);
  EXPECT_EQ(p.batch[1], 3);
  EXPECT_TRUE(p.kRows);
  for (const cuda::FlashStrides *s : {&p.q, &p.k, &p.v, &p.y}) {
    EXPECT_EQ(s->batch[0], THD);
    EXPECT_EQ(s->batch[1], D);
    EXPECT_EQ(s->row, H * D);
  }
  for (int64_t e = 0; e < 6; ++e)
    EXPECT_EQ(cuda::flashEntryOffset(p, p.q, e), (e / 3) * THD + (e % 3) * D) << "entry " << e;
  // Y dense, the others permuted: Y's strides are its own.
  pr.yPerm.clear();
  p = cuda::flashProblemOf(argsOf(pr));
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_EQ(p.y.batch[0], 3 * T * D);
  EXPECT_EQ(p.y.batch[1], T * D);
  EXPECT_EQ(p.y.row, D);
  EXPECT_EQ(p.q.row, H * D);
  EXPECT_EQ(cuda::flashEntryOffset(p, p.y, 5), 5 * T * D);
}

// The Kt form permuted ([B, D, H, Tk] tensor): Tk contiguous, rows (D) H *
// Tk apart, entry offsets b * D*H*Tk + h * Tk.
TEST(CudaFlashAttentionLayout, KtFormPermuted) {
  Problem pr = flashProblemFor({2, 3}, 200, 128);
  pr.dtype = program::DTYPE_F16;
  ktFormLayout(pr);
  pr.tk = 130;
  cuda::FlashQuery q = cuda::flashQueryOf(argsOf(pr), true);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(argsOf(pr));
  EXPECT_FALSE(p.bf16);
  EXPECT_FALSE(p.kRows);
  EXPECT_EQ(p.k.row, 3 * 130);
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_EQ(p.k.batch[0], 128 * 3 * 130);
  EXPECT_EQ(p.k.batch[1], 130);
  EXPECT_EQ(cuda::flashEntryOffset(p, p.k, 4), 128 * 3 * 130 + 130);
  EXPECT_EQ(p.q.row, 3 * 128);
}

// Dense operands: the batch dims merge into one dim of all entries, the
// strides are the dense ones and Kt is in its own form, as before layouts.
TEST(CudaFlashAttentionLayout, DenseFlattensToOneDim) {
  Problem pr = flashProblemFor({2, 1, 3}, 0, 64);
  pr.tq = 77;
  pr.tk = 130;
  AttentionArgs a = argsOf(pr);
  cuda::FlashQuery q = cuda::flashQueryOf(a, true);
  EXPECT_EQ(q.batchRank, 1);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(a);
  ASSERT_EQ(p.batchRank, 1);
  EXPECT_EQ(p.batch[0], 6);
  EXPECT_FALSE(p.kRows);
  EXPECT_EQ(p.q.batch[0], 77 * 64);
  EXPECT_EQ(p.q.row, 64);
  EXPECT_EQ(p.k.batch[0], 64 * 130);
  EXPECT_EQ(p.k.row, 130);
  EXPECT_EQ(p.v.batch[0], 130 * 64);
  EXPECT_EQ(p.v.row, 64);
  EXPECT_EQ(p.y.batch[0], 77 * 64);
  for (int64_t e = 0; e < 6; ++e)
    EXPECT_EQ(cuda::flashEntryOffset(p, p.v, e), e * 130 * 64);
  // No batch dims at all: one entry at offset 0.
  pr.batch = {};
  p = cuda::flashProblemOf(argsOf(pr));
  EXPECT_EQ(p.batchRank, 0);
  EXPECT_EQ(p.entries, 1);
  EXPECT_EQ(cuda::flashEntryOffset(p, p.q, 0), 0);
}

// Layouts the flash kernels cannot take go to the cuBLAS path: D not
// contiguous in Q, V or Y, Kt with neither D nor Tk contiguous, more than
// kFlashMaxBatch batch dims left after merging.
TEST(CudaFlashAttentionLayout, RejectedLayouts) {
  auto applies = [](const Problem &pr) {
    return cuda::flashAttentionApplies(cuda::flashQueryOf(argsOf(pr), true));
  };
  Problem base = flashProblemFor({2, 3}, 40, 64);
  gpt2Layout(base);
  ASSERT_TRUE(applies(base));
  // Q, V or Y as [B, H, D, T] tensors: logical [B, H, T, D] with D T apart.
  for (int k = 0; k < 3; ++k) {
    Problem p = base;
    std::vector<int64_t> *perm[3] = {&p.qPerm, &p.vPerm, &p.yPerm};
    *perm[k] = {0, 1, 3, 2};
    cuda::FlashQuery fq = cuda::flashQueryOf(argsOf(p), true);
    int64_t col[3] = {fq.qCol, fq.vCol, fq.yCol};
    EXPECT_EQ(col[k], 40) << "operand " << k;
    EXPECT_FALSE(cuda::flashAttentionApplies(fq)) << "operand " << k;
  }
  // Kt as a [B, D, Tk, H] tensor: D H * Tk apart, Tk H apart.
  Problem k = base;
  k.ktPerm = {0, 3, 1, 2};
  cuda::FlashQuery kq = cuda::flashQueryOf(argsOf(k), true);
  EXPECT_EQ(kq.ktRow, 40 * 3);
  EXPECT_EQ(kq.ktCol, 3);
  EXPECT_FALSE(applies(k));
  // Five batch dims that never merge (Q's batch dims reversed in memory).
  Problem five = flashProblemFor({2, 2, 2, 2, 2}, 16, 64);
  five.qPerm = {4, 3, 2, 1, 0, 5, 6};
  EXPECT_EQ(cuda::flashQueryOf(argsOf(five), true).batchRank, 5);
  EXPECT_FALSE(applies(five));
  five.qPerm = {0, 1, 2, 4, 3, 5, 6}; // dims 3 and 4 swapped: 0-2 merge, then 3, then 4
  EXPECT_EQ(cuda::flashQueryOf(argsOf(five), true).batchRank, 3);
  EXPECT_TRUE(applies(five));
  // A bias or f32 still decide as without layouts.
  Problem bias = base;
  bias.hasBias = true;
  AttentionArgs ba = argsOf(bias);
  Tensor dummy;
  ba.bias = &dummy;
  EXPECT_FALSE(cuda::flashAttentionApplies(cuda::flashQueryOf(ba, true)));
  EXPECT_FALSE(cuda::flashAttentionApplies(cuda::flashQueryOf(argsOf(base), false)));
}

namespace {

/// Permuted problems with Tq = Tk off the 64-row tiles, causal and not,
/// under GPT-2's layout, the Kt form and the mix; on cuda:0 and the CPU
/// kernels, both against the double reference.
void checkPermuted(const BackendRegistry &registry, DType dtype, int64_t d, bool hasBias,
                   uint32_t seed) {
  Tolerance tol = dtype == program::DTYPE_BF16  ? bf16Tol()
                  : dtype == program::DTYPE_F16 ? f16Tol()
                                                : f32Tol();
  for (auto layout : {gpt2Layout, ktFormLayout, mixedLayout})
    for (bool causal : {false, true})
      for (int64_t t : {77, 200}) {
        Problem p;
        p.batch = {2, 3};
        p.tq = p.tk = t;
        p.d = p.dv = d;
        p.dtype = dtype;
        p.causal = causal;
        p.scale = 1.0f / std::sqrt(float(d));
        if (hasBias) {
          p.hasBias = true;
          p.biasShape = {2, 1, 1, t};
        }
        layout(p);
        checkAttention(registry, p, seed++, tol, {"cuda:0", "cpu"});
      }
}

} // namespace

// The flash path on permuted operands (FlashAttention.cu's strides, both K
// forms, dQ rounded into Q's layout, Drow through Y's).
TEST_F(CudaAttentionLayout, PermutedFlashBf16) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  checkPermuted(registry, program::DTYPE_BF16, 64, false, 1000);
  checkPermuted(registry, program::DTYPE_BF16, 128, false, 1100);
}

TEST_F(CudaAttentionLayout, PermutedFlashF16) {
  REQUIRE_GPU();
  FlashSwitch on(true);
  checkPermuted(registry, program::DTYPE_F16, 64, false, 1200);
  checkPermuted(registry, program::DTYPE_F16, 128, false, 1300);
}

// The cuBLAS path on permuted operands (gathered into dense scratch, the
// outputs scattered back): f32, a bias (bf16), odd head dims, and the
// flash-eligible bf16 problems with the flash path off.
TEST_F(CudaAttentionLayout, PermutedCublasPath) {
  REQUIRE_GPU();
  checkPermuted(registry, program::DTYPE_F32, 64, false, 1400);
  checkPermuted(registry, program::DTYPE_BF16, 64, true, 1500);
  {
    FlashSwitch off(false);
    checkPermuted(registry, program::DTYPE_BF16, 64, false, 1600);
  }
  Problem odd;
  odd.batch = {2, 3};
  odd.tq = 37;
  odd.tk = 53;
  odd.d = 24;
  odd.dv = 40;
  odd.hasBias = true;
  odd.biasShape = {1, 53};
  odd.causal = true;
  gpt2Layout(odd);
  checkAttention(registry, odd, 1700, f32Tol(), {"cuda:0", "cpu"});
}

// Q, K and V aliasing one packed [B, T, 3, H, D] buffer (GPT-2 after
// graph-fold-transposes): the flash path (the operand pointers offset by
// each slice's base, the gradients' own strides) and the cuBLAS path (the
// gather from each slice, f32 with a bias and bf16 with the flash path
// off), with three gradients or one packed dQKV (packed_grad), against the
// double reference and the CPU kernels.
TEST_F(CudaAttentionLayout, PackedOperands) {
  REQUIRE_GPU();
  uint32_t seed = 1800;
  for (DType dtype : {program::DTYPE_BF16, program::DTYPE_F16, program::DTYPE_F32})
    for (bool flash : {true, false})
      for (bool causal : {false, true})
        for (bool packedGrad : {false, true}) {
          if (dtype == program::DTYPE_F32 && flash)
            continue;
          FlashSwitch sw(flash);
          Problem p;
          p.batch = {2, 3};
          p.tq = p.tk = 77;
          p.d = p.dv = 64;
          p.dtype = dtype;
          p.causal = causal;
          p.scale = 0.125f;
          p.hasBias = dtype == program::DTYPE_F32;
          if (p.hasBias)
            p.biasShape = {2, 1, 1, 77};
          gpt2Layout(p);
          p.packAxis = 2;
          p.packedGrad = packedGrad;
          Tolerance tol = dtype == program::DTYPE_BF16  ? bf16Tol()
                          : dtype == program::DTYPE_F16 ? f16Tol()
                                                        : f32Tol();
          checkAttention(registry, p, seed++, tol, {"cuda:0", "cpu"});
        }
}

// The flash problem of packed operands (no GPU): Q, K and V step through
// the [B, T, 3, H, D] buffer (rows 3 * H * D apart), the gradients through
// their own [B, T, H, D] tensors.
TEST(CudaFlashAttentionLayout, PackedOperandsStrides) {
  Problem pr = flashProblemFor({2, 3}, 77, 64);
  gpt2Layout(pr);
  AttentionArgs a = argsOf(pr); // the unpacked layouts: the gradients'
  const int64_t T = 77, H = 3, D = 64;
  AttnLayout packed[3];
  for (int i = 0; i < 3; ++i) {
    const AttnLayout &u = i == 0 ? a.qL : i == 1 ? a.ktL : a.vL;
    packed[i].base = i * H * D;
    packed[i].batch = {3 * T * H * D, D};
    packed[i].row = i == 1 ? 1 : 3 * H * D;
    packed[i].col = i == 1 ? 3 * H * D : 1;
    ASSERT_EQ(u.batch, (std::vector<int64_t>{T * H * D, D}));
  }
  a.qL = packed[0];
  a.ktL = packed[1];
  a.vL = packed[2];
  EXPECT_FALSE(a.qL.dense(a.batch, T, D));
  cuda::FlashQuery q = cuda::flashQueryOf(a, true);
  EXPECT_EQ(q.batchRank, 2);
  EXPECT_TRUE(cuda::flashAttentionApplies(q));
  cuda::FlashProblem p = cuda::flashProblemOf(a);
  ASSERT_EQ(p.batchRank, 2);
  EXPECT_TRUE(p.kRows);
  for (const cuda::FlashStrides *s : {&p.q, &p.k, &p.v}) {
    EXPECT_EQ(s->batch[0], 3 * T * H * D);
    EXPECT_EQ(s->batch[1], D);
    EXPECT_EQ(s->row, 3 * H * D);
  }
  for (const cuda::FlashStrides *s : {&p.dq, &p.dk, &p.dv}) {
    EXPECT_EQ(s->batch[0], T * H * D);
    EXPECT_EQ(s->batch[1], D);
    EXPECT_EQ(s->row, H * D);
  }
}
