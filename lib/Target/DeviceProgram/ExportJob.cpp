//===- ExportJob.cpp - Parameter shards and the job folder ----------------===//
//
// The parts of a job beyond each rank's program (Export.cpp): parameter
// shards, the local-steps outer synchronization, and writeJob, which writes
// the manifest, programs and shards of every rank so that a failed or
// killed compile leaves no mix of old and new files.
//
//===----------------------------------------------------------------------===//

#include "strait/Target/DeviceProgram/Export.h"

#include "KernelLowering.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "ProgramBytes.h"

#include <fstream>

using namespace mlir;
using namespace strait;
using namespace strait::exporter;
namespace pb = strait::program;

/// Completes the key of each DropoutTraining kernel: the job seed and the
/// rank's data-parallel replica as attributes, and the program's "step"
/// input (the 1-based iteration the launcher sets each step; added when
/// the optimizer reads none, as SGD without momentum) as input 1, so that
/// masks differ across iterations and replicas and a resumed job draws
/// the ones it would have drawn (docs/training.md, "Dropout").
static void keyDropouts(pb::Program &program, uint64_t seed, int replica) {
  if (llvm::none_of(program.kernels(),
                    [](const pb::Kernel &k) { return k.op() == "DropoutTraining"; }))
    return;
  uint32_t step = exporter::kAbsentValue;
  for (const pb::Value &v : program.values())
    if (v.name() == "step" && v.role() == pb::ROLE_INPUT && v.dtype() == pb::DTYPE_I64)
      step = v.id();
  if (step == exporter::kAbsentValue) {
    step = program.values_size();
    pb::Value *v = program.add_values();
    v->set_id(step);
    v->set_name("step");
    v->set_dtype(pb::DTYPE_I64);
    v->set_role(pb::ROLE_INPUT);
  }
  for (pb::Kernel &k : *program.mutable_kernels()) {
    if (k.op() != "DropoutTraining")
      continue;
    (*k.mutable_attrs())["seed"].set_i(static_cast<int64_t>(seed));
    (*k.mutable_attrs())["replica"].set_i(std::max(0, replica));
    if (k.inputs_size() == 1 && step != exporter::kAbsentValue)
      k.add_inputs(step);
  }
}

/// Deterministic 64-bit seed of a parameter: the job seed mixed with its name.
static uint64_t parameterSeed(uint64_t seed, StringRef name) {
  return static_cast<uint64_t>(llvm::hash_combine(seed, name));
}

LogicalResult strait::exportParameters(ModuleOp module, const pb::Program &program,
                                       uint64_t seed, pb::ParameterShardFile &shard) {
  shard.set_format_version(pb::FORMAT_VERSION_1);
  shard.set_rank(program.rank());
  SymbolTable symbols(module);
  llvm::StringSet<> done;
  for (const pb::Value &v : program.values()) {
    if (v.role() != pb::ROLE_PARAMETER || !done.insert(v.parameter_name()).second)
      continue;
    auto var = symbols.lookup<graph::VariableOp>(v.parameter_name());
    if (!var)
      return module.emitError("no graph.Variable named '") << v.parameter_name() << "'";
    pb::ParameterEntry *e = shard.add_parameters();
    e->set_name(v.parameter_name());
    if (std::optional<ElementsAttr> value = var.getValue()) {
      if (failed(fillTensorData(*value, *e->mutable_data())))
        return var.emitError("initial value cannot be exported");
      continue;
    }
    // Shape-only model: the scheme of python/strait/weights.py.
    StringRef name = var.getSymName();
    auto type = cast<RankedTensorType>(var.getType());
    if (name.contains("bias") || name.contains("running_mean")) {
      e->set_init(pb::ParameterEntry::INIT_ZEROS);
    } else if (type.getRank() <= 1) {
      e->set_init(pb::ParameterEntry::INIT_ONES);
    } else {
      e->set_init(pb::ParameterEntry::INIT_NORMAL);
      e->set_init_scale(0.02f);
    }
    e->set_seed(parameterSeed(seed, name));
  }
  return success();
}

bool strait::applyOuterSync(pb::Program &program, const OuterSyncOptions &options,
                            uint32_t channel) {
  if (options.localSteps <= 1)
    return false;
  pb::OuterSync *sync = nullptr;
  for (pb::Step &step : *program.mutable_steps()) {
    if (!step.has_all_reduce() || step.all_reduce().islands_size() < 2)
      continue;
    pb::AllReduce &a = *step.mutable_all_reduce();
    const pb::RankGroup *own = nullptr;
    for (const pb::RankGroup &island : a.islands())
      if (llvm::is_contained(island.ranks(), program.rank()))
        own = &island;
    if (!own)
      continue;
    if (!sync) {
      sync = program.mutable_outer_sync();
      sync->set_local_steps(static_cast<uint32_t>(options.localSteps));
      sync->set_lr(static_cast<float>(options.lr));
      sync->set_momentum(static_cast<float>(options.momentum));
      *sync->mutable_ranks() = a.ranks();
      *sync->mutable_islands() = a.islands();
      if (a.has_codec())
        *sync->mutable_codec() = a.codec();
      sync->set_channel(channel);
    }
    // Every iteration: the mean over this rank's island only.
    google::protobuf::RepeatedField<int32_t> island = own->ranks();
    *a.mutable_ranks() = island;
    a.clear_islands();
    a.clear_codec();
  }
  return sync != nullptr;
}

