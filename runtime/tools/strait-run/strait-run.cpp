//===- strait-run.cpp - Launch a compiled Strait job ----------------------===//
//
// Flag parsing only; see StraitRun.h for the two modes.
//
//===----------------------------------------------------------------------===//
#include "Devices.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/LinkSecret.h"
#include "strait/runtime/Trace.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace {

const char *kUsage =
    "usage: strait-run DIR [--rank R] [--steps N] [--threads T]\n"
    "                  [--timeout-ms MS] [--log-dir DIR] [--manifest plan.pb]\n"
    "                  [--link-secret FILE] [--topk-adapt on|off]\n"
    "                  [--run-id ID] [--lr LR] [--data FILE]\n"
    "                  [--data-format tokens-u16|tokens-u32|npy] [--labels FILE.npy]\n"
    "                  [--input-name NAME] [--labels-name NAME] [--seed N]\n"
    "                  [--input NAME=FILE.npy]... [--input-fill NAME=VALUE]...\n"
    "                  [--eval-data FILE [--eval-labels FILE.npy] [--eval-every K]\n"
    "                   [--eval-batches N] [--eval-input NAME=FILE.npy]...]\n"
    "                  [--dump-outputs DIR] [--save-params DIR] [--quiet]\n"
    "                  [--host NAME] [--rendezvous redis://[:PASSWORD@]HOST[:PORT]|DIR]\n"
    "                  [--listen-address IP]\n"
    "                  [--device auto|cpu|cuda|cuda:N]\n"
    "                  [--comm auto|gloo] [--matmul-precision f32|tf32|bf16]\n"
    "                  [--checkpoint DIR] [--checkpoint-every K] [--resume DIR]\n"
    "                  [--max-restarts N] [--link-retries R] [--link-retry-wait MS]\n"
    "                  [--profile] [--no-final-outer-step]\n"
    "                  [--replan auto|off] [--replan-factor X] [--replan-after K]\n"
    "                  [--replan-window N] [--replan-max N] [--straitc PATH]\n"
    "                  [--on-host-loss fail|replan] [--min-hosts N]\n"
    "                  [--on-host-join refuse|replan] [--join]\n"
    "                  [--trace FILE.json [--trace-steps A:B]]\n"
    "       strait-run --merge-traces OUT.json RANK.json...\n"
    "  Without --rank (and without RANK/WORLD_SIZE in the environment): start\n"
    "  every rank of DIR/plan.pb on this machine, one process each, logs in\n"
    "  DIR/logs/rank<R>.log. With --rank R or RANK=R: run rank R only (join a\n"
    "  job across machines; all ranks need the same --run-id).\n"
    "  --host NAME: start only the ranks the plan puts on host NAME (the\n"
    "  cluster file's name): one launcher per machine, all with the same\n"
    "  --run-id and a --rendezvous every machine reaches.\n"
    "  --rendezvous URL (or $STRAIT_RENDEZVOUS): where the ranks meet,\n"
    "  instead of the job's file store (DIR/rendezvous): redis://HOST[:PORT]\n"
    "  (a redis-server every machine reaches; port 6379 by default), or a\n"
    "  folder on a file system every rank shares. With a Redis store and no\n"
    "  --listen-address, a rank listens on the interface that reaches it.\n"
    "  A Redis store with a password (requirepass): $STRAIT_REDIS_PASSWORD\n"
    "  (and $STRAIT_REDIS_USER for an ACL user), or redis://:PASSWORD@HOST\n"
    "  (visible in ps until the launcher hides it: a warning).\n"
    "  --max-restarts N with --host: a rank that fails on any machine\n"
    "  restarts every machine's ranks from the newest checkpoint all of them\n"
    "  find complete (--checkpoint on a shared file system), agreed through\n"
    "  the store; a machine that stops answering fails the others after\n"
    "  --timeout-ms. --replan auto with --host (DIR on a shared file system):\n"
    "  the launcher of rank 0's host re-plans, the others follow it.\n"
    "  --link-secret FILE (or $STRAIT_LINK_SECRET_FILE): every rank holds the\n"
    "  same secret and every byte between ranks over Gloo is encrypted and\n"
    "  authenticated; a rank with another secret fails. The file holds 64 hex\n"
    "  characters and must not be readable by group or others;\n"
    "  `strait-run --make-link-secret FILE` writes a new one (mode 0600).\n"
    "  --topk-adapt off: top-k transfers that straitc --adaptive-topk made\n"
    "  adaptive keep their compiled ratio (default on: the sender follows the\n"
    "  link; each rank prints its ratios as \"rank R topk PEER/chC:RATIO:...\").\n"
    "  Program inputs named \"step\" (i64) and \"lr\" (f32) receive the 1-based\n"
    "  iteration and the program's lr schedule at that step (--lr replaces its\n"
    "  peak; without a schedule --lr, default 0.001, stays constant).\n"
    "  --data: a token file (flat uint16/uint32 ids, nanoGPT's format) feeds\n"
    "  B x T windows to the integer input (--input-name, default input_ids)\n"
    "  and next-token targets to \"labels\"; an .npy sample array feeds B\n"
    "  seeded rows to the first float (else integer) input, --labels FILE.npy the\n"
    "  labels. --input NAME=FILE.npy feeds input NAME (an attention_mask,\n"
    "  token_type_ids, ...) of every rank that reads it the same rows of FILE\n"
    "  (N rows, one per sample of the npy --data), --eval-input NAME=FILE.npy\n"
    "  those of --eval-data; --input-fill NAME=VALUE writes VALUE everywhere.\n"
    "  Unfed, an input named like a mask gets ones with a token file (an\n"
    "  error with npy data), an integer position_ids 0..T-1, others zeros.\n"
    "  --dump-outputs DIR writes the last iteration's outputs as\n"
    "  DIR/<name>.rank<R>.npy; --save-params DIR each rank's parameters after\n"
    "  the last iteration as DIR/<parameter>.rank<R>.npy.\n"
    "  --eval-data FILE (with --eval-labels for npy): every --eval-every K\n"
    "  steps (0, the default: after the last only) the mean loss over the\n"
    "  same --eval-batches N batches (default 8) of FILE, from the forward\n"
    "  steps alone (parameters and optimizer states untouched).\n"
    "  The launcher prints one line per step (loss,\n"
    "  tokens or samples/s, bytes per link); --quiet turns it off.\n"
    "  --device: each rank runs the device straitc planned (cpu, or cuda:N\n"
    "  for a GPU of the cluster file); cpu runs a GPU job on the CPU. On\n"
    "  GPUs the ranks of one host talk over NCCL and hosts over Gloo\n"
    "  (--comm gloo: Gloo everywhere); --matmul-precision sets the GEMMs'\n"
    "  tensor-core mode (bf16 default: f32 storage and master weights).\n"
    "  --checkpoint DIR writes the parameters and optimizer states after the\n"
    "  last step (and every K-th with --checkpoint-every K) as DIR/step-N;\n"
    "  --resume DIR continues from DIR (a step-N folder, or the newest\n"
    "  complete one in DIR) up to step --steps, under this plan or another\n"
    "  one of the same model; --max-restarts N restarts every rank from the\n"
    "  newest checkpoint when a rank fails, up to N times. A broken link\n"
    "  (reset, EOF, timeout) does not end the job: every rank rebuilds its\n"
    "  connections and replays the step from an in-memory snapshot, up to\n"
    "  --link-retries R times in a row (default 3; 0: off), waiting\n"
    "  --link-retry-wait MS (default 1000) before the second and later.\n"
    "  --profile times\n"
    "  each op type's kernels from the second iteration on and prints a\n"
    "  table per rank at the end.\n"
    "  --replan auto (launcher; default off): time each inter-host link's\n"
    "  transfers, and when one delivers less than 1/X or more than X times\n"
    "  (--replan-factor, default 4) the bandwidth the plan assumed for K\n"
    "  windows (--replan-after, default 2) of N steps (--replan-window, 5),\n"
    "  re-run the job's straitc command (--straitc PATH) with the measured\n"
    "  links into DIR/replan-K and, when its plan is predicted faster,\n"
    "  checkpoint and resume every rank under it (--replan-max, default 3).\n"
    "  --on-host-loss replan (launcher; default fail): when the ranks of a\n"
    "  host fail after its --max-restarts restarts, or (--host) its launcher\n"
    "  is silent past --timeout-ms or stopped, re-run the job's straitc\n"
    "  command without that host's devices into DIR/host-loss-K and resume\n"
    "  every remaining rank from the newest checkpoint under the new plan;\n"
    "  below --min-hosts N hosts (default 1) the job fails instead.\n"
    "  --on-host-join replan (with --host; default refuse): a host the running\n"
    "  plan leaves out (lost earlier, or excluded in the cluster file) whose\n"
    "  launcher starts with --join (same DIR, --run-id, --rendezvous and\n"
    "  --checkpoint) is taken in: the launcher of rank 0's host re-runs the\n"
    "  job's straitc command with it into DIR/host-join-K, and every rank,\n"
    "  the joiner's included, resumes under the new plan from a checkpoint.\n"
    "  Local steps (straitc --local-steps H): the islands average their\n"
    "  parameters every H steps and after the last one; --no-final-outer-step\n"
    "  skips the last one (each island keeps its own parameters).\n"
    "  --trace FILE.json: every rank records what it ran in iterations A to B\n"
    "  of --trace-steps (default 2:4): kernels, sends, receives, all-reduces,\n"
    "  codecs, data loads, checkpoint writes; the launcher merges the ranks'\n"
    "  files (DIR/logs/trace.rank<R>.json) into FILE, a Chrome trace for\n"
    "  ui.perfetto.dev or chrome://tracing. A worker (--rank) writes its own\n"
    "  rank's (\"{rank}\" in FILE becomes the rank); `strait-run\n"
    "  --merge-traces OUT IN...` merges such files.\n"
    "  Exit code: 0 success, 1 a rank failed, 2 bad arguments or plan,\n"
    "  130/143 interrupted; a worker (--rank) exits 1 on its own error and 3\n"
    "  when it lost a peer or timed out waiting for one.\n";

