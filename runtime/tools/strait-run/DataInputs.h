//===- DataInputs.h - What feeds each input of a rank's program -*- C++ -*-===//
//
// Every ROLE_INPUT of a rank's program gets one of (docs/runtime.md, "Data
// inputs"):
//  - the data input and the labels from --data (DataLoader). The data input
//    is chosen once per replica, on its first stage (chooseDataInput), so a
//    later stage never takes another integer input (an attention mask) for
//    the token ids;
//  - --input NAME=FILE.npy: an array of the npy --data array's N samples,
//    row-aligned with it: each iteration feeds the rows the data input gets
//    (the same seeded rows, the replica's part of them, stacked by micro-
//    batch), on every rank whose program reads NAME (each pipeline stage
//    that reads an attention mask has it as its own input); --eval-input
//    the same for --eval-data's rows;
//  - --input-fill NAME=VALUE: VALUE in every element, once;
//  - a default: an input named like a mask ("mask" in its name) gets ones
//    (HF's "attend everywhere", what a tokenizer gives for unpadded
//    sequences) with token files or no --data, and is an error with npy
//    data (its samples may be padded); an integer "position_ids" gets
//    0..T-1 along its last axis (HF's default); anything else zeros, with a
//    warning naming it. "step", "lr" and loss scaling's inputs are the
//    worker's.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUN_DATAINPUTS_H
#define STRAIT_RUN_DATAINPUTS_H

#include "DataLoader.h"
#include "StraitRun.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace run {

/// The data input of a replica: its name ("" when no program of the replica
/// has one) and its shape in the program that reads it.
struct DataInputChoice {
  std::string name;
  rt::Shape shape;
};

/// --input-name, else the first pick of pickDataInput among the replica's
/// programs in stage order (a later stage's own pick could be a mask).
/// `p` is this rank's program (`entry`); the others are loaded as needed.
rt::StatusOr<DataInputChoice> chooseDataInput(const program::Program &p,
                                              const program::PlanManifest &m,
                                              const program::RankEntry &entry,
                                              const RunOptions &o, bool tokens);

/// The --input / --eval-input arrays, --input-fill values and defaults of
/// one rank.
class InputFeeds {
public:
  ~InputFeeds();
  /// Checks every flag and default before the rendezvous: errors name the
  /// flag, the input, the file, and the expected and actual dtype or shape.
  /// `train`/`eval` are the --data / --eval-data loaders (null: none).
  static rt::StatusOr<std::unique_ptr<InputFeeds>>
  open(const program::Program &p, const program::PlanManifest &m,
       const program::RankEntry &entry, const RunOptions &o, const DataInputChoice &data,
       const rt::data::DataLoader *train, const rt::data::DataLoader *eval, bool tokens);
  /// Binds the inputs to the executor's tensors and writes the fills and
  /// defaults (once; nothing overwrites an input). Prints a note per input.
  rt::Status bind(rt::Executor &exec);
  /// Writes iteration `iteration`'s rows of the --input arrays (`eval`: the
  /// --eval-input arrays) that this rank reads, the rows `loader` feeds.
  rt::Status fill(const rt::data::DataLoader &loader, int64_t iteration, bool eval);
  /// The inputs this rank's --input arrays, fills and defaults write (for
  /// --dump-outputs).
  std::vector<std::string> fedNames() const;

private:
  struct Array;
  struct Fill;
  InputFeeds() = default;
  int rank = 0;
  std::vector<std::unique_ptr<Array>> arrays;
  std::vector<Fill> fills;
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUN_DATAINPUTS_H
