//===- AqSgdRun.cpp - strait-run's AQ-SGD state: setup and checkpoints ----===//
#include "AqSgdRun.h"

#include "Npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace strait {
namespace run {

using namespace rt;

StatusOr<std::unique_ptr<AqSgdState>>
createAqSgd(Executor &exec, const DeviceSpec &device, rt::data::DataLoader *loader,
            const Shape &dataShape, int rank) {
  if (device.kind != "cpu")
    return unimplemented("AQ-SGD (--compress aqsgd) runs on the host only; this rank runs on " +
                         device.str() + " (run the cut's ranks with --device cpu)")
        .withRank(rank);
  if (!loader)
    return invalidArgument("the program sends pipeline activations with an AQ-SGD codec, "
                           "which keeps state per dataset sample: give --data")
        .withRank(rank);
  if (dataShape.empty() || loader->sampleSpace(dataShape) == 0)
    return invalidArgument("the program sends or receives pipeline activations with an AQ-SGD "
                           "codec, which needs the dataset samples of each micro-batch, but "
                           "no rank of this replica reads a data input from --data that has them")
        .withRank(rank);
  auto state = std::make_unique<AqSgdState>(loader->sampleSpace(dataShape), kAqSgdMaxBytes);
  exec.setActivationDeltas(state.get());
  return state;
}

namespace {

std::string rankDirOf(const std::string &stepDir, int rank) {
  return stepDir + "/rank" + std::to_string(rank) + "/aqsgd";
}

void makeDirsOf(const std::string &path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
}

Status writeArray(const std::string &path, DType dtype, Shape shape, const void *data) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = const_cast<void *>(data);
  STRAIT_RETURN_IF_ERROR(data::writeNpy(path + ".tmp", t));
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
    return ioError("cannot write '" + path + "': " + std::strerror(errno));
  return Status::ok();
}

} // namespace

Status saveAqSgd(const AqSgdState &state, const std::string &root, int64_t step, int rank) {
  std::string stepDir = root + "/step-" + std::to_string(step);
  std::remove((stepDir + "/checkpoint.json").c_str()); // absent: nothing to do
  std::string dir = rankDirOf(stepDir, rank);
  makeDirsOf(dir);
  std::string index = "samples\t" + std::to_string(state.getNumSamples()) + "\n";
  for (const auto &[key, s] : state.getStreams()) {
    auto samples = static_cast<int64_t>(state.getNumSamples());
    STRAIT_RETURN_IF_ERROR(writeArray(dir + "/" + key.name() + ".m.npy", program::DTYPE_U16,
                                      {samples, static_cast<int64_t>(s.rowElements)},
                                      s.m.data()));
    STRAIT_RETURN_IF_ERROR(
        writeArray(dir + "/" + key.name() + ".seen.npy", program::DTYPE_U8, {samples},
                   s.seen.data()));
    index += key.name() + "\t" + std::to_string(s.rowElements) + "\n";
  }
  std::string path = dir + "/index.tsv";
  std::ofstream out(path + ".tmp");
  out << index;
  out.close();
  if (!out || std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
    return ioError("cannot write '" + path + "': " + std::strerror(errno));
  return Status::ok();
}

StatusOr<std::string> loadAqSgd(AqSgdState &state, const CheckpointRef &c, int rank) {
  std::string dir = rankDirOf(c.dir, rank);
  std::ifstream in(dir + "/index.tsv");
  if (!in)
    return std::string("AQ-SGD state starts empty (the checkpoint has none for this rank)");
  std::string line;
  std::getline(in, line);
  if (line != "samples\t" + std::to_string(state.getNumSamples()))
    return invalidArgument("checkpoint file '" + dir + "/index.tsv' is for a dataset of '" +
                           line + "', this run's --data has " +
                           std::to_string(state.getNumSamples()) + " samples")
        .withRank(rank);
  size_t restored = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    uint64_t row = 0;
    DeltaStreamKey key;
    int peer = -1, used = 0;
    unsigned channel = 0;
    bool parsed = (fields >> name >> row) && name.size() > 4 &&
                  std::sscanf(name.c_str() + 4, "-p%d-c%u%n", &peer, &channel, &used) == 2;
    key.send = name.rfind("send", 0) == 0;
    key.peer = peer;
    key.channel = channel;
    if (!parsed || key.name() != name)
      return invalidArgument("checkpoint file '" + dir + "/index.tsv': malformed line '" + line +
                             "'");
    STRAIT_ASSIGN_OR_RETURN(data::NpyArray m, data::readNpy(dir + "/" + name + ".m.npy"));
    STRAIT_ASSIGN_OR_RETURN(data::NpyArray seen, data::readNpy(dir + "/" + name + ".seen.npy"));
    AqSgdState::Stream s;
    s.rowElements = row;
    if (m.dtype != program::DTYPE_U16 || seen.dtype != program::DTYPE_U8 ||
        m.bytes.size() != 2 * state.getNumSamples() * row ||
        seen.bytes.size() != state.getNumSamples())
      return invalidArgument("checkpoint folder '" + dir + "': stream '" + name +
                             "' does not hold u16[" + std::to_string(state.getNumSamples()) +
                             ", " + std::to_string(row) + "] and u8[" +
                             std::to_string(state.getNumSamples()) + "]")
          .withRank(rank);
    s.m.resize(m.bytes.size() / 2);
    std::memcpy(s.m.data(), m.bytes.data(), m.bytes.size());
    s.seen.assign(seen.bytes.begin(), seen.bytes.end());
    STRAIT_RETURN_IF_ERROR(state.setStream(key, std::move(s)));
    ++restored;
  }
  return "restored the AQ-SGD state of " + std::to_string(restored) + " cut stream" +
         (restored == 1 ? "" : "s");
}

} // namespace run
} // namespace strait
