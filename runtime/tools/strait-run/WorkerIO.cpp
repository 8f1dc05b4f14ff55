//===- WorkerIO.cpp - What a rank reads and writes besides its steps ------===//
#include "WorkerIO.h"
#include "Checkpoint.h"
#include "Npy.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sys/stat.h>

namespace strait {
namespace run {

using namespace strait::rt;

std::string resolvePath(const std::string &dir, const std::string &path) {
  return !path.empty() && path[0] == '/' ? path : dir + "/" + path;
}

namespace {

bool isIntegerType(DType d) {
  return d == program::DTYPE_I64 || d == program::DTYPE_I32 || d == program::DTYPE_I16 ||
         d == program::DTYPE_I8 || d == program::DTYPE_U64 || d == program::DTYPE_U32 ||
         d == program::DTYPE_U16 || d == program::DTYPE_U8;
}

} // namespace

std::string pickDataInput(const program::Program &p, const RunOptions &o, bool tokens) {
  auto isInput = [&](const std::string &name) {
    for (const auto &v : p.values())
      if (v.role() == program::ROLE_INPUT && v.name() == name)
        return true;
    return false;
  };
  if (!o.inputName.empty())
    return isInput(o.inputName) ? o.inputName : "";
  if (tokens && isInput("input_ids"))
    return "input_ids";
  std::string integerInput; // npy: the first integer input, input_ids first
  for (const auto &v : p.values()) {
    if (v.role() != program::ROLE_INPUT || v.name() == o.labelsName || v.name() == "step" ||
        v.name() == "lr" || v.name() == "loss_scale" || v.name() == "optimizer_step")
      continue;
    bool integer = isIntegerType(v.dtype());
    if (integer == tokens)
      return v.name();
    if (integer && (integerInput.empty() || v.name() == "input_ids"))
      integerInput = v.name();
  }
  // npy data and no float input: the integer one (the loader checks dtypes).
  return tokens ? "" : integerInput;
}

Status checkInputName(const program::Program &p, const program::PlanManifest &m,
                      const program::RankEntry &entry, const RunOptions &o) {
  std::string names;
  auto has = [&](const program::Program &q) {
    for (const auto &v : q.values())
      if (v.role() == program::ROLE_INPUT && v.name() != "step" && v.name() != "lr" &&
          names.find("'" + v.name() + "'") == std::string::npos)
        names += (names.empty() ? "'" : ", '") + v.name() + "'";
    return names.find("'" + o.inputName + "'") != std::string::npos;
  };
  if (o.inputName.empty() || has(p))
    return Status::ok();
  for (const auto &r : m.ranks())
    if (r.replica() == entry.replica() && r.rank() != o.rank) {
      STRAIT_ASSIGN_OR_RETURN(program::Program q,
                              loadProgram(resolvePath(o.planDir, r.program_file())));
      if (has(q))
        return Status::ok();
    }
  return invalidArgument("--input-name '" + o.inputName +
                         "' is not an input of the job (its inputs: " + names + ")");
}

Status dumpOutputs(const Executor &exec, const program::Program &p, const RunOptions &o,
                   const std::vector<std::string> &fed) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = o.dumpDir.find('/', pos + 1);
    ::mkdir(o.dumpDir.substr(0, pos).c_str(), 0755);
  }
  for (const auto &v : p.values()) {
    bool dataInput = v.role() == program::ROLE_INPUT && !v.name().empty() &&
                     std::find(fed.begin(), fed.end(), v.name()) != fed.end();
    if (v.role() != program::ROLE_OUTPUT && !dataInput)
      continue;
    std::string name = v.name().empty() ? "value" + std::to_string(v.id()) : v.name();
    for (char &c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
        c = '_';
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
    std::string path = o.dumpDir + "/" + name + ".rank" + std::to_string(o.rank) + ".npy";
    STRAIT_RETURN_IF_ERROR(data::writeNpy(path, t));
  }
  return Status::ok();
}

void printProfile(Executor &exec, int rank, int iterations, double wallMs) {
  std::vector<Executor::OpTime> ops = exec.takeProfile();
  std::string head = "rank " + std::to_string(rank) + " profile: ";
  if (iterations == 0) {
    std::cout << head << "no iteration after the first to profile (--steps 2 or more)\n";
    return;
  }
  double kernels = 0;
  for (const Executor::OpTime &t : ops)
    kernels += t.ms;
  char line[256];
  std::snprintf(line, sizeof(line),
                "%d iterations, %.3f ms each, %.3f ms in kernels (%.0f %%; the rest: "
                "waiting for transfers, the executor)",
                iterations, wallMs / iterations, kernels / iterations,
                wallMs > 0 ? 100 * kernels / wallMs : 0.0);
  std::cout << head << line << "\n";
  for (const Executor::OpTime &t : ops) {
    std::snprintf(line, sizeof(line), "%-32s %6.1f launches %9.3f ms %5.1f %% %8.2f GB/s",
                  t.op.c_str(), double(t.launches) / iterations, t.ms / iterations,
                  wallMs > 0 ? 100 * t.ms / wallMs : 0.0, t.ms > 0 ? t.bytes / t.ms / 1e6 : 0.0);
    std::cout << head << line << "\n";
  }
}

Status saveParameters(const Executor &exec, const program::Program &p, const RunOptions &o) {
  makeDirs(o.saveParamsDir);
  std::string index;
  for (const auto &v : p.values()) {
    if (v.role() != program::ROLE_PARAMETER)
      continue;
    std::string key = v.parameter_name().empty() ? v.name() : v.parameter_name();
    std::string name = key.empty() ? "value" + std::to_string(v.id()) : key;
    for (char &c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
        c = '_';
    name += ".rank" + std::to_string(o.rank) + ".npy";
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
    STRAIT_RETURN_IF_ERROR(data::writeNpy(o.saveParamsDir + "/" + name, t));
    index += name + " " + key + "\n";
  }
  std::string list = o.saveParamsDir + "/params.rank" + std::to_string(o.rank) + ".txt";
  FILE *f = std::fopen(list.c_str(), "w");
  bool ok = f && std::fwrite(index.data(), 1, index.size(), f) == index.size();
  if (f && std::fclose(f) != 0)
    ok = false;
  if (!ok)
    return ioError("cannot write " + list);
  // LoRA's rank and alpha (straitc --lora), which merging the adapters needs:
  // every rank copies the job's record (a temporary of its own, renamed).
  std::string record = o.planDir + "/lora.json", saved = o.saveParamsDir + "/lora.json";
  std::ifstream in(record, std::ios::binary);
  if (!in) {
    if (o.rank == 0)
      std::remove(saved.c_str()); // not a LoRA job: no stale record
    return Status::ok();
  }
  std::string tmp = saved + ".rank" + std::to_string(o.rank) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!(out << in.rdbuf()) || !out.flush())
      return ioError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), saved.c_str()) != 0)
    return ioError("cannot rename " + tmp + " to " + saved + ": " + std::strerror(errno));
  return Status::ok();
}

} // namespace run
} // namespace strait
