//===- strait-onnx-node-test.cpp - ONNX node-test conformance runner ------===//
//
// Runs ONNX backend node tests (Debian's libonnx-testdata layout: model.onnx
// and test_data_set_*/{input,output}_*.pb) through the runtime's CPU backend
// and compares with the expected outputs:
//   |actual - expected| <= atol + rtol * |expected|  (floats; NaN == NaN)
//   exact equality for integers and bool.
// One line per test: "PASS|FAIL|SKIP <op> <test> [reason]". SKIP means the
// runtime reported Unimplemented (op, dtype or feature not supported).
// Exit status 1 when a test fails, or with --list FILE / --strict when a test
// does not pass (the regression checks registered with ctest).
// --backend cuda runs the same tests on GPU 0; ops without a CUDA kernel run
// the CPU kernel through the backend's host fallback, and the summary counts
// the tests that ran natively and those that needed the host.
//
//===----------------------------------------------------------------------===//
#include "OnnxToProgram.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"
#ifdef STRAIT_HAVE_CUDA
#include "strait/runtime/Cuda.h"
#endif

#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <sys/stat.h>

using namespace strait;
using namespace strait::rt;

namespace {

struct Options {
  double rtol = 1e-3, atol = 1e-5;
  std::string root = "/usr/share/libonnx-testdata/data/node";
  std::string listFile;
  std::vector<std::string> tests;
  bool quiet = false;
  bool strict = false; // a skipped test fails the run too
  std::string backend = "cpu"; // or "cuda": the same tests on the GPU
  bool hostFallback = true;    // cuda: CudaOptions::hostFallback
};

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d))
      if (e->d_name[0] != '.')
        names.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

template <typename T>
std::string compareFloats(const T *a, const T *e, int64_t n, const Options &o) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(e[i]) && std::isnan(a[i]))
      continue;
    if (std::isinf(e[i]) && a[i] == e[i])
      continue;
    double diff = std::abs(double(a[i]) - double(e[i]));
    if (!(diff <= o.atol + o.rtol * std::abs(double(e[i]))))
      return "element " + std::to_string(i) + ": got " + std::to_string(a[i]) +
             ", expected " + std::to_string(e[i]);
  }
  return "";
}

std::string compare(const Tensor &actual, const program::TensorData &expected,
                    const Options &o) {
  int64_t n = actual.numel();
  const char *e = expected.raw().data();
  if (actual.dtype == program::DTYPE_F32)
    return compareFloats(actual.as<float>(), reinterpret_cast<const float *>(e), n, o);
  if (actual.dtype == program::DTYPE_F64)
    return compareFloats(actual.as<double>(), reinterpret_cast<const double *>(e), n, o);
  size_t es = dtypeSize(actual.dtype);
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(actual.as<char>() + i * es, e + i * es, es) != 0)
      return "element " + std::to_string(i) + " differs (" + dtypeName(actual.dtype) + ")";
  return "";
}

std::vector<onnx::TensorProto> readTensors(const std::string &dir,
                                           const std::string &prefix,
                                           Status &status) {
  std::vector<onnx::TensorProto> result;
  for (int i = 0;; ++i) {
    std::string path = dir + "/" + prefix + std::to_string(i) + ".pb";
    if (!exists(path))
      break;
    onnx::TensorProto t;
    status = onnxtest::readProto(path, t);
    if (!status.isOk())
      return result;
    result.push_back(t);
  }
  return result;
}

