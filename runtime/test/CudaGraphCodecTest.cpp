//===- CudaGraphCodecTest.cpp - CUDA graphs, device codecs, fused kernels ===//
//
// Training steps with CUDA graphs on and off, the device codecs against the
// host codecs (and a GPU rank against a CPU rank over Gloo), staged plain
// transfers, and the FusedElementwise kernel against the CPU backend.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

// --- CUDA graphs (CudaGraph.cpp) ---------------------------------------------
//
// A small training step (MatMul, cross-entropy and its gradient, Transpose,
// ClipByGlobalNorm, SGD) with a one-rank all-reduce of the gradient in the
// middle, so the executor forms two segments around a host synchronization.
// Three steps with graphs on (direct, captured, replayed) against graphs off.

namespace {

program::Program graphTrainingProgram(const std::string &device) {
  ProgramBuilder b(0, 1);
  b.get().set_device(device);
  auto v = [&](const char *n, Shape s, program::ValueRole role,
               DType t = program::DTYPE_F32) { return b.addValue(n, t, s, role); };
  uint32_t x = v("x", {16, 32}, program::ROLE_INPUT),
           labels = v("labels", {16}, program::ROLE_INPUT, program::DTYPE_I64),
           lr = v("lr", {}, program::ROLE_INPUT), w = v("W", {32, 10}, program::ROLE_PARAMETER),
           mom = v("mom", {32, 10}, program::ROLE_OPTIMIZER_STATE),
           one = b.addConstant("one", {1.0f}, {}),
           logits = v("logits", {16, 10}, program::ROLE_ACTIVATION),
           loss = v("loss", {}, program::ROLE_OUTPUT),
           dlogits = v("dlogits", {16, 10}, program::ROLE_ACTIVATION),
           xt = v("xt", {32, 16}, program::ROLE_ACTIVATION),
           dw = v("dW", {32, 10}, program::ROLE_GRADIENT),
           norm = v("norm", {}, program::ROLE_OUTPUT),
           dwc = v("dWc", {32, 10}, program::ROLE_ACTIVATION);
  b.get().mutable_values(w)->set_parameter_name("W");
  b.get().mutable_values(mom)->set_parameter_name("mom");
  auto mean = [](program::Kernel &k) { setString(k, "reduction", "mean"); };
  std::vector<uint32_t> fwd = {b.addKernel("MatMul", {x, w}, {logits}).id()};
  program::Kernel &ce = b.addKernel("SoftmaxCrossEntropyLoss", {logits, labels}, {loss});
  mean(ce);
  fwd.push_back(ce.id());
  program::Kernel &ceg = b.addKernel("SoftmaxCrossEntropyLossGrad", {one, logits, labels}, {dlogits});
  mean(ceg);
  fwd.push_back(ceg.id());
  program::Kernel &tr = b.addKernel("Transpose", {x}, {xt});
  setInts(tr, "perm", {1, 0});
  fwd.push_back(tr.id());
  fwd.push_back(b.addKernel("MatMul", {xt, dlogits}, {dw}).id());
  b.addRunStep(fwd);
  auto *ar = b.get().add_steps()->mutable_all_reduce();
  ar->add_value_ids(dw);
  ar->set_reduce(program::REDUCE_MEAN);
  program::Kernel &clip = b.addKernel("ClipByGlobalNorm", {dw}, {norm, dwc});
  setFloat(clip, "max_norm", 0.5f);
  program::Kernel &sgd = b.addKernel("SGD", {lr, w, dwc, mom}, {w, mom});
  setFloat(sgd, "momentum", 0.9f);
  b.addRunStep({clip.id(), sgd.id()});
  return b.get();
}

/// Losses and final W of 3 steps on `device` (cuda:0 with graphs on or off).
void runGraphSteps(const std::string &device, bool graphs, std::vector<float> &losses,
                   std::vector<float> &w, CudaGraphStats &stats) {
  CudaOptions co;
  co.graphs = graphs;
  BackendRegistry reg;
  if (device == "cpu")
    registerCpuBackend(reg);
  else
    ASSERT_TRUE(registerCudaBackend(reg, co).isOk());
  LoneCommunicator lone;
  auto exec = Executor::create(graphTrainingProgram(device), reg, &lone);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  Tensor wt = *(*exec)->getValueByName("W");
  auto w0 = pseudoRandom(wt.numel(), 5);
  std::copy(w0.begin(), w0.end(), wt.as<float>());
  for (int step = 0; step < 3; ++step) {
    Tensor x = *(*exec)->getValueByName("x");
    auto xv = pseudoRandom(x.numel(), 100 + step);
    std::copy(xv.begin(), xv.end(), x.as<float>());
    Tensor l = *(*exec)->getValueByName("labels");
    for (int64_t i = 0; i < l.numel(); ++i)
      l.as<int64_t>()[i] = (i * 7 + step) % 10;
    (*exec)->getValueByName("lr")->as<float>()[0] = 0.1f;
    Status s = (*exec)->run();
    ASSERT_TRUE(s.isOk()) << s.toString();
    losses.push_back((*exec)->getValueByName("loss")->as<float>()[0]);
  }
  w.assign(wt.as<float>(), wt.as<float>() + wt.numel());
  stats = cudaGraphStats(*reg.forDevice(device).takeValue());
}

} // namespace

