//===- DataInputs.cpp - What feeds each input of a rank's program ---------===//
#include "DataInputs.h"
#include "Npy.h"
#include "WorkerIO.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

bool isIntegerType(DType d) {
  return d == program::DTYPE_I64 || d == program::DTYPE_I32 || d == program::DTYPE_I16 ||
         d == program::DTYPE_I8 || d == program::DTYPE_U64 || d == program::DTYPE_U32 ||
         d == program::DTYPE_U16 || d == program::DTYPE_U8;
}

/// Inputs the worker feeds itself (StraitRun.h, LossScale.h).
bool isWorkerInput(const std::string &name) {
  return name == "step" || name == "lr" || name == "loss_scale" || name == "optimizer_step";
}

/// HF's attention_mask, decoder_attention_mask, pixel_mask, ...
bool namedLikeMask(const std::string &name) {
  std::string lower = name;
  for (char &c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("mask") != std::string::npos;
}

const program::Value *findInput(const program::Program &p, const std::string &name) {
  for (const auto &v : p.values())
    if (v.role() == program::ROLE_INPUT && v.name() == name)
      return &v;
  return nullptr;
}

/// "i64[8x16]" of a program value.
std::string typeOf(const program::Value &v) {
  Tensor t;
  t.dtype = v.dtype();
  t.shape.assign(v.shape().begin(), v.shape().end());
  return t.typeString();
}

/// The programs of a rank's replica in stage order, its own included;
/// the others are loaded on first use.
class ReplicaPrograms {
public:
  ReplicaPrograms(const program::Program &own, const program::PlanManifest &m,
                  const program::RankEntry &entry, const RunOptions &o)
      : own(own), m(m), entry(entry), o(o) {}

  StatusOr<std::vector<const program::Program *>> all() {
    if (!loaded) {
      std::vector<const program::RankEntry *> ranks;
      for (const auto &r : m.ranks())
        if (r.replica() == entry.replica())
          ranks.push_back(&r);
      std::stable_sort(ranks.begin(), ranks.end(),
                       [](auto *a, auto *b) { return a->stage() < b->stage(); });
      for (const program::RankEntry *r : ranks) {
        if (r->rank() == entry.rank()) {
          order.push_back(&own);
          continue;
        }
        STRAIT_ASSIGN_OR_RETURN(program::Program q,
                                loadProgram(resolvePath(o.planDir, r->program_file())));
        others.push_back(std::make_unique<program::Program>(std::move(q)));
        order.push_back(others.back().get());
      }
      loaded = true;
    }
    return order;
  }

  /// The input `name` in this rank's program, else in another of the
  /// replica's; null when none has it.
  StatusOr<const program::Value *> find(const std::string &name) {
    if (const program::Value *v = findInput(own, name))
      return v;
    STRAIT_ASSIGN_OR_RETURN(std::vector<const program::Program *> programs, all());
    for (const program::Program *q : programs)
      if (const program::Value *v = findInput(*q, name))
        return v;
    return static_cast<const program::Value *>(nullptr);
  }

  /// "'a', 'b'": the replica's inputs, those the worker feeds left out.
  StatusOr<std::string> inputNames() {
    STRAIT_ASSIGN_OR_RETURN(std::vector<const program::Program *> programs, all());
    std::vector<std::string> names;
    for (const program::Program *q : programs)
      for (const auto &v : q->values())
        if (v.role() == program::ROLE_INPUT && !isWorkerInput(v.name()) &&
            std::find(names.begin(), names.end(), v.name()) == names.end())
          names.push_back(v.name());
    std::string out;
    for (const std::string &n : names)
      out += (out.empty() ? "'" : ", '") + n + "'";
    return out;
  }

private:
  const program::Program &own;
  const program::PlanManifest &m;
  const program::RankEntry &entry;
  const RunOptions &o;
  bool loaded = false;
  std::vector<const program::Program *> order;
  std::vector<std::unique_ptr<program::Program>> others;
};

/// Writes `value` into element `i` (a dtype InputFeeds::open accepted).
void store(const Tensor &t, int64_t i, double value) {
  switch (t.dtype) {
  case program::DTYPE_F32: t.as<float>()[i] = static_cast<float>(value); break;
  case program::DTYPE_F64: t.as<double>()[i] = value; break;
  case program::DTYPE_F16: t.as<uint16_t>()[i] = value == 1 ? 0x3c00 : 0; break;
  case program::DTYPE_BF16: {
    float f = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits += 0x7fff + ((bits >> 16) & 1); // round to nearest even
    t.as<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
    break;
  }
  case program::DTYPE_BOOL: t.as<uint8_t>()[i] = value != 0; break;
  case program::DTYPE_I64: t.as<int64_t>()[i] = static_cast<int64_t>(value); break;
  case program::DTYPE_I32: t.as<int32_t>()[i] = static_cast<int32_t>(value); break;
  case program::DTYPE_I16: t.as<int16_t>()[i] = static_cast<int16_t>(value); break;
  case program::DTYPE_I8: t.as<int8_t>()[i] = static_cast<int8_t>(value); break;
  case program::DTYPE_U64: t.as<uint64_t>()[i] = static_cast<uint64_t>(value); break;
  case program::DTYPE_U32: t.as<uint32_t>()[i] = static_cast<uint32_t>(value); break;
  case program::DTYPE_U16: t.as<uint16_t>()[i] = static_cast<uint16_t>(value); break;
  case program::DTYPE_U8: t.as<uint8_t>()[i] = static_cast<uint8_t>(value); break;
  default: break;
  }
}

/// Whether `value` is exactly representable in an input of dtype `d`.
bool fits(DType d, double value) {
  bool integral = value == std::trunc(value);
  switch (d) {
  case program::DTYPE_F32: case program::DTYPE_F64: case program::DTYPE_BF16:
    return std::isfinite(value);
  case program::DTYPE_F16: case program::DTYPE_BOOL:
    return value == 0 || value == 1;
  case program::DTYPE_I8: return integral && std::fabs(value) <= 127;
  case program::DTYPE_I16: return integral && std::fabs(value) <= 32767;
  case program::DTYPE_I32: return integral && std::fabs(value) <= 2147483647.0;
  case program::DTYPE_I64: return integral && std::fabs(value) <= 9007199254740992.0;
  case program::DTYPE_U8: return integral && value >= 0 && value <= 255;
  case program::DTYPE_U16: return integral && value >= 0 && value <= 65535;
  case program::DTYPE_U32: return integral && value >= 0 && value <= 4294967295.0;
  case program::DTYPE_U64: return integral && value >= 0 && value <= 9007199254740992.0;
  default:
    return false;
  }
}

} // namespace