bool parse(int argc, char **argv, strait::run::RunOptions &o) {
  o.executable = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](int &out) {
      if (i + 1 >= argc)
        return false;
      char *end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      out = static_cast<int>(v);
      return end && *end == '\0';
    };
    auto text = [&](std::string &out) {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    bool ok = true;
    if (a == "--rank")
      ok = value(o.rank);
    else if (a == "--steps")
      ok = value(o.steps);
    else if (a == "--threads")
      ok = value(o.threads);
    else if (a == "--timeout-ms")
      ok = value(o.timeoutMs);
    else if (a == "--log-dir")
      ok = text(o.logDir);
    else if (a == "--manifest")
      ok = text(o.manifest);
    else if (a == "--run-id")
      ok = text(o.runId);
    else if (a == "--data")
      ok = text(o.dataPath);
    else if (a == "--data-format")
      ok = text(o.dataFormat);
    else if (a == "--labels")
      ok = text(o.labelsPath);
    else if (a == "--eval-data")
      ok = text(o.evalDataPath);
    else if (a == "--eval-labels")
      ok = text(o.evalLabelsPath);
    else if (a == "--eval-every")
      ok = value(o.evalEvery) && o.evalEvery >= 0;
    else if (a == "--eval-batches")
      ok = value(o.evalBatches) && o.evalBatches > 0;
    else if (a == "--input-name")
      ok = text(o.inputName);
    else if (a == "--input" || a == "--eval-input" || a == "--input-fill") {
      // NAME=FILE.npy (NAME=VALUE): one flag per input.
      std::string v;
      ok = text(v);
      size_t eq = v.find('=');
      ok = ok && eq != std::string::npos && eq > 0 && eq + 1 < v.size();
      if (!ok) {
        std::cerr << "strait-run: " << a << " takes NAME="
                  << (a == "--input-fill" ? "VALUE" : "FILE.npy") << ", got '" << v << "'\n";
        return false;
      }
      auto &list = a == "--input" ? o.inputFiles : a == "--eval-input" ? o.evalInputFiles
                                                                       : o.inputFills;
      std::string name = v.substr(0, eq);
      for (const auto &entry : list)
        if (entry.first == name) {
          std::cerr << "strait-run: two " << a << " flags name input '" << name << "'\n";
          return false;
        }
      list.emplace_back(name, v.substr(eq + 1));
    }
    else if (a == "--labels-name")
      ok = text(o.labelsName);
    else if (a == "--dump-outputs")
      ok = text(o.dumpDir);
    else if (a == "--save-params")
      ok = text(o.saveParamsDir);
    else if (a == "--listen-address")
      ok = text(o.listenAddress);
    else if (a == "--rendezvous")
      ok = text(o.rendezvous);
    else if (a == "--host")
      ok = text(o.host);
    else if (a == "--link-secret")
      ok = text(o.linkSecretFile);
    else if (a == "--topk-adapt") {
      std::string v;
      ok = text(v) && (v == "on" || v == "off");
      if (!ok)
        std::cerr << "strait-run: --topk-adapt takes on or off\n";
      o.topkAdapt = v == "on";
    }
    else if (a == "--device")
      ok = text(o.device);
    else if (a == "--comm")
      ok = text(o.comm);
    else if (a == "--matmul-precision")
      ok = text(o.matmulPrecision);
    else if (a == "--checkpoint")
      ok = text(o.checkpointDir);
    else if (a == "--checkpoint-every")
      ok = value(o.checkpointEvery) && o.checkpointEvery >= 0;
    else if (a == "--resume")
      ok = text(o.resumePath);
    else if (a == "--max-restarts")
      ok = value(o.maxRestarts) && o.maxRestarts >= 0;
    else if (a == "--link-retries")
      ok = value(o.linkRetries) && o.linkRetries >= 0;
    else if (a == "--link-retry-wait")
      ok = value(o.linkRetryWaitMs) && o.linkRetryWaitMs >= 0;
    else if (a == "--profile")
      o.profile = true;
    else if (a == "--no-final-outer-step")
      o.finalOuterStep = false;
    else if (a == "--replan") {
      std::string v;
      ok = text(v) && (v == "auto" || v == "off");
      if (!ok)
        std::cerr << "strait-run: --replan takes auto or off\n";
      o.replan = v == "auto";
    } else if (a == "--replan-factor") {
      std::string v;
      char *end = nullptr;
      ok = text(v);
      o.replanFactor = ok ? std::strtod(v.c_str(), &end) : 0;
      ok = ok && !v.empty() && end && *end == '\0' && o.replanFactor > 1 &&
           o.replanFactor < 1e9;
      if (!ok)
        std::cerr << "strait-run: --replan-factor takes a number above 1 (got '" << v << "')\n";
    } else if (a == "--replan-after" || a == "--replan-window" || a == "--replan-max") {
      int &out = a == "--replan-after" ? o.replanAfter
                 : a == "--replan-window" ? o.replanWindow : o.replanMax;
      ok = value(out) && out >= (a == "--replan-max" ? 0 : 1);
      if (!ok)
        std::cerr << "strait-run: " << a << " takes an integer of at least "
                  << (a == "--replan-max" ? 0 : 1) << "\n";
    } else if (a == "--on-host-loss") {
      std::string v;
      ok = text(v) && (v == "replan" || v == "fail");
      if (!ok)
        std::cerr << "strait-run: --on-host-loss takes replan or fail\n";
      o.onHostLossReplan = v == "replan";
    } else if (a == "--on-host-join") {
      std::string v;
      ok = text(v) && (v == "replan" || v == "refuse");
      if (!ok)
        std::cerr << "strait-run: --on-host-join takes replan or refuse\n";
      o.onHostJoinReplan = v == "replan";
    } else if (a == "--join")
      o.join = true;
    else if (a == "--min-hosts") {
      ok = value(o.minHosts) && o.minHosts >= 1;
      if (!ok)
        std::cerr << "strait-run: --min-hosts takes an integer of at least 1\n";
    } else if (a == "--straitc")
      ok = text(o.straitcPath);
    else if (a == "--replan-stop-file") // the launcher's, to its workers
      ok = text(o.replanStopFile);
    else if (a == "--trace")
      ok = text(o.traceFile);
    else if (a == "--trace-steps")
      ok = text(o.traceSteps);
    else if (a == "--quiet")
      o.quietProgress = true;
    else if (a == "--seed") {
      std::string v;
      char *end = nullptr;
      ok = text(v);
      o.seed = ok ? std::strtoull(v.c_str(), &end, 10) : 0;
      ok = ok && !v.empty() && end && *end == '\0';
    }
    else if (a == "--lr") {
      ok = text(o.lrText);
      char *end = nullptr;
      o.learningRate = ok ? std::strtof(o.lrText.c_str(), &end) : 0;
      ok = ok && end && *end == '\0';
      o.lrGiven = true;
    }
    else if (a.rfind("--", 0) == 0 || !o.planDir.empty())
      ok = false;
    else
      o.planDir = a;
    if (!ok)
      return false;
  }
  if (o.dataFormat != "" && o.dataFormat != "tokens-u16" && o.dataFormat != "tokens-u32" &&
      o.dataFormat != "npy") {
    std::cerr << "strait-run: unknown --data-format '" << o.dataFormat << "'\n";
    return false;
  }
  if ((!o.inputFiles.empty() && o.dataPath.empty()) ||
      (!o.evalInputFiles.empty() && o.evalDataPath.empty())) {
    std::cerr << "strait-run: --input needs --data, --eval-input --eval-data (the npy samples "
                 "whose rows they align with)\n";
    return false;
  }
  if (o.device != "auto" && !strait::run::parseDevice(o.device).isOk()) {
    std::cerr << "strait-run: unknown --device '" << o.device << "' (auto, cpu, cuda, cuda:N)\n";
    return false;
  }
  if (o.comm != "auto" && o.comm != "gloo") {
    std::cerr << "strait-run: unknown --comm '" << o.comm << "' (auto, gloo)\n";
    return false;
  }
  if (o.matmulPrecision != "f32" && o.matmulPrecision != "tf32" && o.matmulPrecision != "bf16") {
    std::cerr << "strait-run: unknown --matmul-precision '" << o.matmulPrecision
              << "' (f32, tf32, bf16)\n";
    return false;
  }
  if (o.replan && o.rank >= 0) {
    std::cerr << "strait-run: --replan is the launcher's (strait-run DIR without --rank); for a "
                 "job across machines, compile a new plan with straitc --cluster MEASURED.yaml "
                 "and restart every rank with --resume (docs/runtime.md, \"Re-planning when "
                 "links change\")\n";
    return false;
  }
  if (o.onHostLossReplan && (o.rank >= 0 || o.checkpointDir.empty())) {
    std::cerr << "strait-run: --on-host-loss replan is the launcher's (strait-run DIR without "
                 "--rank) and needs --checkpoint DIR (the remaining ranks resume from it)\n";
    return false;
  }
  if ((o.onHostJoinReplan || o.join) && (o.rank >= 0 || o.host.empty() || o.checkpointDir.empty())) {
    std::cerr << "strait-run: " << (o.join ? "--join" : "--on-host-join replan")
              << " is the launcher's of one machine (strait-run DIR --host NAME, without --rank) "
                 "and needs --checkpoint DIR (the running job's, on a file system every machine "
                 "shares: the new plan resumes from it)\n";
    return false;
  }
  if ((o.checkpointEvery > 0 || o.maxRestarts > 0) && o.checkpointDir.empty()) {
    std::cerr << "strait-run: --checkpoint-every and --max-restarts need --checkpoint DIR\n";
    return false;
  }
  if (!o.traceSteps.empty() && o.traceFile.empty()) {
    std::cerr << "strait-run: --trace-steps needs --trace FILE.json\n";
    return false;
  }
  if (!o.traceFile.empty() && o.steps >= 1) {
    strait::rt::Status s =
        strait::rt::trace::parseStepRange(o.traceSteps, o.steps, o.traceFirst, o.traceLast);
    if (s.isOk())
      s = strait::rt::trace::checkWritable(o.traceFile);
    if (!s.isOk()) {
      std::cerr << "strait-run: " << s.getMessage() << "\n";
      return false;
    }
  }
  return !o.planDir.empty() && o.steps >= 1;
}

} // namespace

