//===- DataLoader.cpp - Token files and npy arrays as program inputs ------===//
#include "DataLoader.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strait {
namespace rt {
namespace data {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool isInteger(DType d) {
  switch (d) {
  case program::DTYPE_I64: case program::DTYPE_I32: case program::DTYPE_I16:
  case program::DTYPE_I8: case program::DTYPE_U64: case program::DTYPE_U32:
  case program::DTYPE_U16: case program::DTYPE_U8:
    return true;
  default:
    return false;
  }
}

/// Stores an integer into element `i` of an integer tensor.
void storeInt(const Tensor &t, int64_t i, int64_t v) {
  switch (t.dtype) {
  case program::DTYPE_I64: t.as<int64_t>()[i] = v; break;
  case program::DTYPE_I32: t.as<int32_t>()[i] = static_cast<int32_t>(v); break;
  case program::DTYPE_I16: t.as<int16_t>()[i] = static_cast<int16_t>(v); break;
  case program::DTYPE_I8: t.as<int8_t>()[i] = static_cast<int8_t>(v); break;
  case program::DTYPE_U64: t.as<uint64_t>()[i] = static_cast<uint64_t>(v); break;
  case program::DTYPE_U32: t.as<uint32_t>()[i] = static_cast<uint32_t>(v); break;
  case program::DTYPE_U16: t.as<uint16_t>()[i] = static_cast<uint16_t>(v); break;
  case program::DTYPE_U8: t.as<uint8_t>()[i] = static_cast<uint8_t>(v); break;
  default: break;
  }
}

int64_t loadInt(const NpyArray &a, int64_t i) {
  const char *p = a.bytes.data();
  switch (a.dtype) {
  case program::DTYPE_I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return v; }
  case program::DTYPE_I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
  case program::DTYPE_I16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
  case program::DTYPE_I8: return static_cast<int8_t>(p[i]);
  case program::DTYPE_U64: { uint64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<int64_t>(v); }
  case program::DTYPE_U32: { uint32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
  case program::DTYPE_U16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
  case program::DTYPE_U8: return static_cast<uint8_t>(p[i]);
  default: return 0;
  }
}

std::string describe(const std::string &name, const Tensor &t) {
  return "input '" + name + "' (" + t.typeString() + ")";
}

class TokenLoader : public DataLoader {
public:
  TokenLoader(std::string path, int width, const void *map, size_t bytes, uint64_t seed,
              uint64_t stream)
      : path(std::move(path)), width(width), map(map), bytes(bytes), seed(seed),
        stream(stream) {}
  ~TokenLoader() override {
    if (map && bytes)
      ::munmap(const_cast<void *>(map), bytes);
  }
  const char *itemName() const override { return "tokens"; }
  uint64_t sampleSpace(const Shape &shape) const override {
    uint64_t n = bytes / width, t = shape.size() == 2 ? shape[1] : 0;
    return t + 1 <= n ? n - t : 0;
  }
  std::vector<uint64_t> sampleIds(int64_t iteration, const Shape &shape) const override {
    uint64_t space = sampleSpace(shape);
    if (space == 0 || shape.empty())
      return {};
    int64_t b = shape[0];
    std::vector<uint64_t> offsets =
        sampleOffsets(seed, stream, iteration, (batchPart + 1) * b, space - 1);
    offsets.erase(offsets.begin(), offsets.begin() + batchPart * b);
    return offsets;
  }

  uint64_t token(uint64_t i) const {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, static_cast<const char *>(map) + 2 * i, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, static_cast<const char *>(map) + 4 * i, 4);
    return v;
  }

  Status check(const Tensor &t, const std::string &name) const {
    if (!isInteger(t.dtype))
      return invalidArgument(describe(name, t) + " cannot take token ids from " + path +
                             ": it is not of an integer type");
    if (t.rank() != 2)
      return invalidArgument(describe(name, t) + " cannot take token windows from " +
                             path + ": expected shape [B, T], got " +
                             shapeToString(t.shape));
    return Status::ok();
  }

