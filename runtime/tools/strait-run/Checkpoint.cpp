//===- Checkpoint.cpp - Training checkpoints of strait-run ----------------===//
//
// Writing and reading the step folders Checkpoint.h describes. Values are
// .npy files (numpy.load reads them; 16-bit floats, which .npy cannot name,
// are stored as '<u2' and the index keeps their dtype). Every file and the
// index are written under a temporary name and renamed, and the folder only
// counts once checkpoint.json exists, so a crash while writing never leaves
// a checkpoint that looks complete.
//
//===----------------------------------------------------------------------===//
#include "Checkpoint.h"

#include "Npy.h"

#include "ProgramBytes.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

constexpr const char *kFormat = "strait-checkpoint-1";

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool isPersistent(const program::Value &v) {
  return v.role() == program::ROLE_PARAMETER || v.role() == program::ROLE_OPTIMIZER_STATE;
}

std::string keyOf(const program::Value &v) {
  if (!v.parameter_name().empty())
    return v.parameter_name();
  return v.name().empty() ? "value" + std::to_string(v.id()) : v.name();
}

/// A file name for variable `key`: its characters outside [A-Za-z0-9._-]
/// become '_'; a name already taken gets "~2", "~3", ...
std::string fileNameFor(const std::string &key, std::set<std::string> &taken) {
  std::string base = key;
  for (char &c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      c = '_';
  std::string name = base + ".npy";
  for (int k = 2; taken.count(name); ++k)
    name = base + "~" + std::to_string(k) + ".npy";
  taken.insert(name);
  return name;
}

std::string shapeText(const Shape &shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s.empty() ? "scalar" : s;
}

/// Writes `text` to `path` through `path`.tmp and a rename.
Status writeFileAtomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0)
    ok = false;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    return ioError("cannot write '" + path + "': " + std::strerror(errno));
  return Status::ok();
}

/// One line of a rank's index.tsv.
struct IndexEntry {
  std::string file, dtype, shape, name;
};

StatusOr<std::vector<IndexEntry>> readIndex(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return ioError("cannot read checkpoint index '" + path + "'");
  std::vector<IndexEntry> out;
  int lineNo = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineNo;
    if (line.empty())
      continue;
    IndexEntry e;
    std::istringstream fields(line);
    if (!std::getline(fields, e.file, '\t') || !std::getline(fields, e.dtype, '\t') ||
        !std::getline(fields, e.shape, '\t') || !std::getline(fields, e.name) ||
        e.file.empty() || e.name.empty() || e.file.find('/') != std::string::npos)
      return invalidArgument("checkpoint index '" + path + "' line " + std::to_string(lineNo) +
                             ": expected file<TAB>dtype<TAB>shape<TAB>name");
    out.push_back(std::move(e));
  }
  return out;
}

/// The integer after `"key":` in `text`; false when there is none.
bool jsonInt(const std::string &text, const std::string &key, int64_t &out) {
  size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos)
    return false;
  at = text.find(':', at);
  if (at == std::string::npos)
    return false;
  const char *begin = text.c_str() + at + 1;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(begin, &end, 10);
  if (end == begin || errno)
    return false;
  out = v;
  return true;
}

StatusOr<CheckpointRef> readCheckpointJson(const std::string &dir) {
  std::string path = dir + "/checkpoint.json";
  std::ifstream in(path);
  if (!in)
    return ioError("cannot read '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CheckpointRef ref;
  ref.dir = dir;
  int64_t world = 0;
  if (text.find(std::string("\"format\": \"") + kFormat + "\"") == std::string::npos ||
      !jsonInt(text, "step", ref.step) || ref.step < 1 || !jsonInt(text, "world_size", world))
    return invalidArgument("'" + path + "' is not a " + kFormat +
                           " file (format, step >= 1 and world_size expected)");
  size_t open = text.find("\"writers\"");
  open = open == std::string::npos ? open : text.find('[', open);
  size_t close = open == std::string::npos ? open : text.find(']', open);
  if (close == std::string::npos)
    return invalidArgument("'" + path + "': no \"writers\" list");
  std::istringstream list(text.substr(open + 1, close - open - 1));
  for (std::string item; std::getline(list, item, ',');) {
    char *end = nullptr;
    long r = std::strtol(item.c_str(), &end, 10);
    while (end && std::isspace(static_cast<unsigned char>(*end)))
      ++end;
    if (end == item.c_str() || (end && *end) || r < 0 || r >= world)
      return invalidArgument("'" + path + "': bad rank '" + item + "' in \"writers\"");
    ref.writers.push_back(static_cast<int>(r));
  }
  if (ref.writers.empty())
    return invalidArgument("'" + path + "': empty \"writers\" list");
  return ref;
}

/// step-N folder names under `root`, newest first.
std::vector<std::pair<int64_t, std::string>> stepFolders(const std::string &root) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR *d = ::opendir(root.c_str());
  if (!d)
    return out;
  while (dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18 ||
        !std::all_of(name.begin() + 5, name.end(), [](char c) { return std::isdigit(c); }))
      continue;
    out.push_back({std::stoll(name.substr(5)), root + "/" + name});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
  return out;
}

