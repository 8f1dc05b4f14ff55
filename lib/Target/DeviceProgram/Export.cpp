//===- Export.cpp - Graph IR to per-device runtime programs ---------------===//

#include "strait/Target/DeviceProgram/Export.h"

#include "KernelLowering.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>

using namespace mlir;
using namespace strait;
using namespace strait::exporter;
namespace pb = strait::program;

LogicalResult strait::exportProgram(func::FuncOp func, int rank, int worldSize,
                                    StringRef device, pb::Program &program) {
  program.set_format_version(pb::FORMAT_VERSION_1);
  program.set_rank(rank);
  program.set_world_size(worldSize);
  program.set_device(device.str());
  program.set_micro_batches(1);
  program.set_producer("straitc 0.1");
  ValueTable values(program);

  for (BlockArgument arg : func.getArguments()) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "graph.name");
    values.get(arg, pb::ROLE_INPUT, name ? name.getValue() : "");
  }
  pb::Step *step = program.add_steps();
  step->set_id(0);
  step->set_label("forward");
  step->set_micro_batch(-1);
  pb::RunKernels *run = step->mutable_run();

  for (Operation &op : func.getBody().front()) {
    if (auto read = dyn_cast<graph::ReadVariableOp>(op)) {
      uint32_t id = values.get(read.getResult(), pb::ROLE_PARAMETER,
                               read.getVariable());
      values.at(id).set_parameter_name(read.getVariable().str());
      continue;
    }
    if (auto c = dyn_cast<graph::ConstantOp>(op)) {
      std::string name;
      if (auto loc = dyn_cast<NameLoc>(c.getLoc()))
        name = loc.getName().str();
      uint32_t id = values.get(c.getResult(), pb::ROLE_CONSTANT, name);
      if (failed(fillTensorData(c.getValue(), *values.at(id).mutable_constant())))
        return c.emitError("constant cannot be exported");
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        std::optional<uint32_t> id = values.lookup(v);
        if (!id)
          return ret.emitError("returned value is not produced in the function");
        pb::Value &pv = values.at(*id);
        if (pv.role() != pb::ROLE_ACTIVATION)
          return ret.emitError("output ") << i << " is an input, weight or constant; "
                                                  "only computed values can be outputs";
        pv.set_role(pb::ROLE_OUTPUT);
        if (auto name = func.getResultAttrOfType<StringAttr>(i, "graph.name"))
          pv.set_name(name.str());
      }
      continue;
    }
    if (!isa<graph::GraphDialect>(op.getDialect()))
      return op.emitError("op of dialect '")
             << op.getDialect()->getNamespace() << "' cannot be exported to a program";
    pb::Kernel *k = program.add_kernels();
    k->set_id(program.kernels_size() - 1);
    if (failed(lowerToKernel(&op, values, *k)))
      return failure();
    run->add_kernel_ids(k->id());
  }
  return success();
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

/// Serializes `message` to `path` + ".tmp"; the caller renames on success.
template <typename Message>
static LogicalResult writeTemp(const Message &message, const std::string &path,
                               SmallVectorImpl<std::string> &temps, Location loc) {
  std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  temps.push_back(tmp);
  if (!out || !message.SerializeToOstream(&out))
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
  for (const RankExport &r : ranks) {
    pb::Program program;
    pb::ParameterShardFile shard;
    if (failed(exportProgram(r.function, r.rank, ranks.size(), r.device, program)) ||
        failed(exportParameters(module, program, options.seed, shard)))
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
  if (failed(writeTemp(manifest, (outDir + "/plan.pb").str(), temps, loc)))
    return cleanup();
  // All files are complete: move them into place, the manifest last.
  for (const std::string &t : temps) {
    std::string final = t.substr(0, t.size() - 4);
    if (std::error_code ec = llvm::sys::fs::rename(t, final))
      return emitError(loc) << "cannot rename '" << t << "': " << ec.message(), cleanup();
  }
  return success();
}