/// Runs one data set; returns ok, a mismatch (Internal) or the runtime error.
Status runDataSet(const onnx::ModelProto &model, const std::string &dir,
                  const BackendRegistry &registry, const Options &o) {
  Status s;
  auto inputs = readTensors(dir, "input_", s);
  STRAIT_RETURN_IF_ERROR(s);
  auto outputs = readTensors(dir, "output_", s);
  STRAIT_RETURN_IF_ERROR(s);
  // Some test data stores bfloat16 tensors as UINT16; the graph's declared
  // element type is the truth when the element sizes agree.
  auto retype = [](std::vector<onnx::TensorProto> &ts,
                   const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> &infos) {
    for (int i = 0; i < infos.size() && i < static_cast<int>(ts.size()); ++i) {
      int declared = infos[i].type().tensor_type().elem_type();
      int stored = ts[i].data_type();
      if (declared && declared != stored && program::DType_IsValid(declared) &&
          program::DType_IsValid(stored) &&
          dtypeSize(static_cast<DType>(declared)) == dtypeSize(static_cast<DType>(stored)))
        ts[i].set_data_type(declared);
    }
  };
  retype(inputs, model.graph().input());
  retype(outputs, model.graph().output());
  program::ParameterShardFile shards;
  STRAIT_ASSIGN_OR_RETURN(program::Program p,
                          onnxtest::buildNodeProgram(model, inputs, outputs, &shards));
  p.set_device(o.backend == "cuda" ? "cuda:0" : "cpu");
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                          Executor::create(p, registry));
  STRAIT_RETURN_IF_ERROR(exec->loadParameters(shards));
  for (size_t i = 0; i < inputs.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(program::TensorData data, onnxtest::convertTensor(inputs[i]));
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(static_cast<uint32_t>(i)));
    STRAIT_RETURN_IF_ERROR(copyTensorData(data, t, "input " + std::to_string(i)));
  }
  STRAIT_RETURN_IF_ERROR(exec->run());
  for (size_t i = 0; i < outputs.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(program::TensorData data, onnxtest::convertTensor(outputs[i]));
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(static_cast<uint32_t>(inputs.size() + i)));
    std::string diff = compare(t, data, o);
    if (!diff.empty())
      return internalError("output " + std::to_string(i) + " mismatch: " + diff);
  }
  return Status::ok();
}

enum class Outcome { Pass, Fail, Skip };

Outcome runTest(const std::string &dir, const BackendRegistry &registry,
                const Options &o, std::string &op, std::string &reason) {
  onnx::ModelProto model;
  Status s = onnxtest::readProto(dir + "/model.onnx", model);
  op = model.graph().node_size() == 1 ? model.graph().node(0).op_type() : "<graph>";
  int sets = 0;
  for (const std::string &name : listDir(dir)) {
    if (!s.isOk() || name.rfind("test_data_set_", 0) != 0)
      continue;
    s = runDataSet(model, dir + "/" + name, registry, o);
    ++sets;
  }
  if (s.isOk() && sets == 0)
    s = notFound("no test_data_set_* folder");
  if (s.isOk())
    return Outcome::Pass;
  reason = s.toString();
  return s.getCode() == StatusCode::Unimplemented ? Outcome::Skip : Outcome::Fail;
}