/// One --input (or --eval-input) array of an input this rank reads.
struct InputFeeds::Array {
  std::string name, path;
  bool eval = false;
  data::NpyArray array;
  Tensor tensor; // bound by bind()
};

/// An input written once: --input-fill VALUE, ones (a mask) or positions.
struct InputFeeds::Fill {
  std::string name;
  enum Kind { Value, Positions } kind = Value;
  double value = 0;
  std::string note;
};

InputFeeds::~InputFeeds() = default;

StatusOr<DataInputChoice> chooseDataInput(const program::Program &p,
                                          const program::PlanManifest &m,
                                          const program::RankEntry &entry, const RunOptions &o,
                                          bool tokens) {
  ReplicaPrograms replica(p, m, entry, o);
  DataInputChoice choice;
  auto shapeOf = [&](const program::Program &q) {
    if (const program::Value *v = findInput(q, choice.name))
      choice.shape.assign(v->shape().begin(), v->shape().end());
    return !choice.shape.empty();
  };
  // The common case: this rank's own pick, when it is the first stage.
  std::string own = pickDataInput(p, o, tokens);
  if (!own.empty() && (entry.stage() == 0 || !o.inputName.empty())) {
    choice.name = own;
    shapeOf(p);
    return choice;
  }
  STRAIT_ASSIGN_OR_RETURN(std::vector<const program::Program *> programs, replica.all());
  for (const program::Program *q : programs) {
    choice.name = o.inputName.empty() ? pickDataInput(*q, o, tokens) : o.inputName;
    if (!choice.name.empty() && shapeOf(*q))
      return choice;
  }
  return DataInputChoice{};
}