/// FNV-1a of the program's deterministic bytes: residuals are keyed by step
/// index and value id, which only mean the same in the same program.
std::string programFingerprint(const program::Program &p) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    p.SerializeToCodedStream(&coded);
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes)
    h = (h ^ c) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

/// Every residual of a stream and its sub-streams, keyed "s<step>.v<id>"
/// and ".p<i>" per sub-stream level; a residual on a device is downloaded
/// into `owned`.
Status collectResiduals(const ErrorFeedback &f, const std::string &key,
                        std::vector<std::pair<std::string, const std::vector<float> *>> &out,
                        std::deque<std::vector<float>> &owned) {
  if (f.onDevice()) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> r, f.residualValues());
    if (!r.empty())
      out.push_back({key, &owned.emplace_back(std::move(r))});
  } else if (!f.getResidual().empty()) {
    out.push_back({key, &f.getResidual()});
  }
  for (size_t i = 0; i < f.numParts(); ++i)
    if (const ErrorFeedback *part = f.getPart(i))
      STRAIT_RETURN_IF_ERROR(collectResiduals(*part, key + ".p" + std::to_string(i), out, owned));
  return Status::ok();
}

/// Writes this rank's residuals into DIR/feedback/ (nothing when it has
/// none): one .npy per stream and index.tsv ("program<TAB>FINGERPRINT",
/// then "file<TAB>numel<TAB>key" lines).
Status writeFeedback(const Executor &exec, const std::string &rankDir) {
  std::vector<std::pair<std::string, const std::vector<float> *>> residuals;
  std::deque<std::vector<float>> downloaded;
  for (const auto &[id, f] : exec.getFeedbackStreams())
    STRAIT_RETURN_IF_ERROR(collectResiduals(
        *f, "s" + std::to_string(id.first) + ".v" + std::to_string(id.second), residuals,
        downloaded));
  std::string dir = rankDir + "/feedback";
  if (exists(dir + "/index.tsv") && std::remove((dir + "/index.tsv").c_str()) != 0)
    return ioError("cannot remove the old '" + dir + "/index.tsv': " + std::strerror(errno));
  if (residuals.empty())
    return Status::ok();
  makeDirs(dir);
  std::string index = "program\t" + programFingerprint(exec.getProgram()) + "\n";
  for (const auto &[key, r] : residuals) {
    Tensor t;
    t.dtype = program::DTYPE_F32;
    t.shape = {static_cast<int64_t>(r->size())};
    t.data = const_cast<float *>(r->data());
    std::string path = dir + "/" + key + ".npy";
    STRAIT_RETURN_IF_ERROR(data::writeNpy(path + ".tmp", t));
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
      return ioError("cannot write '" + path + "': " + std::strerror(errno));
    index += key + ".npy\t" + std::to_string(r->size()) + "\t" + key + "\n";
  }
  return writeFileAtomically(dir + "/index.tsv", index);
}

/// The stream a residual key names, created as the key says (sub-streams
/// are made on first use); null for a (step, value) the program has no
/// stream for.
ErrorFeedback *streamFor(Executor &exec, const std::string &key) {
  unsigned long step = 0, value = 0;
  int used = 0;
  if (std::sscanf(key.c_str(), "s%lu.v%lu%n", &step, &value, &used) != 2)
    return nullptr;
  auto it = exec.getFeedbackStreams().find({static_cast<int>(step), static_cast<uint32_t>(value)});
  if (it == exec.getFeedbackStreams().end())
    return nullptr;
  ErrorFeedback *f = it->second.get();
  // Sub-stream i of a level is chunk i of a compressed all-reduce of k <=
  // world_size ranks, or (i = k) its reduced chunk; the levels nest once per
  // all-reduce level (islands). A key beyond that is no stream this program
  // makes (and must not make the loader allocate for it).
  const char *rest = key.c_str() + used;
  unsigned long maxPart = static_cast<unsigned long>(exec.getProgram().world_size());
  for (int depth = 0; *rest; ++depth) {
    unsigned long part = 0;
    int n = 0;
    if (std::sscanf(rest, ".p%lu%n", &part, &n) != 1 || n == 0 || part > maxPart || depth >= 4)
      return nullptr;
    f = &f->part(part);
    rest += n;
  }
  return f;
}

} // namespace