TEST(CudaGraphs, ReplayedStepsEqualDirectLaunches) {
  REQUIRE_GPU();
  std::vector<float> lossOn, lossOff, lossCpu, wOn, wOff, wCpu;
  CudaGraphStats on, off, cpu;
  runGraphSteps("cuda:0", true, lossOn, wOn, on);
  runGraphSteps("cuda:0", false, lossOff, wOff, off);
  runGraphSteps("cpu", false, lossCpu, wCpu, cpu);
  ASSERT_EQ(lossOn.size(), 3u);
  ASSERT_EQ(lossOff.size(), 3u);
  ASSERT_EQ(lossCpu.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(lossOn[i], lossOff[i], 1e-6 * std::abs(lossOff[i])) << "step " << i;
    EXPECT_NEAR(lossOn[i], lossCpu[i], 1e-4 * std::abs(lossCpu[i])) << "step " << i;
  }
  EXPECT_NE(lossOn[0], lossOn[2]); // SGD changed W between steps
  for (size_t i = 0; i < wOn.size(); ++i)
    ASSERT_NEAR(wOn[i], wOff[i], 1e-6) << "W[" << i << "]";
  // Two segments: run 1 direct, run 2 captured and launched, run 3 replayed.
  EXPECT_EQ(on.captured, 2);
  EXPECT_EQ(on.replays, 4);
  EXPECT_EQ(on.direct, 2);
  EXPECT_EQ(on.disabled, 0);
  EXPECT_EQ(off.captured, 0);
  EXPECT_EQ(off.direct, 6);
}

// --- Device codecs (Codec.cu, CudaCodecCommunicator.cpp) ---------------------
//
// The inner communicator records the wire (plain sends) and plays back host
// payloads; the device side must produce rt::encode's bytes and decode them
// as rt::decode does.