StatusOr<std::unique_ptr<InputFeeds>>
InputFeeds::open(const program::Program &p, const program::PlanManifest &m,
                 const program::RankEntry &entry, const RunOptions &o,
                 const DataInputChoice &data, const data::DataLoader *train,
                 const data::DataLoader *eval, bool tokens) {
  std::unique_ptr<InputFeeds> feeds(new InputFeeds());
  feeds->rank = o.rank;
  ReplicaPrograms replica(p, m, entry, o);
  std::map<std::string, std::string> flagOf; // input -> the flag that feeds it
  // Names: inputs of the job, not fed otherwise, not named twice.
  auto checkName = [&](const std::string &flag, const std::string &name) -> Status {
    if (!data.name.empty() && name == data.name)
      return invalidArgument(flag + " " + name + ": '" + name + "' is the data input, which --data " +
                             o.dataPath + " feeds (--input-name picks another)");
    if (name == o.labelsName)
      return invalidArgument(flag + " " + name + ": '" + name +
                             "' is the labels input: give it with --labels FILE.npy");
    if (isWorkerInput(name))
      return invalidArgument(flag + " " + name + ": strait-run feeds '" + name + "' itself");
    STRAIT_ASSIGN_OR_RETURN(const program::Value *v, replica.find(name));
    if (!v) {
      STRAIT_ASSIGN_OR_RETURN(std::string names, replica.inputNames());
      return invalidArgument(flag + " " + name + ": no program of the job has an input '" +
                             name + "' (its inputs: " + names + ")");
    }
    std::string key = (flag == "--eval-input" ? "eval:" : "") + name;
    auto [at, added] = flagOf.emplace(key, flag);
    if (!added)
      return invalidArgument(flag + " " + name + ": '" + name + "' is already fed by " +
                             at->second);
    return Status::ok();
  };
  for (const auto &[name, value] : o.inputFills) {
    STRAIT_RETURN_IF_ERROR(checkName("--input-fill", name));
    flagOf.emplace("eval:" + name, "--input-fill");
    const program::Value *v = findInput(p, name);
    if (!v)
      continue;
    char *end = nullptr;
    double x = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !fits(v->dtype(), x))
      return invalidArgument("--input-fill " + name + "=" + value + ": input '" + name + "' (" +
                             typeOf(*v) + ") cannot hold " + value +
                             (v->dtype() == program::DTYPE_F16 || v->dtype() == program::DTYPE_BOOL
                                  ? " (0 or 1 only)"
                                  : ""));
    feeds->fills.push_back({name, Fill::Value, x, "--input-fill " + value});
  }
  // --input and --eval-input arrays: npy data's rows.
  const RunOptions::NamedPaths *lists[] = {&o.inputFiles, &o.evalInputFiles};
  for (int evalList = 0; evalList < 2; ++evalList) {
    const char *flag = evalList ? "--eval-input" : "--input";
    const data::DataLoader *loader = evalList ? eval : train;
    const std::string &dataPath = evalList ? o.evalDataPath : o.dataPath;
    const char *dataFlag = evalList ? "--eval-data" : "--data";
    for (const auto &[name, path] : *lists[evalList]) {
      if (!loader)
        return invalidArgument(std::string(flag) + " " + name + "=" + path + " needs " + dataFlag +
                               " (npy samples whose rows it aligns with)");
      if (tokens)
        return invalidArgument(std::string(flag) + " " + name + "=" + path + ": " + dataFlag +
                               " " + dataPath + " is a token file, whose windows have no rows "
                               "to align an array with; give npy samples (--data FILE.npy)");
      STRAIT_RETURN_IF_ERROR(checkName(flag, name));
      const program::Value *v = findInput(p, name);
      if (!v)
        continue; // another stage's input: its rank reads the file
      auto a = std::make_unique<Array>();
      a->name = name;
      a->path = path;
      a->eval = evalList;
      STRAIT_ASSIGN_OR_RETURN(a->array, data::readNpy(path));
      const Shape &s = a->array.shape;
      int64_t n = static_cast<int64_t>(loader->sampleSpace({}));
      Shape want(v->shape().begin(), v->shape().end());
      std::string input = "input '" + name + "' (" + typeOf(*v) + ")";
      if (want.empty())
        return invalidArgument(std::string(flag) + " " + name + "=" + path + ": " + input +
                               " is a scalar, not a batch of samples");
      want[0] = n;
      if (s.empty() || s[0] != n)
        return invalidArgument(std::string(flag) + " " + name + "=" + path + ": " + path +
                               " of shape " + shapeToString(s) + " holds " +
                               (s.empty() ? "no rows" : std::to_string(s[0]) + " rows") + " but " +
                               dataFlag + " " + dataPath + " holds " + std::to_string(n) +
                               " samples (one row per sample, in the same order)");
      if (s != want)
        return invalidArgument(std::string(flag) + " " + name + "=" + path + ": " + input +
                               " does not fit " + path + ": expected " + shapeToString(want) +
                               " (N samples of the input's per-sample shape), got " +
                               shapeToString(s));
      if (a->array.dtype != v->dtype())
        return invalidArgument(std::string(flag) + " " + name + "=" + path + ": " + input +
                               " does not match the dtype '" + data::npyDescr(a->array.dtype) +
                               "' of " + path + " (save it as '" + data::npyDescr(v->dtype()) +
                               "')");
      if (!data.shape.empty() && v->shape(0) != data.shape[0])
        return invalidArgument(std::string(flag) + " " + name + "=" + path + ": " + input +
                               " has batch " + std::to_string(v->shape(0)) +
                               " but the data input '" + data.name + "' has " +
                               std::to_string(data.shape[0]) +
                               ": an array feeds one row per sample; export the model with "
                               "the batch dimension on '" + name + "'");
      feeds->arrays.push_back(std::move(a));
    }
  }
  // Held-out npy samples need the same per-sample inputs as the training.
  if (eval && !tokens)
    for (const auto &[name, path] : o.inputFiles)
      if (!flagOf.count("eval:" + name))
        return invalidArgument("--input " + name + "=" + path + " feeds the training samples; "
                               "--eval-data " + o.evalDataPath +
                               " needs its rows too: --eval-input " + name + "=FILE.npy");
  for (const auto &[name, path] : o.evalInputFiles)
    if (!flagOf.count(name))
      return invalidArgument("--eval-input " + name + "=" + path + " has no --input " + name +
                             " for the training samples");
  // Defaults for this rank's other inputs.
  for (const auto &v : p.values()) {
    const std::string &name = v.name();
    if (v.role() != program::ROLE_INPUT || isWorkerInput(name) || flagOf.count(name) ||
        (train && (name == data.name || name == o.labelsName)))
      continue;
    if (namedLikeMask(name)) {
      if (train && !tokens)
        return invalidArgument(
            "input '" + name + "' (" + typeOf(v) + ") gets no data and is named like a mask: " +
            "zeros would mask every position. Give its rows with --input " + name +
            "=FILE.npy (N rows, row-aligned with --data " + o.dataPath +
            "), or --input-fill " + name + "=1 if no sample is padded");
      if (!fits(v.dtype(), 1))
        return invalidArgument("input '" + name + "' (" + typeOf(v) +
                               ") is named like a mask and gets no data; its dtype cannot hold "
                               "ones: feed it with --input-fill " + name + "=VALUE");
      feeds->fills.push_back({name, Fill::Value, 1,
                              std::string("ones (a mask: attend everywhere, as ") +
                                  (train ? "a tokenizer gives for unpadded token windows"
                                         : "no --data: the other inputs are zeros") +
                                  "; --input-fill " + name + "=0 for a mask of the opposite "
                                  "convention)"});
    } else if (name == "position_ids" && isIntegerType(v.dtype()) && v.shape_size() >= 1) {
      feeds->fills.push_back({name, Fill::Positions, 0,
                              "positions 0.." + std::to_string(v.shape(v.shape_size() - 1) - 1) +
                                  " in every row (HF's default; --input " + name +
                                  "=FILE.npy for packed sequences)"});
    } else {
      std::cerr << "rank " << o.rank << ": warning: input '" << name
                << "' gets no data (zeros; --input " << name << "=FILE.npy feeds it)\n";
    }
  }
  return feeds;
}