/// Serializes `message` to `path` + ".tmp"; the caller renames on success.
/// Deterministically: map fields (kernel attributes) in key order, so one
/// compile's files equal another's byte for byte.
template <typename Message>
static LogicalResult writeTemp(const Message &message, const std::string &path,
                               SmallVectorImpl<std::string> &temps, Location loc) {
  std::string tmp = path + ".tmp";
  temps.push_back(tmp);
  if (!program::writeDeterministic(message, tmp))
    return emitError(loc) << "cannot write '" << tmp << "'";
  return success();
}

LogicalResult strait::writeJob(ModuleOp module, ArrayRef<RankExport> ranks,
                               StringRef outDir, const JobExportOptions &options) {
  Location loc = module.getLoc();
  if (std::error_code ec = llvm::sys::fs::create_directories(outDir))
    return emitError(loc) << "cannot create '" << outDir << "': " << ec.message();
  SmallVector<std::string> temps;
  auto cleanup = [&] {
    for (const std::string &t : temps)
      llvm::sys::fs::remove(t);
    return failure();
  };
  pb::PlanManifest manifest;
  manifest.set_format_version(pb::FORMAT_VERSION_1);
  manifest.set_world_size(ranks.size());
  manifest.set_rendezvous(pb::RENDEZVOUS_FILE);
  manifest.set_rendezvous_address(options.rendezvousAddress.empty()
                                      ? "rendezvous"
                                      : options.rendezvousAddress);
  manifest.set_model(options.modelName);
  manifest.set_micro_batches(options.microBatches);
  std::vector<pb::Program> programs(ranks.size());
  uint32_t freeChannel = 0; // above every channel of the job: the outer sync's
  for (auto [r, program] : llvm::zip(ranks, programs)) {
    if (failed(exportProgram(r.function, r, ranks.size(), options.stageRanks, program,
                             options.microBatches, options.parameterCopies, options.order)))
      return cleanup();
    for (const pb::Step &step : program.steps()) {
      uint32_t channel = step.has_send()         ? step.send().channel()
                         : step.has_recv()       ? step.recv().channel()
                         : step.has_all_reduce() ? step.all_reduce().channel()
                                                 : 0;
      freeChannel = std::max(freeChannel, channel + 1);
    }
  }
  for (auto [r, program] : llvm::zip(ranks, programs)) {
    applyOuterSync(program, options.outerSync, freeChannel);
    keyDropouts(program, options.seed, r.replica);
    pb::ParameterShardFile shard;
    if (failed(exportParameters(module, program, options.seed, shard)))
      return cleanup();
    std::string programFile = "rank" + std::to_string(r.rank) + ".program.pb";
    std::string paramFile = "rank" + std::to_string(r.rank) + ".params.pb";
    SmallString<256> dir(outDir);
    if (failed(writeTemp(program, (dir + "/" + programFile).str(), temps, loc)) ||
        failed(writeTemp(shard, (dir + "/" + paramFile).str(), temps, loc)))
      return cleanup();
    pb::RankEntry *e = manifest.add_ranks();
    e->set_rank(r.rank);
    e->set_device(r.device);
    e->set_host(r.host);
    e->set_address(r.address);
    e->set_program_file(programFile);
    e->set_parameter_file(paramFile);
    e->set_stage(r.stage);
    e->set_replica(r.replica);
  }
  if (!options.planJSON.empty()) {
    std::string tmp = (outDir + "/plan.json.tmp").str();
    std::ofstream out(tmp, std::ios::trunc);
    temps.push_back(tmp);
    if (!(out << options.planJSON << "\n"))
      return emitError(loc) << "cannot write '" << tmp << "'", cleanup();
  }
  std::string loraPath = (outDir + "/lora.json").str();
  if (!options.loraJSON.empty()) {
    std::string tmp = loraPath + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    temps.push_back(tmp);
    if (!(out << options.loraJSON << "\n"))
      return emitError(loc) << "cannot write '" << tmp << "'", cleanup();
  } else if (std::error_code ec = llvm::sys::fs::remove(loraPath)) {
    return emitError(loc) << "cannot remove the old '" << loraPath << "': " << ec.message(),
           cleanup();
  }
  if (failed(writeTemp(manifest, (outDir + "/plan.pb").str(), temps, loc)))
    return cleanup();
  // All files are complete: move them into place, the manifest last. A
  // manifest of an earlier compile into this folder goes first, so that a
  // run that fails or is killed among the renames leaves no plan.pb naming
  // a mix of old and new rank files.
  SmallString<256> manifestPath(outDir);
  llvm::sys::path::append(manifestPath, "plan.pb");
  if (std::error_code ec = llvm::sys::fs::remove(manifestPath))
    return emitError(loc) << "cannot remove the old '" << manifestPath << "': " << ec.message(),
           cleanup();
  for (const std::string &t : temps) {
    std::string final = t.substr(0, t.size() - 4);
    if (std::error_code ec = llvm::sys::fs::rename(t, final))
      return emitError(loc) << "cannot rename '" << t << "': " << ec.message(), cleanup();
  }
  return success();
}