  Status fill(const Tensor *input, const std::string &inputName, const Tensor *labels,
              const std::string &labelsName, int64_t iteration) override {
    if (!input && !labels)
      return Status::ok();
    if (input)
      STRAIT_RETURN_IF_ERROR(check(*input, inputName));
    if (labels)
      STRAIT_RETURN_IF_ERROR(check(*labels, labelsName));
    if (input && labels && input->shape != labels->shape)
      return invalidArgument("input '" + inputName + "' has shape " +
                             shapeToString(input->shape) + " but labels '" + labelsName +
                             "' have " + shapeToString(labels->shape) +
                             "; next-token labels need the same [B, T]");
    const Shape &s = input ? input->shape : labels->shape;
    int64_t b = s[0], t = s[1];
    uint64_t n = bytes / width;
    if (static_cast<uint64_t>(t) + 1 > n)
      return invalidArgument(path + " holds " + std::to_string(n) + " tokens, fewer than a window of T+1 = " +
                             std::to_string(t + 1) + " for input '" +
                             (input ? inputName : labelsName) + "' of shape " + shapeToString(s));
    std::vector<uint64_t> offsets = sampleIds(iteration, s);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < t; ++j) {
        if (input)
          storeInt(*input, i * t + j, static_cast<int64_t>(token(offsets[i] + j)));
        if (labels)
          storeInt(*labels, i * t + j, static_cast<int64_t>(token(offsets[i] + j + 1)));
      }
    return Status::ok();
  }

private:
  std::string path;
  int width;
  const void *map;
  size_t bytes;
  uint64_t seed, stream;
};

class NpyLoader : public DataLoader {
public:
  NpyLoader(std::string samplesPath, NpyArray samples, std::string labelsPath,
            NpyArray labels, bool haveLabels, uint64_t seed, uint64_t stream)
      : samplesPath(std::move(samplesPath)), samples(std::move(samples)),
        labelsPath(std::move(labelsPath)), labels(std::move(labels)),
        haveLabels(haveLabels), seed(seed), stream(stream) {}
  const char *itemName() const override { return "samples"; }
  uint64_t sampleSpace(const Shape &) const override {
    return static_cast<uint64_t>(samples.shape[0]);
  }
  std::vector<uint64_t> sampleIds(int64_t iteration, const Shape &shape) const override {
    if (shape.empty())
      return {};
    int64_t b = shape[0];
    std::vector<uint64_t> rows = sampleOffsets(seed, stream, iteration, (batchPart + 1) * b,
                                               sampleSpace(shape) - 1);
    rows.erase(rows.begin(), rows.begin() + batchPart * b);
    return rows;
  }

  /// Checks that `t` is [B] + array.shape[1:]; returns B.
  static StatusOr<int64_t> batchOf(const Tensor &t, const std::string &name,
                                   const NpyArray &a, const std::string &file) {
    Shape want(a.shape.begin() + 1, a.shape.end());
    Shape got(t.shape.begin() + (t.shape.empty() ? 0 : 1), t.shape.end());
    if (t.shape.empty() || want != got) {
      Shape expect = want;
      expect.insert(expect.begin(), t.shape.empty() ? -1 : t.shape[0]);
      return invalidArgument(describe(name, t) + " does not fit " + file + " of shape " +
                             shapeToString(a.shape) + ": expected " + shapeToString(expect) +
                             ", got " + shapeToString(t.shape));
    }
    return t.shape[0];
  }

  Status fill(const Tensor *input, const std::string &inputName, const Tensor *lab,
              const std::string &labelsName, int64_t iteration) override {
    if (lab && !haveLabels)
      return invalidArgument("the program has a labels input '" + labelsName +
                             "' but no --labels file was given for " + samplesPath);
    int64_t b = -1;
    if (input) {
      STRAIT_ASSIGN_OR_RETURN(b, batchOf(*input, inputName, samples, samplesPath));
      if (input->dtype != samples.dtype)
        return invalidArgument(describe(inputName, *input) + " does not match the dtype '" +
                               npyDescr(samples.dtype) + "' of " + samplesPath);
    }
    if (lab) {
      STRAIT_ASSIGN_OR_RETURN(int64_t lb, batchOf(*lab, labelsName, labels, labelsPath));
      // Class ids (cross-entropy) widen or narrow between integer types;
      // regression targets (mse) are copied, so their float type must match.
      bool ints = isInteger(lab->dtype) && isInteger(labels.dtype);
      if (!ints && lab->dtype != labels.dtype)
        return invalidArgument(describe(labelsName, *lab) + " and " + labelsPath + " (" +
                               npyDescr(labels.dtype) +
                               ") must both be of integer types, or of the same float type");
      if (b >= 0 && lb != b)
        return invalidArgument("input '" + inputName + "' has batch " + std::to_string(b) +
                               " but labels '" + labelsName + "' have " + std::to_string(lb));
      b = lb;
    }
    if (b < 0)
      return Status::ok();
    std::vector<uint64_t> rows = sampleIds(iteration, {b});
    if (input) {
      size_t rowBytes = samples.bytes.size() / static_cast<size_t>(samples.shape[0]);
      for (int64_t i = 0; rowBytes && i < b; ++i) // (empty rows: no data pointer to copy from)
        std::memcpy(static_cast<char *>(input->data) + i * rowBytes,
                    samples.bytes.data() + rows[i] * rowBytes, rowBytes);
    }
    if (lab && !isInteger(labels.dtype)) {
      size_t rowBytes = labels.bytes.size() / static_cast<size_t>(labels.shape[0]);
      for (int64_t i = 0; rowBytes && i < b; ++i)
        std::memcpy(static_cast<char *>(lab->data) + i * rowBytes,
                    labels.bytes.data() + rows[i] * rowBytes, rowBytes);
    } else if (lab) {
      int64_t per = labels.numel() / labels.shape[0];
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < per; ++j)
          storeInt(*lab, i * per + j, loadInt(labels, static_cast<int64_t>(rows[i]) * per + j));
    }
    return Status::ok();
  }

