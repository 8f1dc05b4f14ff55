//===- Npy.cpp - Strict reader and writer of NumPy .npy files -------------===//
#include "Npy.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <unistd.h>

namespace strait {
namespace rt {
namespace data {

namespace {

struct DescrEntry {
  const char *descr;
  DType dtype;
};
const DescrEntry kDescrs[] = {
    {"<f4", program::DTYPE_F32}, {"<f8", program::DTYPE_F64},
    {"<i8", program::DTYPE_I64}, {"<i4", program::DTYPE_I32},
    {"<i2", program::DTYPE_I16}, {"|i1", program::DTYPE_I8},
    {"<u2", program::DTYPE_U16}, {"<u4", program::DTYPE_U32},
    {"<u8", program::DTYPE_U64}, {"|u1", program::DTYPE_U8},
    {"|b1", program::DTYPE_BOOL}, {"<f2", program::DTYPE_F16},
};

/// A cursor over the header dictionary text.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &file)
      : text(text), file(file) {}

  Status fail(const std::string &what) const {
    return invalidArgument(file + ": malformed .npy header (" + what + ") at offset " +
                           std::to_string(pos) + " of '" + text + "'");
  }
  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t'))
      ++pos;
  }
  bool eat(char c) {
    skipSpace();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool quoted(std::string &out) {
    skipSpace();
    if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"'))
      return false;
    char q = text[pos++];
    size_t end = text.find(q, pos);
    if (end == std::string::npos)
      return false;
    out = text.substr(pos, end - pos);
    pos = end + 1;
    return true;
  }
  bool word(std::string &out) {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos])))
      ++pos;
    out = text.substr(start, pos - start);
    return !out.empty();
  }
  bool integer(int64_t &out) {
    skipSpace();
    size_t start = pos;
    uint64_t v = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      v = v * 10 + static_cast<uint64_t>(text[pos] - '0');
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 16))
        return false;
      ++pos;
    }
    // A trailing 'L' (Python 2 writers) is accepted.
    if (pos < text.size() && text[pos] == 'L' && pos > start)
      ++pos;
    out = static_cast<int64_t>(v);
    return pos > start;
  }

  Status parse(std::string &descr, bool &fortran, Shape &shape) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    if (!eat('{'))
      return fail("expected '{'");
    while (!eat('}')) {
      std::string key;
      if (!quoted(key))
        return fail("expected a quoted key");
      if (!eat(':'))
        return fail("expected ':' after '" + key + "'");
      if (key == "descr" && !haveDescr) {
        if (!quoted(descr))
          return fail("descr is not a string");
        haveDescr = true;
      } else if (key == "fortran_order" && !haveFortran) {
        std::string w;
        if (!word(w) || (w != "True" && w != "False"))
          return fail("fortran_order is not True or False");
        fortran = w == "True";
        haveFortran = true;
      } else if (key == "shape" && !haveShape) {
        if (!eat('('))
          return fail("shape is not a tuple");
        while (!eat(')')) {
          int64_t d;
          if (!integer(d))
            return fail("shape entry is not a non-negative integer");
          shape.push_back(d);
          if (shape.size() > 32)
            return fail("more than 32 dimensions");
          if (!eat(',')) {
            if (!eat(')'))
              return fail("expected ',' or ')' in shape");
            break;
          }
        }
        haveShape = true;
      } else {
        return fail("unexpected or repeated key '" + key + "'");
      }
      if (!eat(',')) {
        if (!eat('}'))
          return fail("expected ',' or '}'");
        break;
      }
    }
    skipSpace();
    while (pos < text.size() && text[pos] == '\n')
      ++pos;
    skipSpace();
    if (pos != text.size())
      return fail("trailing characters after the dictionary");
    if (!haveDescr || !haveFortran || !haveShape)
      return fail("needs the keys 'descr', 'fortran_order' and 'shape'");
    return Status::ok();
  }

private:
  const std::string &text;
  const std::string &file;
  size_t pos = 0;
};

} // namespace

std::string npyDescr(DType dtype) {
  for (const auto &e : kDescrs)
    if (e.dtype == dtype)
      return e.descr;
  return "";
}

StatusOr<NpyArray> parseNpy(const std::string &c, const std::string &name) {
  static const char kMagic[] = "\x93NUMPY";
  if (c.size() < 10 || std::memcmp(c.data(), kMagic, 6) != 0)
    return invalidArgument(name + ": not a .npy file (bad magic or shorter than 10 bytes)");
  int major = static_cast<unsigned char>(c[6]);
  size_t headerLen, start;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(c[8]) | (static_cast<unsigned char>(c[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (c.size() < 12)
      return invalidArgument(name + ": truncated .npy header");
    headerLen = 0;
    for (int i = 3; i >= 0; --i)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(c[8 + i]);
    start = 12;
  } else {
    return invalidArgument(name + ": unsupported .npy format version " +
                           std::to_string(major));
  }
  if (headerLen > c.size() - start)
    return invalidArgument(name + ": truncated .npy header (header length " +
                           std::to_string(headerLen) + ", file " +
                           std::to_string(c.size()) + " bytes)");
  std::string header = c.substr(start, headerLen);
  std::string descr;
  bool fortran = false;
  NpyArray a;
  HeaderParser hp(header, name);
  STRAIT_RETURN_IF_ERROR(hp.parse(descr, fortran, a.shape));
  if (fortran)
    return invalidArgument(name + ": Fortran-ordered .npy arrays are not supported");
  for (const auto &e : kDescrs)
    if (descr == e.descr)
      a.dtype = e.dtype;
  if (a.dtype == program::DTYPE_UNSPECIFIED)
    return invalidArgument(name + ": unsupported .npy dtype '" + descr +
                           "' (little-endian numeric types only)");
  uint64_t count = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))
      return invalidArgument(name + ": .npy shape " + shapeToString(a.shape) + " is too large");
    count *= static_cast<uint64_t>(d);
  }
  uint64_t bytes = count * dtypeSize(a.dtype);
  size_t have = c.size() - start - headerLen;
  if (bytes != have)
    return invalidArgument(name + ": .npy payload is " + std::to_string(have) +
                           " bytes, shape " + shapeToString(a.shape) + " of " + descr +
                           " needs " + std::to_string(bytes) +
                           (have < bytes ? " (truncated file)" : " (trailing bytes)"));
  a.bytes.assign(c.begin() + static_cast<std::ptrdiff_t>(start + headerLen), c.end());
  return a;
}

StatusOr<NpyArray> readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return ioError("cannot open " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    return ioError("cannot read " + path);
  return parseNpy(ss.str(), path);
}

Status writeNpy(const std::string &path, const Tensor &t) {
  std::string descr = npyDescr(t.dtype);
  if (descr.empty())
    return invalidArgument("cannot write " + path + ": " + t.typeString() +
                           " has no .npy dtype");
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape.size(); ++i)
    header += std::to_string(t.shape[i]) + (t.shape.size() == 1 || i + 1 < t.shape.size() ? "," : "");
  header += "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  // Written under a temporary name and renamed: a failed or killed write
  // never leaves a truncated file under `path` that looks like an array.
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return ioError("cannot write " + path + ": " + std::strerror(errno));
    out.write("\x93NUMPY\x01\x00", 8);
    char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    out.write(len, 2);
    out << header;
    out.write(static_cast<const char *>(t.data), static_cast<std::streamsize>(t.byteSize()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return ioError("write to " + path + " failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ioError("cannot write " + path + ": " + std::strerror(errno));
    std::remove(tmp.c_str());
    return s;
  }
  return Status::ok();
}

} // namespace data
} // namespace rt
} // namespace strait