void makeDirs(const std::string &path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
}

StatusOr<CheckpointRef> findCheckpoint(const std::string &path) {
  if (!exists(path))
    return notFound("checkpoint folder '" + path + "' does not exist");
  if (exists(path + "/checkpoint.json"))
    return readCheckpointJson(path);
  std::string skipped;
  for (const auto &[step, dir] : stepFolders(path)) {
    if (exists(dir + "/checkpoint.json"))
      return readCheckpointJson(dir);
    skipped += (skipped.empty() ? "" : ", ") + dir;
  }
  return notFound("no complete checkpoint in '" + path + "'" +
                  (skipped.empty() ? "" : " (incomplete, without checkpoint.json: " + skipped + ")"));
}

StatusOr<std::string> writeCheckpoint(const Executor &exec, const std::string &root,
                                      int64_t step, int rank, int worldSize, bool writes,
                                      const std::vector<int> &writers, Communicator *comm,
                                      const NamedTensors &extra) {
  std::string dir = root + "/step-" + std::to_string(step);
  std::string marker = dir + "/checkpoint.json";
  std::string rankDir = dir + "/rank" + std::to_string(rank);
  // A folder rewritten for the same step (a job resumed from an older
  // checkpoint) stops counting as complete before any file changes; each
  // rank drops its old index, so that the writers rank 0 lists are this
  // write's.
  if (rank == 0) {
    makeDirs(dir);
    if (exists(marker) && std::remove(marker.c_str()) != 0)
      return ioError("cannot remove the old '" + marker + "': " + std::strerror(errno));
  }
  if (exists(rankDir + "/index.tsv") && std::remove((rankDir + "/index.tsv").c_str()) != 0)
    return ioError("cannot remove the old '" + rankDir + "/index.tsv': " + std::strerror(errno));
  if (comm)
    STRAIT_RETURN_IF_ERROR(comm->barrier());
  if (writes) {
    makeDirs(rankDir);
    std::string index;
    std::set<std::string> taken;
    std::vector<std::pair<std::string, Tensor>> entries;
    for (const program::Value &v : exec.getProgram().values()) {
      if (!isPersistent(v))
        continue;
      STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
      entries.push_back({keyOf(v), t});
    }
    entries.insert(entries.end(), extra.begin(), extra.end());
    for (const auto &[key, t] : entries) {
      std::string file = fileNameFor(key, taken);
      // .npy has no bf16 (nor does the reader take f2): 16-bit floats are
      // stored as their bit patterns.
      Tensor view = t;
      if (t.dtype == program::DTYPE_BF16 || t.dtype == program::DTYPE_F16)
        view.dtype = program::DTYPE_U16;
      std::string path = rankDir + "/" + file;
      Status s = data::writeNpy(path + ".tmp", view);
      if (!s.isOk())
        return Status(s).withStep(static_cast<int>(step));
      if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
        return ioError("cannot write '" + path + "': " + std::strerror(errno));
      index += file + "\t" + dtypeName(t.dtype) + "\t" + shapeText(t.shape) + "\t" + key + "\n";
    }
    STRAIT_RETURN_IF_ERROR(writeFileAtomically(rankDir + "/index.tsv", index));
  }
  // Every replica's residuals are its own: each rank with any writes them.
  Status fs = writeFeedback(exec, rankDir);
  if (!fs.isOk())
    return Status(fs).withStep(static_cast<int>(step));
  if (comm)
    STRAIT_RETURN_IF_ERROR(comm->barrier());
  if (rank == 0) {
    // `writers`, and the ranks that wrote beyond them (local steps: every
    // rank, whose island trains its own copy).
    std::set<int> wrote(writers.begin(), writers.end());
    for (int w = 0; w < worldSize; ++w)
      if (exists(dir + "/rank" + std::to_string(w) + "/index.tsv"))
        wrote.insert(w);
    std::string list;
    for (int w : wrote)
      list += (list.empty() ? "" : ", ") + std::to_string(w);
    STRAIT_RETURN_IF_ERROR(writeFileAtomically(
        marker, std::string("{\n  \"format\": \"") + kFormat + "\",\n  \"step\": " +
                    std::to_string(step) + ",\n  \"world_size\": " + std::to_string(worldSize) +
                    ",\n  \"writers\": [" + list + "]\n}\n"));
  }
  return dir;
}