private:
  std::string samplesPath;
  NpyArray samples;
  std::string labelsPath;
  NpyArray labels;
  bool haveLabels;
  uint64_t seed, stream;
};

} // namespace

std::vector<uint64_t> sampleOffsets(uint64_t seed, uint64_t stream, int64_t iteration,
                                    int64_t count, uint64_t limit) {
  std::vector<uint64_t> out;
  uint64_t base = splitmix(splitmix(splitmix(seed) ^ stream) ^ static_cast<uint64_t>(iteration));
  for (int64_t i = 0; i < count; ++i)
    out.push_back(splitmix(base + static_cast<uint64_t>(i)) % (limit + 1));
  return out;
}

StatusOr<DataFormat> parseDataFormat(const std::string &text, const std::string &file) {
  if (text == "tokens-u16")
    return DataFormat::TokensU16;
  if (text == "tokens-u32")
    return DataFormat::TokensU32;
  if (text == "npy")
    return DataFormat::Npy;
  if (!text.empty())
    return invalidArgument("unknown --data-format '" + text +
                           "' (tokens-u16, tokens-u32 or npy)");
  if (file.size() >= 4 && file.compare(file.size() - 4, 4, ".npy") == 0)
    return DataFormat::Npy;
  return DataFormat::TokensU16;
}

StatusOr<std::unique_ptr<DataLoader>>
openTokenFile(const std::string &path, DataFormat format, uint64_t seed, uint64_t stream) {
  int width = format == DataFormat::TokensU32 ? 4 : 2;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return ioError("cannot open token file " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return ioError("cannot stat token file " + path + ": " + std::strerror(errno));
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0 || bytes % width != 0) {
    ::close(fd);
    return invalidArgument("token file " + path + " has " + std::to_string(bytes) +
                           " bytes, not a non-zero multiple of " + std::to_string(width) +
                           " (uint" + std::to_string(8 * width) + " tokens)");
  }
  void *map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED)
    return ioError("cannot map token file " + path + ": " + std::strerror(errno));
  return std::unique_ptr<DataLoader>(new TokenLoader(path, width, map, bytes, seed, stream));
}

StatusOr<std::unique_ptr<DataLoader>>
openNpyArrays(const std::string &samplesPath, const std::string &labelsPath, uint64_t seed,
              uint64_t stream) {
  STRAIT_ASSIGN_OR_RETURN(NpyArray samples, readNpy(samplesPath));
  if (samples.shape.empty() || samples.shape[0] == 0)
    return invalidArgument(samplesPath + ": expected an array of N >= 1 samples, got shape " +
                           shapeToString(samples.shape));
  NpyArray labels;
  if (!labelsPath.empty()) {
    STRAIT_ASSIGN_OR_RETURN(labels, readNpy(labelsPath));
    if (labels.shape.empty() || labels.shape[0] != samples.shape[0])
      return invalidArgument(labelsPath + " has shape " + shapeToString(labels.shape) +
                             " but " + samplesPath + " holds " +
                             std::to_string(samples.shape[0]) + " samples");
    if (labels.dtype != program::DTYPE_I64 && labels.dtype != program::DTYPE_I32 &&
        labels.dtype != program::DTYPE_F32 && labels.dtype != program::DTYPE_F64 &&
        labels.dtype != program::DTYPE_F16)
      return invalidArgument(labelsPath + ": labels must be int64 or int32 (class ids) or " +
                             "float (regression targets), got '" + npyDescr(labels.dtype) + "'");
  }
  return std::unique_ptr<DataLoader>(new NpyLoader(samplesPath, std::move(samples), labelsPath,
                                                   std::move(labels), !labelsPath.empty(),
                                                   seed, stream));
}

} // namespace data
} // namespace rt
} // namespace strait