Status InputFeeds::bind(Executor &exec) {
  for (auto &a : arrays) {
    STRAIT_ASSIGN_OR_RETURN(a->tensor, exec.getValueByName(a->name));
    if (!a->eval)
      std::cerr << "rank " << rank << ": input '" << a->name << "' <- " << a->path
                << " (the data input's rows)\n";
  }
  for (const Fill &f : fills) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValueByName(f.name));
    int64_t n = t.numel(), last = t.shape.empty() ? 1 : std::max<int64_t>(t.shape.back(), 1);
    for (int64_t i = 0; i < n; ++i)
      store(t, i, f.kind == Fill::Positions ? static_cast<double>(i % last) : f.value);
    std::cerr << "rank " << rank << ": input '" << f.name << "' <- " << f.note << "\n";
  }
  return Status::ok();
}

Status InputFeeds::fill(const data::DataLoader &loader, int64_t iteration, bool eval) {
  for (const auto &a : arrays) {
    if (a->eval != eval)
      continue;
    const Tensor &t = a->tensor;
    int64_t b = t.shape[0];
    std::vector<uint64_t> rows = loader.sampleIds(iteration, {b});
    size_t rowBytes = a->array.bytes.size() / static_cast<size_t>(a->array.shape[0]);
    if (static_cast<int64_t>(rows.size()) != b || rowBytes * b != t.byteSize())
      return internalError("--input " + a->name + ": " + std::to_string(rows.size()) +
                           " rows for a batch of " + std::to_string(b));
    for (int64_t i = 0; rowBytes && i < b; ++i)
      std::memcpy(static_cast<char *>(t.data) + i * rowBytes,
                  a->array.bytes.data() + rows[i] * rowBytes, rowBytes);
  }
  return Status::ok();
}

std::vector<std::string> InputFeeds::fedNames() const {
  std::vector<std::string> out;
  for (const auto &a : arrays)
    if (!a->eval)
      out.push_back(a->name);
  for (const Fill &f : fills)
    out.push_back(f.name);
  return out;
}

} // namespace run
} // namespace strait
