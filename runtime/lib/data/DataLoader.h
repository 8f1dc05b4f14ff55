//===- DataLoader.h - Batches for a program's data inputs -------*- C++ -*-===//
//
// Sources of training batches, written into a program's ROLE_INPUT buffers
// once per iteration:
//  - token files (flat uint16 / uint32 token ids, as nanoGPT's prepare.py
//    writes them): B windows of T+1 tokens at seeded random offsets; the
//    first T tokens feed the [B, T] integer input, the last T the [B, T]
//    labels (next-token targets);
//  - npy arrays: samples [N, ...] (e.g. float32 N x C x H x W) and optional
//    labels [N] (int64): B seeded random rows per iteration.
// Offsets depend on (seed, stream, iteration) only: ranks of one data-
// parallel replica (the stages of one pipeline) pass the same stream and see
// the same batch, replicas pass different streams.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_DATA_DATALOADER_H
#define STRAIT_RUNTIME_DATA_DATALOADER_H

#include "Npy.h"
#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace data {

enum class DataFormat { TokensU16, TokensU32, Npy };

/// Parses "tokens-u16", "tokens-u32", "npy"; infers from the file name when
/// `text` is empty (".npy" -> Npy, otherwise TokensU16).
StatusOr<DataFormat> parseDataFormat(const std::string &text, const std::string &file);

class DataLoader {
public:
  virtual ~DataLoader() = default;
  /// Fills `input` (may be null when this rank has no data input) and
  /// `labels` (may be null) for iteration `iteration` (0-based). Errors
  /// name the input, the file, and the expected and actual shapes.
  virtual Status fill(const Tensor *input, const std::string &inputName,
                      const Tensor *labels, const std::string &labelsName,
                      int64_t iteration) = 0;
  /// Items one batch holds for throughput: tokens (B*T) or samples (B).
  virtual const char *itemName() const = 0;
  /// Makes this loader feed part `part` of a larger batch: with a local batch
  /// of B it feeds windows [part*B, (part+1)*B) of the iteration's sequence,
  /// so replica r of R (all on one stream) together feed exactly the R*B
  /// windows that one rank with batch R*B reads (default part 0).
  void setBatchPart(int64_t part) { batchPart = part; }
  /// The dataset samples fill() writes at iteration `iteration` into a data
  /// input of shape `shape`, in batch order: token windows' start offsets
  /// ([B, T]) or npy row indices ([B, ...]). A rank that feeds no input
  /// (a pipeline's last stage) asks with its replica's input shape: AQ-SGD
  /// keeps state per sample at both ends of a cut (AqSgd.h).
  virtual std::vector<uint64_t> sampleIds(int64_t iteration, const Shape &shape) const = 0;
  /// How many distinct samples there are for `shape`: token windows (one
  /// per start offset for its T) or npy rows.
  virtual uint64_t sampleSpace(const Shape &shape) const = 0;

protected:
  int64_t batchPart = 0;
};

/// Opens a token file (memory-mapped).
StatusOr<std::unique_ptr<DataLoader>>
openTokenFile(const std::string &path, DataFormat format, uint64_t seed, uint64_t stream);
/// Reads an npy sample array and optional npy labels (empty path: none).
StatusOr<std::unique_ptr<DataLoader>>
openNpyArrays(const std::string &samples, const std::string &labels, uint64_t seed,
              uint64_t stream);

/// The start offsets of iteration `iteration`'s `count` windows in [0, limit]:
/// offset i is splitmix64(base + i) % (limit + 1) with base =
/// splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ iteration), a contract
/// the tests recompute (python/tests/test_data_inputs.py).
std::vector<uint64_t> sampleOffsets(uint64_t seed, uint64_t stream, int64_t iteration,
                                    int64_t count, uint64_t limit);

} // namespace data
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_DATA_DATALOADER_H