bool parseArgs(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--rtol")
      o.rtol = std::stod(next());
    else if (a == "--atol")
      o.atol = std::stod(next());
    else if (a == "--root")
      o.root = next();
    else if (a == "--list")
      o.listFile = next();
    else if (a == "--quiet")
      o.quiet = true;
    else if (a == "--strict")
      o.strict = true;
    else if (a == "--backend")
      o.backend = next();
    else if (a == "--no-host-fallback")
      o.hostFallback = false;
    else if (a == "--help" || a.rfind("--", 0) == 0)
      return false;
    else
      o.tests.push_back(a);
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parseArgs(argc, argv, o)) {
    std::cerr << "usage: strait-onnx-node-test [--root DIR] [--list FILE] "
                 "[--rtol R] [--atol A] [--quiet] [--strict] [--backend cpu|cuda] "
                 "[TEST_DIR|TEST_NAME ...]\n"
                 "  --backend cuda: run on GPU 0 (exit 77 without one); ops the CUDA\n"
                 "    backend lacks run on the host (CPU kernel, managed memory)\n"
                 "  --no-host-fallback: (cuda) those ops are SKIP instead and do not\n"
                 "    fail a --list run\n"
                 "  --strict: skipped tests fail the run (implied by --list)\n"
                 "  no tests and no --list: every test_* under --root\n";
    return 2;
  }
  if (!o.listFile.empty() && !exists(o.root)) {
    std::cout << "skipped: ONNX test data not found at " << o.root << "\n";
    return 77; // ctest SKIP_RETURN_CODE
  }
  if (!o.listFile.empty()) {
    std::ifstream in(o.listFile);
    if (!in) {
      std::cerr << "cannot read --list " << o.listFile << "\n";
      return 2;
    }
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#')
        o.tests.push_back(line);
  } else if (o.tests.empty()) {
    for (const std::string &name : listDir(o.root))
      if (name.rfind("test_", 0) == 0)
        o.tests.push_back(name);
  }
  BackendRegistry registry;
  registerCpuBackend(registry);
  if (o.backend == "cuda") {
#ifdef STRAIT_HAVE_CUDA
    if (cudaDeviceCount() == 0) {
      std::cout << "skipped: " << cudaUnavailableReason() << "\n";
      return 77;
    }
    CudaOptions co;
    co.hostFallback = o.hostFallback;
    Status cs = registerCudaBackend(registry, co);
    if (!cs.isOk()) {
      std::cerr << cs.toString() << "\n";
      return 1;
    }
#else
    std::cout << "skipped: built without the CUDA backend (STRAIT_ENABLE_CUDA)\n";
    return 77;
#endif
  } else if (o.backend != "cpu") {
    std::cerr << "--backend must be cpu or cuda\n";
    return 2;
  }
  // cuda: tests whose kernels all ran on the GPU vs. those with host kernels.
  const Backend *cudaBackend = nullptr;
  if (o.backend == "cuda") {
    StatusOr<const Backend *> b = registry.forDevice("cuda:0");
    if (b.isOk())
      cudaBackend = *b;
  }
  auto hostKernels = [&]() -> int64_t {
    int64_t total = 0;
#ifdef STRAIT_HAVE_CUDA
    if (cudaBackend)
      for (const auto &e : cudaHostFallbackCounts(*cudaBackend))
        total += e.second;
#endif
    return total;
  };
  int pass = 0, fail = 0, skip = 0, passNative = 0, passHost = 0;
  for (const std::string &t : o.tests) {
    std::string dir = t.find('/') == std::string::npos ? o.root + "/" + t : t;
    std::string name = dir.substr(dir.find_last_of('/') + 1), op, reason;
    int64_t hostBefore = hostKernels();
    Outcome r = runTest(dir, registry, o, op, reason);
    if (r == Outcome::Pass)
      ++(hostKernels() > hostBefore ? passHost : passNative);
    const char *tag = r == Outcome::Pass ? "PASS" : r == Outcome::Fail ? "FAIL" : "SKIP";
    (r == Outcome::Pass ? pass : r == Outcome::Fail ? fail : skip)++;
    if (!o.quiet || r != Outcome::Pass)
      std::cout << tag << " " << op << " " << name
                << (reason.empty() ? "" : " " + reason) << "\n";
  }
  std::cout << "summary: " << pass << " passed, " << fail << " failed, " << skip
            << " skipped (rtol " << o.rtol << ", atol " << o.atol << ")\n";
  if (cudaBackend) {
    std::cout << "cuda: " << passNative << " passed natively, " << passHost
              << " passed with host kernels\n";
#ifdef STRAIT_HAVE_CUDA
    std::string note = cudaHostFallbackNote(*cudaBackend);
    if (!note.empty())
      std::cout << note << "\n";
#endif
  }
  // A --list run checks that every listed test passes; on cuda without the
  // host fallback, ops without a CUDA kernel are skips that do not fail it
  // (--strict still does).
  bool strict = o.strict ||
                (!o.listFile.empty() && (o.backend == "cpu" || o.hostFallback));
  return fail > 0 || (strict && skip > 0) ? 1 : 0;
}