StatusOr<size_t> loadCheckpoint(Executor &exec, const CheckpointRef &c, int rank,
                                const NamedTensors &extra) {
  struct Source {
    std::string path;
    IndexEntry entry;
  };
  std::map<std::string, Source> byName;
  std::vector<int> writers = c.writers;
  auto own = std::find(writers.begin(), writers.end(), rank);
  if (own != writers.end())
    std::rotate(writers.begin(), own, own + 1);
  for (int w : writers) {
    std::string rankDir = c.dir + "/rank" + std::to_string(w);
    STRAIT_ASSIGN_OR_RETURN(std::vector<IndexEntry> entries, readIndex(rankDir + "/index.tsv"));
    for (IndexEntry &e : entries)
      byName.emplace(e.name, Source{rankDir + "/" + e.file, e}); // first writer wins
  }
  struct Target {
    std::string key;
    const char *what;
    Tensor t;
  };
  std::vector<Target> targets;
  for (const program::Value &v : exec.getProgram().values()) {
    if (!isPersistent(v))
      continue;
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
    targets.push_back({keyOf(v),
                       v.role() == program::ROLE_PARAMETER ? "parameter" : "optimizer state", t});
  }
  size_t extraFound = 0;
  for (const auto &[key, t] : extra)
    if (byName.count(key)) {
      targets.push_back({key, "outer-step state", t});
      ++extraFound;
    }
  for (const Target &target : targets) {
    const std::string &key = target.key;
    const char *what = target.what;
    const Tensor &t = target.t;
    auto it = byName.find(key);
    if (it == byName.end())
      return notFound("checkpoint '" + c.dir + "' has no " + what + " '" + key +
                      "' (written for another model or optimizer?)");
    const IndexEntry &e = it->second.entry;
    if (e.dtype != dtypeName(t.dtype) || e.shape != shapeText(t.shape))
      return invalidArgument("checkpoint file '" + it->second.path + "': " + what + " '" + key +
                             "' is " + e.dtype + "[" + e.shape + "], this program's is " +
                             dtypeName(t.dtype) + "[" + shapeText(t.shape) + "]");
    STRAIT_ASSIGN_OR_RETURN(data::NpyArray a, data::readNpy(it->second.path));
    DType stored = t.dtype == program::DTYPE_BF16 || t.dtype == program::DTYPE_F16
                       ? program::DTYPE_U16
                       : t.dtype;
    if (a.dtype != stored || a.shape != t.shape || a.bytes.size() != t.byteSize())
      return invalidArgument("checkpoint file '" + it->second.path + "' holds " +
                             dtypeName(a.dtype) + "[" + shapeText(a.shape) +
                             "], its index says " + e.dtype + "[" + e.shape + "] for '" + key +
                             "'");
    std::memcpy(t.data, a.bytes.data(), a.bytes.size());
  }
  exec.invalidateParameterCopies();
  return extraFound;
}

StatusOr<std::string> loadFeedback(Executor &exec, const CheckpointRef &c, int rank) {
  std::string dir = c.dir + "/rank" + std::to_string(rank) + "/feedback";
  if (exec.getFeedbackStreams().empty())
    return std::string();
  std::ifstream in(dir + "/index.tsv");
  if (!in)
    return std::string("error-feedback residuals start at zero (the checkpoint has none for "
                       "this rank)");
  std::string line;
  std::getline(in, line);
  std::string want = "program\t" + programFingerprint(exec.getProgram());
  if (line != want)
    return std::string("error-feedback residuals start at zero (the checkpoint was written "
                       "under another plan)");
  size_t restored = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string file, numel, key;
    if (!std::getline(fields, file, '\t') || !std::getline(fields, numel, '\t') ||
        !std::getline(fields, key) || file.find('/') != std::string::npos)
      return invalidArgument("checkpoint file '" + dir + "/index.tsv': malformed line '" + line +
                             "'");
    ErrorFeedback *f = streamFor(exec, key);
    if (!f)
      return invalidArgument("checkpoint file '" + dir + "/index.tsv': residual '" + key +
                             "' names no error-feedback stream of this rank's program");
    STRAIT_ASSIGN_OR_RETURN(data::NpyArray a, data::readNpy(dir + "/" + file));
    if (a.dtype != program::DTYPE_F32 || a.shape.size() != 1 ||
        std::to_string(a.shape[0]) != numel || a.bytes.size() != a.shape[0] * sizeof(float))
      return invalidArgument("checkpoint file '" + dir + "/" + file + "' holds " +
                             dtypeName(a.dtype) + "[" + shapeText(a.shape) + "], its index says f32[" +
                             numel + "] for residual '" + key + "'");
    std::vector<float> r(static_cast<size_t>(a.shape[0]));
    std::memcpy(r.data(), a.bytes.data(), a.bytes.size());
    STRAIT_RETURN_IF_ERROR(f->restoreResidual(std::move(r)));
    ++restored;
  }
  return "restored " + std::to_string(restored) + " error-feedback residual" +
         (restored == 1 ? "" : "s");
}

} // namespace run
} // namespace strait