namespace {

class WireRecorder : public Communicator {
public:
  std::vector<std::vector<uint8_t>> sent; // plain sends (payloads)
  std::vector<uint8_t> incoming;          // what the next recv delivers
  int codedCalls = 0;                     // sendCoded/recvCoded left to this layer
  int getRank() const override { return 0; }
  int getWorldSize() const override { return 2; }
  Status send(const Tensor &t, int, uint32_t) override {
    const uint8_t *p = static_cast<const uint8_t *>(t.data);
    sent.emplace_back(p, p + t.byteSize());
    return Status::ok();
  }
  Status recv(const Tensor &t, int, uint32_t) override {
    if (t.byteSize() != incoming.size())
      return invalidArgument("peer sent " + std::to_string(incoming.size()) + " bytes");
    std::memcpy(t.data, incoming.data(), incoming.size());
    return Status::ok();
  }
  Status sendCoded(const Tensor &t, int, uint32_t, const program::CodecParams &codec,
                   ErrorFeedback *feedback) override {
    ++codedCalls;
    std::vector<uint8_t> out;
    Status s = feedback ? feedback->encode(codec, t.as<float>(), t.numel(), out)
                        : encode(codec, t.as<float>(), t.numel(), out);
    sent.push_back(out);
    return s;
  }
  Status recvCoded(const Tensor &t, int, uint32_t, const program::CodecParams &) override {
    ++codedCalls;
    return decode(incoming.data(), incoming.size(), t.as<float>(), t.numel());
  }
  Status allReduceSum(const Tensor &, uint32_t) override { return Status::ok(); }
  Status allReduceSumGroup(const Tensor &, const std::vector<int> &, uint32_t) override {
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }
};

program::CodecParams codecParams(program::Codec c, float ratio, uint32_t block, bool ef) {
  program::CodecParams p;
  p.set_codec(c);
  p.set_topk_ratio(ratio);
  p.set_block_size(block);
  p.set_error_feedback(ef);
  return p;
}

/// Values with zeros, a non-finite block, subnormals and ties of magnitude.
std::vector<float> codecValues(size_t n, uint32_t seed) {
  std::vector<float> x = gaussian(n, seed);
  for (size_t i = 0; i < n && i < 40; ++i)
    x[i] = 0.0f;
  for (size_t i = 64; i < n && i < 96; ++i)
    x[i] = 1e-39f * float(int(i) - 70);
  for (size_t i = 200; i < n && i < 260; ++i)
    x[i] = (i % 2 ? -1.5f : 1.5f); // ties for top-k
  return x;
}

struct CodecCase {
  program::Codec codec;
  float ratio;
  uint32_t block;
};
const CodecCase kCodecCases[] = {
    {program::CODEC_FP16, 0, 0},    {program::CODEC_BF16, 0, 0},
    {program::CODEC_INT8, 0, 0},    {program::CODEC_INT8, 0, 7},
    {program::CODEC_INT4, 0, 64},   {program::CODEC_INT4, 0, 0},
    {program::CODEC_TOPK, 0.01f, 0}, {program::CODEC_TOPK, 0.3f, 0},
    {program::CODEC_TOPK, 0.9f, 0}};

} // namespace

/// A device codec communicator over a WireRecorder and an n-float device
/// tensor to send through it.
struct DeviceCodecRig {
  WireRecorder *wire = nullptr;
  Buffer buf; // outlives comm (destroyed first; it synchronizes its stream)
  std::unique_ptr<Communicator> comm;
  Tensor t;

  static std::unique_ptr<DeviceCodecRig> make(Backend &backend, size_t n) {
    auto rig = std::make_unique<DeviceCodecRig>();
    auto recorder = std::make_unique<WireRecorder>();
    rig->wire = recorder.get();
    auto comm = createCudaCodecCommunicator(std::move(recorder), 0);
    StatusOr<Buffer> buf = backend.allocate(4 * n);
    if (!comm.isOk() || !buf.isOk()) {
      ADD_FAILURE() << (comm.isOk() ? buf.getStatus() : comm.getStatus()).toString();
      return nullptr;
    }
    rig->comm = comm.takeValue();
    rig->buf = buf.takeValue();
    rig->t = Tensor{program::DTYPE_F32, {int64_t(n)}, rig->buf.data()};
    return rig;
  }

  /// Sends x with `device`'s error feedback; the payload must equal what
  /// `host` encodes from x.
  ::testing::AssertionResult sendsAsHost(const program::CodecParams &p,
                                         const std::vector<float> &x, ErrorFeedback &device,
                                         ErrorFeedback &host) {
    std::copy(x.begin(), x.end(), t.as<float>());
    size_t before = wire->sent.size();
    Status s = comm->sendCoded(t, 1, 0, p, &device);
    if (!s.isOk())
      return ::testing::AssertionFailure() << s.toString();
    std::vector<uint8_t> expect;
    if (Status h = host.encode(p, x.data(), x.size(), expect); !h.isOk())
      return ::testing::AssertionFailure() << "host: " << h.toString();
    if (wire->sent.size() != before + 1 || wire->sent.back() != expect)
      return ::testing::AssertionFailure() << "the device payload differs from the host's";
    return ::testing::AssertionSuccess();
  }
};

TEST(CudaCodecs, DevicePayloadsEqualHostPayloadsWithErrorFeedback) {
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  for (size_t n : {1u, 1001u, 300007u})
    for (const CodecCase &cc : kCodecCases)
      for (bool ef : {false, true}) {
        auto rig = DeviceCodecRig::make(**backend, n);
        ASSERT_TRUE(rig);
        auto p = codecParams(cc.codec, cc.ratio, cc.block, ef);
        ErrorFeedback device, host;
        for (int step = 0; step < 3; ++step)
          ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 10 * step + uint32_t(n)), device, host))
              << program::Codec_Name(cc.codec) << " n " << n << " block " << cc.block
              << " ratio " << cc.ratio << " ef " << ef << " step " << step;
        EXPECT_EQ(rig->wire->codedCalls, 0); // all on the device
      }
}