int main(int argc, char **argv) {
  strait::rt::reexecWithNativeBlasCore(argv);
  if (argc >= 2 && std::string(argv[1]) == "--make-link-secret") {
    if (argc != 3) {
      std::cerr << "usage: strait-run --make-link-secret FILE\n";
      return 2;
    }
    strait::rt::Status s = strait::rt::writeLinkSecretFile(argv[2]);
    if (!s.isOk()) {
      std::cerr << "strait-run: " << s.toString() << std::endl;
      return 2;
    }
    std::cout << "strait-run: wrote a new link secret to " << argv[2]
              << " (mode 0600); copy it to every host of the job and pass --link-secret "
              << argv[2] << std::endl;
    return 0;
  }
  if (argc >= 2 && std::string(argv[1]) == "--merge-traces") {
    if (argc < 4) {
      std::cerr << "usage: strait-run --merge-traces OUT.json RANK.json...\n";
      return 2;
    }
    std::vector<std::string> inputs(argv + 3, argv + argc);
    strait::rt::Status s = strait::rt::trace::mergeTraces(inputs, argv[2]);
    if (!s.isOk()) {
      std::cerr << "strait-run: " << s.toString() << std::endl;
      return 2;
    }
    std::cout << "strait-run: merged " << inputs.size() << " trace(s) into " << argv[2]
              << std::endl;
    return 0;
  }
  strait::run::RunOptions o;
  if (!parse(argc, argv, o)) {
    std::cerr << kUsage;
    return 2;
  }
  if (o.rank < 0 && std::getenv("RANK") && std::getenv("WORLD_SIZE"))
    o.rank = std::atoi(std::getenv("RANK"));
  if (o.runId.empty() && std::getenv("STRAIT_RUN_ID"))
    o.runId = std::getenv("STRAIT_RUN_ID");
  // A worker's trace file may name its rank: one command line for every
  // rank of a job across machines (docs/runtime.md, "Traces").
  for (size_t at; o.rank >= 0 && (at = o.traceFile.find("{rank}")) != std::string::npos;)
    o.traceFile.replace(at, 6, std::to_string(o.rank));
  if (o.rendezvous.empty() && std::getenv("STRAIT_RENDEZVOUS"))
    o.rendezvous = std::getenv("STRAIT_RENDEZVOUS");
  if (const char *user = std::getenv("STRAIT_REDIS_USER"))
    o.redisUser = user;
  if (const char *password = std::getenv("STRAIT_REDIS_PASSWORD"))
    o.redisPassword = password;
  strait::rt::GlooOptions url; // a malformed URL: the launcher or worker says why
  if (!o.rendezvous.empty() && strait::rt::setRendezvous(url, o.rendezvous, "").isOk() &&
      !url.redisPassword.empty()) {
    // Off the command lines of the ranks: they inherit it in the environment.
    std::cerr << "strait-run: warning: the Redis password in --rendezvous is visible to other "
                 "users (ps, until strait-run hides it; shell history); set "
                 "STRAIT_REDIS_PASSWORD instead\n";
    o.redisUser = url.redisUser;
    o.redisPassword = url.redisPassword;
    ::setenv("STRAIT_REDIS_USER", o.redisUser.c_str(), 1);
    ::setenv("STRAIT_REDIS_PASSWORD", o.redisPassword.c_str(), 1);
    // And off this process's own from now on: /proc/PID/cmdline reads argv.
    for (int i = 1; i < argc; ++i)
      if (o.rendezvous == argv[i])
        for (char *c = argv[i] + 8, *at = std::strrchr(argv[i], '@'); c < at; ++c)
          *c = '*';
    o.rendezvous = strait::rt::redisUrlWithoutPassword(url);
  }
  // A store folder named here (or in $STRAIT_RENDEZVOUS) is relative to the
  // working directory, as every other path flag; only the manifest's own
  // rendezvous folder is the job folder's (rendezvousUrl).
  strait::rt::GlooOptions folder;
  if (!o.rendezvous.empty() && strait::rt::setRendezvous(folder, o.rendezvous, "").isOk() &&
      folder.store == strait::rt::StoreKind::File && folder.storePath[0] != '/')
    o.rendezvous = std::filesystem::absolute(folder.storePath).lexically_normal().string();
  if (o.linkSecretFile.empty() && std::getenv("STRAIT_LINK_SECRET_FILE"))
    o.linkSecretFile = std::getenv("STRAIT_LINK_SECRET_FILE");
  strait::rt::Executor::setAdaptiveTopKDefault(o.topkAdapt);
  if (o.rank >= 0)
    return strait::run::runWorker(o);
  return strait::run::runLauncher(o);
}
