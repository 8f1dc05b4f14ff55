//===- Options.h - straitc's command-line flags -----------------*- C++ -*-===//
//
// The flags of straitc (tools/straitc/straitc.cpp), defined in Options.cpp;
// straitc.cpp keeps the driver's logic (STYLE.md: files under 1000 lines).
//
//===----------------------------------------------------------------------===//

#ifndef STRAITC_OPTIONS_H
#define STRAITC_OPTIONS_H

#include "strait/Analysis/Partitioner.h"
#include "strait/Pipelines/Pipelines.h"

#include "llvm/Support/CommandLine.h"

#include <string>

namespace straitc::flags {
namespace cl = llvm::cl;

enum class Emit { Summary, MLIR, Program, Plan, Kernels };
enum class Warmup { Plan, Classic };
enum class Remat { Auto, On, Off };

extern cl::OptionCategory straitCat;
extern cl::opt<std::string> inputFile;
extern cl::opt<std::string> outputFile;
extern cl::list<std::string> inputShapes;
extern cl::opt<bool> shapeOnly;
extern cl::opt<Emit> emit;
extern cl::opt<std::string> clusterFile;
extern cl::opt<std::string> planJson;
extern cl::opt<std::string> evaluatePlan;
extern cl::opt<std::string> tracePlan;
extern cl::opt<strait::PlannerStrategy> strategy;
extern cl::opt<double> globalBatch;
extern cl::opt<std::string> loss;
extern cl::opt<std::string> precision;
extern cl::opt<std::string> optimizer;
extern const strait::graph::GraphBuildTrainingStepOptions &kTrain;
extern cl::OptionCategory trainCat;
extern cl::opt<std::string> lossOutput;
extern cl::opt<std::string> label;
extern cl::opt<int64_t> ignoreIndex;
extern cl::opt<bool> returnGradients;
extern cl::opt<std::string> stepOutputs;
extern cl::opt<int64_t> padClasses;
extern cl::opt<int64_t> padClassesMinWork;
extern cl::opt<double> lr;
extern cl::opt<double> momentum;
extern cl::opt<bool> nesterov;
extern cl::opt<double> beta1;
extern cl::opt<double> beta2;
extern cl::opt<double> eps;
extern cl::opt<double> weightDecay;
extern cl::opt<double> clipNorm;
extern cl::opt<std::string> lossScale;
extern cl::opt<double> lossScaleInit, lossScaleGrowth, lossScaleBackoff;
extern cl::opt<int64_t> lossScaleInterval;
extern cl::opt<int64_t> warmupSteps;
extern cl::opt<int64_t> totalSteps;
extern cl::opt<double> minLr;
extern cl::list<std::string> trainable;
extern cl::list<std::string> frozen;
extern cl::opt<int64_t> lora;
extern cl::opt<double> loraAlpha;
extern cl::opt<double> loraDropout;
extern cl::list<std::string> loraTargets;
extern cl::opt<int64_t> microBatches;
extern cl::opt<std::string> schedule;
extern cl::opt<Warmup> pipelineWarmup;
extern cl::opt<int64_t> numStages;
extern cl::opt<uint64_t> seed;
extern cl::opt<std::string> compress;
extern cl::opt<double> allReduceBucketMib;
extern cl::opt<int64_t> localSteps;
extern cl::opt<double> outerLr;
extern cl::opt<double> outerMomentum;
extern cl::opt<int64_t> compressedAdam;
extern cl::opt<std::string> compressedAdamWarmup;
extern cl::opt<std::string> adaptiveTopk;
extern cl::list<std::string> compressLink;
extern cl::opt<strait::FuseMode> fuse;
extern cl::opt<bool> fuseRmsNorm;
extern cl::opt<bool> fuseAttention;
extern cl::opt<bool> fuseRotary;
extern cl::opt<std::string> moeExperts;
extern cl::opt<bool> foldTransposes;
extern cl::opt<bool> fuseLossGrad;
extern cl::opt<bool> parameterCopies;
extern cl::opt<bool> castMotion;
extern cl::opt<Remat> rematerialize;
extern cl::opt<std::string> recompute;
extern cl::opt<bool> printWeights;

} // namespace straitc::flags

#endif // STRAITC_OPTIONS_H