TEST(CudaCodecs, DeviceResidualRollsBackAndScalesAsTheHost) {
  // Loss scaling's operations on a residual in GPU memory (an armed
  // iteration's encodes undone, a stream made during it back to zero, a
  // scale change) leave the payloads that follow equal to the host's.
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  const size_t n = 100003;
  for (const CodecCase &cc : {kCodecCases[2], kCodecCases[7]}) { // int8, top-k 0.3
    auto rig = DeviceCodecRig::make(**backend, n);
    ASSERT_TRUE(rig);
    auto p = codecParams(cc.codec, cc.ratio, cc.block, true);
    const char *name = program::Codec_Name(cc.codec).c_str();
    ErrorFeedback device, host, fresh, freshHost;
    for (uint32_t i = 0; i < 3; ++i)
      ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 50 + i), device, host)) << name;
    for (ErrorFeedback *f : {&device, &host})
      ASSERT_TRUE(f->beginIteration().isOk());
    // The skipped iteration's two encodes, and a stream made during it.
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 60), device, host)) << name;
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 61), device, host)) << name;
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 62), fresh, freshHost)) << name;
    for (ErrorFeedback *f : {&device, &host, &fresh, &freshHost})
      ASSERT_TRUE(f->rollBack().isOk());
    for (ErrorFeedback *f : {&device, &host})
      ASSERT_TRUE(f->scaleResidual(0.5f).isOk());
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 70), device, host)) << name;
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 71), fresh, freshHost)) << name;
    ErrorFeedback neverRan;
    std::vector<uint8_t> unrolled;
    auto x = codecValues(n, 71);
    ASSERT_TRUE(neverRan.encode(p, x.data(), n, unrolled).isOk());
    EXPECT_EQ(rig->wire->sent.back(), unrolled) << "the rolled-back new stream starts from zero";
  }
}

TEST(CudaCodecs, DeviceResidualSavedAndRestoredAsTheHost) {
  // Checkpoints and link-recovery snapshots (strait-run): residualValues()
  // downloads a device residual, equal to the host stream's bit for bit;
  // restoreResidual() puts one back into a device stream, or into one that
  // has not yet encoded (its first device encode takes it over), and the
  // payloads that follow equal the host's.
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  const size_t n = 65537;
  for (const CodecCase &cc : {kCodecCases[4], kCodecCases[6]}) { // int4, top-k 0.01
    auto rig = DeviceCodecRig::make(**backend, n);
    ASSERT_TRUE(rig);
    auto p = codecParams(cc.codec, cc.ratio, cc.block, true);
    const char *name = program::Codec_Name(cc.codec).c_str();
    ErrorFeedback device, host;
    for (uint32_t i = 0; i < 3; ++i)
      ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 80 + i), device, host)) << name;
    StatusOr<std::vector<float>> saved = device.residualValues();
    ASSERT_TRUE(saved.isOk()) << saved.getStatus().toString();
    ASSERT_EQ(*saved, host.getResidual()) << name;
    ASSERT_TRUE(device.getResidual().empty()) << "the residual stays on the device";
    // Onward, then back to the saved state: the device stream and a new one.
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 90), device, host)) << name;
    ErrorFeedback resumed, resumedHost, hostBack;
    ASSERT_TRUE(resumed.restoreResidual(*saved).isOk());
    ASSERT_TRUE(device.restoreResidual(*saved).isOk());
    ASSERT_TRUE(resumedHost.restoreResidual(*saved).isOk());
    ASSERT_TRUE(hostBack.restoreResidual(*saved).isOk());
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 91), resumed, resumedHost)) << name;
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 91), device, hostBack)) << name;
    ASSERT_TRUE(resumed.getResidual().empty()) << "taken over by the device";
    // Restored, then an armed iteration whose first encode makes the device
    // state and is rolled back: the restored residual is what remains.
    ErrorFeedback skipped, skippedHost;
    ASSERT_TRUE(skipped.restoreResidual(*saved).isOk());
    ASSERT_TRUE(skippedHost.restoreResidual(*saved).isOk());
    for (ErrorFeedback *f : {&skipped, &skippedHost})
      ASSERT_TRUE(f->beginIteration().isOk());
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 93), skipped, skippedHost)) << name;
    for (ErrorFeedback *f : {&skipped, &skippedHost})
      ASSERT_TRUE(f->rollBack().isOk());
    StatusOr<std::vector<float>> back = skipped.residualValues();
    ASSERT_TRUE(back.isOk()) << back.getStatus().toString();
    EXPECT_EQ(*back, *saved) << name;
    EXPECT_EQ(skippedHost.getResidual(), *saved) << name;
    // Restoring nothing: the next encode starts from zero.
    ErrorFeedback zero;
    ASSERT_TRUE(device.restoreResidual({}).isOk());
    ASSERT_TRUE(rig->sendsAsHost(p, codecValues(n, 92), device, zero)) << name;
  }
}

