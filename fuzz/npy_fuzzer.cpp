//===- npy_fuzzer.cpp - libFuzzer target: .npy arrays ----------------------===//
//
// strait-run reads .npy files it did not write: --data / --labels arrays and
// the values of checkpoints it resumes from (which may be copied, truncated or
// edited). The input is a whole .npy file for data::parseNpy (the reader
// behind readNpy): it must return a Status or an array whose payload is
// exactly numel x dtype size bytes; an accepted array with at least one row
// is then fed through the npy data loader's row copy (as openNpyArrays
// would) into a tensor of its own shape with a batch of up to 4 rows.
// Built by fuzz/build-program.sh.
//
//===----------------------------------------------------------------------===//
#include "DataLoader.h"
#include "Npy.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

using namespace strait;
using namespace strait::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  StatusOr<data::NpyArray> a = data::parseNpy(bytes, "fuzz.npy");
  if (!a.isOk())
    return 0;
  uint64_t numel = 1;
  for (int64_t d : a->shape) {
    if (d < 0) {
      std::fprintf(stderr, "parseNpy accepted a negative dimension\n");
      std::abort();
    }
    numel *= static_cast<uint64_t>(d);
  }
  if (a->bytes.size() != numel * dtypeSize(a->dtype)) {
    std::fprintf(stderr, "parseNpy accepted %zu payload bytes for %llu elements\n",
                 a->bytes.size(), static_cast<unsigned long long>(numel));
    std::abort();
  }
  if (a->shape.empty() || a->shape[0] == 0 || a->bytes.size() > (16u << 20))
    return 0;
  // Through the loader: a file in a private folder, read back by openNpyArrays.
  static std::string dir = [] {
    char tmpl[] = "/tmp/npy-fuzz-XXXXXX";
    return std::string(::mkdtemp(tmpl));
  }();
  std::string path = dir + "/samples.npy";
  FILE *f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  StatusOr<std::unique_ptr<data::DataLoader>> loader = data::openNpyArrays(path, "", 1, 0);
  if (!loader.isOk())
    return 0;
  Shape shape = a->shape;
  shape[0] = 1 + static_cast<int64_t>(size % 4);
  std::vector<char> storage(static_cast<size_t>(numElements(shape)) * dtypeSize(a->dtype) + 1);
  Tensor t;
  t.dtype = a->dtype;
  t.shape = shape;
  t.data = storage.data();
  (void)(*loader)->fill(&t, "x", nullptr, "", static_cast<int64_t>(size));
  return 0;
}