TEST(CudaCodecs, DeviceDecodeEqualsHostDecode) {
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  const size_t n = 70001;
  auto x = codecValues(n, 5);
  for (const CodecCase &cc : kCodecCases) {
    auto recorder = std::make_unique<WireRecorder>();
    WireRecorder &wire = *recorder;
    auto comm = createCudaCodecCommunicator(std::move(recorder), 0);
    ASSERT_TRUE(comm.isOk());
    auto p = codecParams(cc.codec, cc.ratio, cc.block, false);
    ASSERT_TRUE(encode(p, x.data(), n, wire.incoming).isOk());
    std::vector<float> expect(n);
    ASSERT_TRUE(decode(wire.incoming.data(), wire.incoming.size(), expect.data(), n).isOk());
    StatusOr<Buffer> buf = (*backend)->allocate(4 * n);
    ASSERT_TRUE(buf.isOk());
    Tensor t{program::DTYPE_F32, {int64_t(n)}, buf->data()};
    Status s = (*comm)->recvCoded(t, 1, 0, p);
    ASSERT_TRUE(s.isOk()) << s.toString();
    ASSERT_EQ(std::memcmp(t.data, expect.data(), 4 * n), 0) << program::Codec_Name(cc.codec);
    // Top-k receives decode on the host (size unknown in advance).
    EXPECT_EQ(wire.codedCalls, cc.codec == program::CODEC_TOPK ? 1 : 0);
  }
}

TEST(CudaCodecs, MismatchedPayloadsAndHostTensors) {
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  auto recorder = std::make_unique<WireRecorder>();
  WireRecorder &wire = *recorder;
  auto comm = createCudaCodecCommunicator(std::move(recorder), 0);
  ASSERT_TRUE(comm.isOk());
  const size_t n = 1000;
  auto x = gaussian(n, 1);
  StatusOr<Buffer> buf = (*backend)->allocate(4 * n);
  ASSERT_TRUE(buf.isOk());
  Tensor t{program::DTYPE_F32, {int64_t(n)}, buf->data()};
  // fp16 payload, bf16 expected: same size, the header names the codec.
  ASSERT_TRUE(encode(codecParams(program::CODEC_FP16, 0, 0, false), x.data(), n, wire.incoming)
                  .isOk());
  Status s = (*comm)->recvCoded(t, 1, 0, codecParams(program::CODEC_BF16, 0, 0, false));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("codec 2, this rank expects codec 5 (CODEC_BF16)"),
            std::string::npos) << s.toString();
  // int8 in blocks of 128 while blocks of 64 are expected: a size error.
  ASSERT_TRUE(encode(codecParams(program::CODEC_INT8, 0, 128, false), x.data(), n, wire.incoming)
                  .isOk());
  s = (*comm)->recvCoded(t, 1, 0, codecParams(program::CODEC_INT8, 0, 64, false));
  ASSERT_FALSE(s.isOk());
  // A host tensor goes to the inner communicator's codecs.
  std::vector<float> hostData(x);
  Tensor h{program::DTYPE_F32, {int64_t(n)}, hostData.data()};
  ASSERT_TRUE((*comm)->sendCoded(h, 1, 0, codecParams(program::CODEC_INT8, 0, 0, false), nullptr)
                  .isOk());
  EXPECT_EQ(wire.codedCalls, 1);
}

//===----------------------------------------------------------------------===//
// FusedElementwise: the programs of FusedTestPrograms.h (the CPU kernel's
// conformance cases) on CUDA vs the CPU backend.
//===----------------------------------------------------------------------===//
#include "FusedTestPrograms.h"

namespace {

TEST(CudaFused, ProgramsMatchCpu) {
  REQUIRE_GPU();
  BackendRegistry registry;
  registerCpuBackend(registry);
  CudaOptions o;
  o.syncEachKernel = true;
  Status st = registerCudaBackend(registry, o);
  ASSERT_TRUE(st.isOk()) << st.toString();
  for (int i = 0; i < numFusedCases(); ++i) {
    FusedCase c = fusedCase(i);
    SCOPED_TRACE(c.name);
    std::vector<Arr> ins, outs;
    for (const OwnedTensor &t : c.inputs) {
      Arr a{t.tensor.dtype, t.tensor.shape, {}};
      a.bytes.assign(t.as<char>(), t.as<char>() + t.tensor.byteSize());
      ins.push_back(std::move(a));
    }
    for (DType d : c.outputTypes)
      outs.push_back(Arr::out(c.shape, d));
    program::Kernel proto = c.kernel();
    Attrs attrs = [&](program::Kernel &k) {
      k.set_domain("strait");
      *k.mutable_attrs() = proto.attrs();
    };
    std::vector<Arr> cpu = outs, gpu = outs;
    Status s = runOn("cpu", registry, "FusedElementwise", ins, cpu, attrs);
    ASSERT_TRUE(s.isOk()) << "cpu: " << s.toString();
    s = runOn("cuda:0", registry, "FusedElementwise", ins, gpu, attrs);
    ASSERT_TRUE(s.isOk()) << "cuda: " << s.toString();
    for (size_t j = 0; j < outs.size(); ++j) {
      int bad = 0;
      for (int64_t k = 0; k < numElements(c.shape) && bad < 5; ++k) {
        double x = cpu[j].at(k), g = gpu[j].at(k);
        // CUDA's expf/tanhf/erff are within 2 ulp of the CPU's libm.
        if (!(std::abs(x - g) <= 1e-6 + 1e-5 * std::abs(x)) && !(std::isnan(x) && std::isnan(g))) {
          ADD_FAILURE() << "output " << j << " element " << k << ": cpu " << x << " cuda " << g;
          ++bad;
        }
      }
    }
  }
}

TEST(CudaFused, BadProgramIsInvalidArgumentOnCuda) {
  REQUIRE_GPU();
  BackendRegistry registry;
  registerCpuBackend(registry);
  ASSERT_TRUE(registerCudaBackend(registry, CudaOptions{}).isOk());
  FusedCase c = fusedCase(1);
  std::vector<Arr> ins;
  for (const OwnedTensor &t : c.inputs) {
    Arr a{t.tensor.dtype, t.tensor.shape, {}};
    a.bytes.assign(t.as<char>(), t.as<char>() + t.tensor.byteSize());
    ins.push_back(std::move(a));
  }
  std::vector<Arr> outs = {Arr::out(c.shape)};
  program::Kernel proto = c.kernel();
  (*proto.mutable_attrs())["args"].mutable_ints()->set_v(3, 50);
  Status s = runOn("cuda:0", registry, "FusedElementwise", ins, outs, [&](program::Kernel &k) {
    k.set_domain("strait");
    *k.mutable_attrs() = proto.attrs();
  });
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument) << s.toString();
  EXPECT_NE(s.toString().find("reads register 50 before it is written"), std::string::npos)
      << s.toString();
}

} // namespace

#ifdef STRAIT_TEST_HAVE_GLOO
// A GPU rank (device codecs over Gloo) and a CPU rank (Gloo's own codecs) on
// loopback: each decodes exactly what the other's host codec would send.
#include "CommTestUtil.h"

#include <thread>

/// Rank r of a pair on loopback Gloo: rank 0 is a GPU rank (the CUDA codec
/// communicator, its tensor in managed memory), rank 1 a CPU rank.
struct MixedRank {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  Buffer gpu;
  std::vector<float> host;
  Tensor t;
};

void makeMixedRank(int r, int world, bool gpu, const std::string &dir, int64_t n,
                   MixedRank &m) {
  auto gloo = createGlooCommunicator(fileStoreOptions(dir, r, world));
  ASSERT_TRUE(gloo.isOk()) << gloo.getStatus().toString();
  m.comm = std::move(*gloo);
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  m.backend = std::move(*backend);
  StatusOr<Buffer> buf = m.backend->allocate(4 * n);
  ASSERT_TRUE(buf.isOk());
  m.gpu = std::move(*buf);
  m.host.resize(n);
  if (gpu) {
    auto wrapped = createCudaCodecCommunicator(std::move(m.comm), 0);
    ASSERT_TRUE(wrapped.isOk()) << wrapped.getStatus().toString();
    m.comm = std::move(*wrapped);
  }
  m.t = Tensor{program::DTYPE_F32, {n}, gpu ? m.gpu.data() : m.host.data()};
}

using RankBody = std::function<void(int, std::unique_ptr<Communicator> &, Tensor &)>;

/// Runs body(rank, comm, tensor) on `world` ranks, one thread each, then a
/// barrier; rank r is a GPU rank where gpu[r].
void runMixedRanks(const std::string &dir, const std::vector<bool> &gpu, int64_t n,
                   const RankBody &body) {
  int world = static_cast<int>(gpu.size());
  auto rank = [&](int r) {
    MixedRank m;
    makeMixedRank(r, world, gpu[r], dir, n, m);
    if (::testing::Test::HasFatalFailure())
      return;
    body(r, m.comm, m.t);
    ASSERT_TRUE(m.comm->barrier().isOk());
  };
  std::vector<std::thread> others;
  for (int r = 1; r < world; ++r)
    others.emplace_back(rank, r);
  rank(0);
  for (std::thread &t : others)
    t.join();
}

/// Rank 0 on the GPU, rank 1 on the CPU.
void runMixedPair(const std::string &dir, int64_t n, const RankBody &body) {
  runMixedRanks(dir, {true, false}, n, body);
}

TEST(CudaCodecs, GpuAndCpuRanksInteroperateOverGloo) {
  REQUIRE_GPU();
  const int64_t n = 100003;
  std::string dir = makeTempDir("strait-cuda-codec");
  const CodecCase cases[] = {{program::CODEC_INT8, 0, 0}, {program::CODEC_BF16, 0, 0},
                             {program::CODEC_TOPK, 0.01f, 0}, {program::CODEC_INT4, 0, 128}};
  std::vector<std::vector<float>> got[2], want[2];
  runMixedPair(dir, n, [&](int r, std::unique_ptr<Communicator> &comm, Tensor &t) {
    for (const CodecCase &cc : cases) {
      auto p = codecParams(cc.codec, cc.ratio, cc.block, /*ef=*/true);
      ErrorFeedback feedback, reference;
      for (int step = 0; step < 3; ++step) {
        // Sender: rank 0 in even rounds, rank 1 in odd ones.
        for (int sender = 0; sender < 2; ++sender) {
          auto x = codecValues(n, 100 * step + 10 * sender + 1);
          if (r == sender) {
            std::copy(x.begin(), x.end(), t.as<float>());
            Status s = comm->sendCoded(t, 1 - r, 7, p, &feedback);
            ASSERT_TRUE(s.isOk()) << s.toString();
          } else {
            Status s = comm->recvCoded(t, 1 - r, 7, p);
            ASSERT_TRUE(s.isOk()) << s.toString();
            got[r].emplace_back(t.as<float>(), t.as<float>() + n);
            std::vector<uint8_t> payload;
            ASSERT_TRUE(reference.encode(p, x.data(), n, payload).isOk());
            std::vector<float> expect(n);
            ASSERT_TRUE(decode(payload.data(), payload.size(), expect.data(), n).isOk());
            want[r].push_back(expect);
          }
        }
      }
    }
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    for (size_t i = 0; i < got[r].size(); ++i)
      ASSERT_EQ(std::memcmp(got[r][i].data(), want[r][i].data(), 4 * n), 0)
          << "rank " << r << " transfer " << i;
  }
}

// Plain transfers of GPU memory go through the pinned staging copy (64 KiB
// and up) and arrive bit-exact at a CPU rank, and back.
TEST(CudaCodecs, StagedPlainTransfersBetweenGpuAndCpuRanks) {
  REQUIRE_GPU();
  const int64_t n = 100003;
  std::string dir = makeTempDir("strait-cuda-staging");
  std::vector<float> sent = codecValues(n, 5), back[2];
  runMixedPair(dir, n, [&](int r, std::unique_ptr<Communicator> &comm, Tensor &t) {
    if (r == 0) {
      std::copy(sent.begin(), sent.end(), t.as<float>());
      ASSERT_TRUE(comm->send(t, 1, 3).isOk());
      std::fill(t.as<float>(), t.as<float>() + n, 0.0f);
      ASSERT_TRUE(comm->recv(t, 1, 4).isOk());
    } else {
      ASSERT_TRUE(comm->recv(t, 0, 3).isOk());
      ASSERT_TRUE(comm->send(t, 0, 4).isOk());
    }
    back[r].assign(t.as<float>(), t.as<float>() + n);
  });
  EXPECT_EQ(back[1], sent); // GPU -> CPU
  EXPECT_EQ(back[0], sent); // and back into GPU memory
}
// All-reduces with GPU ranks (0 and 2) and a CPU rank (1): the flat
// compressed ones encode and decode on the GPUs (the CUDA codec
// communicator's engine, error feedback on the device); plain and
// hierarchical ones, and codecs without device kernels, run on a pinned host
// copy. Every rank's result, over 3 steps of error feedback,
// equals that of the same all-reduce on three CPU ranks bit for bit.
void allReducesOfGpuRanksEqualThoseOfCpuRanks(int64_t n) {
  const int steps = 3;
  struct Case {
    program::Codec codec;
    float ratio;
    std::vector<std::vector<int>> islands;
  };
  const Case cases[] = {{program::CODEC_INT8, 0, {}},
                        {program::CODEC_TOPK, 0.01f, {}},
                        {program::CODEC_BF16, 0, {}},
                        {program::CODEC_INT4, 0, {}},
                        {program::CODEC_TOPK_INT8, 0.05f, {}},
                        {program::CODEC_NONE, 0, {}},
                        {program::CODEC_INT8, 0, {{0, 1}, {2}}},
                        {program::CODEC_NONE, 0, {{0}, {1, 2}}}};
  for (const Case &cc : cases) {
    auto p = codecParams(cc.codec, cc.ratio, 0, cc.codec != program::CODEC_NONE);
    std::vector<float> got[2][3];
    for (int onGpu = 0; onGpu < 2; ++onGpu)
      runMixedRanks(makeTempDir("strait-cuda-allreduce"), {onGpu == 1, false, onGpu == 1}, n,
                    [&](int r, std::unique_ptr<Communicator> &comm, Tensor &t) {
                      ErrorFeedback feedback;
                      for (int step = 0; step < steps; ++step) {
                        auto x = codecValues(n, 1000 * step + 7 * r + 1);
                        std::copy(x.begin(), x.end(), t.as<float>());
                        AllReduceOptions o;
                        o.codec = p;
                        o.islands = cc.islands;
                        o.feedback = &feedback;
                        Status s = comm->allReduce(t, 3, o);
                        ASSERT_TRUE(s.isOk()) << s.toString();
                        got[onGpu][r].insert(got[onGpu][r].end(), t.as<float>(),
                                             t.as<float>() + n);
                      }
                    });
    for (int r = 0; r < 3; ++r) {
      ASSERT_EQ(got[0][r].size(), size_t(steps * n));
      ASSERT_EQ(got[1][r].size(), got[0][r].size());
      EXPECT_EQ(0, std::memcmp(got[0][r].data(), got[1][r].data(), 4 * got[0][r].size()))
          << program::Codec_Name(cc.codec) << " islands " << cc.islands.size() << " rank " << r
          << " n " << n;
    }
  }
}

TEST(CudaCodecs, AllReducesOfGpuRanksEqualThoseOfCpuRanks) {
  REQUIRE_GPU();
  for (int64_t n : {int64_t(200003), int64_t(2)}) // 2: a chunk of nothing
    allReducesOfGpuRanksEqualThoseOfCpuRanks(n);
}
#endif // STRAIT_TEST_HAVE_GLOO
