//===- HostRestart.cpp - Restarts agreed between machines -----------------===//
//
// The store protocol of HostRestart.h: a few keys per generation, read by
// polling (every 100 ms while waiting).
//
//===----------------------------------------------------------------------===//
#include "HostRestart.h"

#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <set>
#include <thread>
#include <unistd.h>

namespace strait {
namespace run {

using namespace rt;

Status claimRunId(const RunOptions &o, const program::PlanManifest &m) {
  GlooOptions g;
  STRAIT_RETURN_IF_ERROR(setRendezvous(g, rendezvousUrl(o, m), o.planDir));
  setStoreAuth(o, g);
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<KeyStore> keys,
                          openKeyStore(g, "strait-launch/" + o.runId));
  char machine[256] = "?";
  ::gethostname(machine, sizeof(machine) - 1);
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  ::gmtime_r(&t, &utc);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &utc);
  std::string mine = std::string(when) + "\t" + machine + ":" + std::to_string(::getpid()) +
                     ":" + std::to_string(now.time_since_epoch().count());
  std::string key = "started/" + o.host;
  STRAIT_RETURN_IF_ERROR(keys->set(key, mine)); // the first one stays
  STRAIT_ASSIGN_OR_RETURN(std::string there, keys->get(key, std::chrono::milliseconds(1000)));
  if (there == mine)
    return Status::ok();
  std::string at = there.substr(0, there.find('\t'));
  return invalidArgument("run id " + o.runId + " was already used on this store (host " +
                         o.host + " started it at " + at + "); pick a new --run-id, or add "
                         "--join to bring host " + o.host + " back into the running job");
}

StatusOr<HostRestart> HostRestart::open(const RunOptions &o, const program::PlanManifest &m) {
  GlooOptions g;
  STRAIT_RETURN_IF_ERROR(setRendezvous(g, rendezvousUrl(o, m), o.planDir));
  setStoreAuth(o, g);
  std::string store = g.store == StoreKind::Redis
                          ? "redis store " + g.redisHost + ":" + std::to_string(g.redisPort)
                          : "file store " + g.storePath;
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<KeyStore> keys,
                          openKeyStore(g, "strait-launch/" + o.runId));
  std::set<std::string> hosts;
  for (const auto &r : m.ranks())
    hosts.insert(r.host());
  return HostRestart(std::move(keys), o.host, {hosts.begin(), hosts.end()}, store);
}

void HostRestart::setHosts(const program::PlanManifest &m) {
  std::set<std::string> names;
  for (const auto &r : m.ranks())
    names.insert(r.host());
  hosts.assign(names.begin(), names.end());
}

StatusOr<std::optional<std::string>> HostRestart::failure(int g) {
  std::string key = "fail/" + std::to_string(g);
  STRAIT_ASSIGN_OR_RETURN(bool there, keys->has(key));
  if (!there)
    return std::optional<std::string>();
  STRAIT_ASSIGN_OR_RETURN(std::string reason, keys->get(key, std::chrono::milliseconds(1000)));
  return std::optional<std::string>(reason);
}

StatusOr<std::string> HostRestart::publishFailure(int g, const std::string &reason) {
  std::string key = "fail/" + std::to_string(g);
  STRAIT_RETURN_IF_ERROR(keys->set(key, reason)); // the first one stays
  return keys->get(key, std::chrono::milliseconds(1000));
}

StatusOr<bool> HostRestart::waitAll(const std::string &prefix, const std::string &failKey,
                                    std::chrono::milliseconds timeout,
                                    const volatile std::sig_atomic_t &stop,
                                    std::vector<std::string> *values) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  silent.clear();
  for (;;) {
    if (!failKey.empty()) {
      STRAIT_ASSIGN_OR_RETURN(bool failed, keys->has(failKey));
      if (failed)
        return false;
    }
    std::vector<std::string> missing;
    std::string goneWhy;
    for (const std::string &h : hosts) {
      STRAIT_ASSIGN_OR_RETURN(bool there, keys->has(prefix + h));
      if (there)
        continue;
      missing.push_back(h);
      STRAIT_ASSIGN_OR_RETURN(bool gone, keys->has("gone/" + h));
      if (gone) {
        StatusOr<std::string> why = keys->get("gone/" + h, std::chrono::milliseconds(1000));
        silent.push_back(h);
        if (goneWhy.empty())
          goneWhy = "the launcher of host " + h + " stopped (" +
                    (why.isOk() ? *why : std::string("no reason")) + "); giving up";
      }
    }
    if (!goneWhy.empty())
      return unavailable(goneWhy);
    if (missing.empty())
      break;
    if (stop)
      return unavailable("interrupted while waiting for host(s) of the job");
    if (std::chrono::steady_clock::now() >= deadline) {
      silent = missing;
      std::string names;
      for (const std::string &h : missing)
        names += (names.empty() ? "" : ", ") + h;
      return deadlineExceeded("host(s) " + names + " did not answer in " + store + " within " +
                              std::to_string(timeout.count()) +
                              " ms (--timeout-ms): its launcher stopped, or cannot reach the "
                              "store; giving up");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (values)
    for (const std::string &h : hosts) {
      STRAIT_ASSIGN_OR_RETURN(std::string v, keys->get(prefix + h, std::chrono::milliseconds(1000)));
      values->push_back(v);
    }
  return true;
}

Status HostRestart::publishReplan(int g, int stopStep, const std::string &name) {
  return keys->set("replan/" + std::to_string(g), std::to_string(stopStep) + "\t" + name);
}

StatusOr<std::optional<std::pair<int, std::string>>> HostRestart::replanOf(int g) {
  using Found = std::optional<std::pair<int, std::string>>;
  std::string key = "replan/" + std::to_string(g);
  STRAIT_ASSIGN_OR_RETURN(bool there, keys->has(key));
  if (!there)
    return Found();
  STRAIT_ASSIGN_OR_RETURN(std::string v, keys->get(key, std::chrono::milliseconds(1000)));
  size_t tab = v.find('\t');
  int step = std::atoi(v.substr(0, tab).c_str());
  if (tab == std::string::npos || step < 1)
    return invalidArgument("malformed '" + key + "' in " + store + ": '" + v + "'");
  return Found(std::make_pair(step, v.substr(tab + 1)));
}

Status HostRestart::publishHostLoss(int g, int64_t step, const std::string &name,
                                    const std::string &refusal) {
  return keys->set("hostloss/" + std::to_string(g),
                   name.empty() ? "!\t" + refusal : std::to_string(step) + "\t" + name);
}

StatusOr<std::pair<int64_t, std::string>>
HostRestart::awaitHostLoss(int g, std::chrono::milliseconds timeout,
                           const volatile std::sig_atomic_t &stop, std::string *refusal) {
  std::string key = "hostloss/" + std::to_string(g);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    STRAIT_ASSIGN_OR_RETURN(bool there, keys->has(key));
    if (there)
      break;
    if (stop)
      return unavailable("interrupted while waiting for the new plan");
    if (std::chrono::steady_clock::now() >= deadline)
      return deadlineExceeded("no new plan appeared in " + store + " (" + key + ") within " +
                              std::to_string(timeout.count()) + " ms (--timeout-ms)");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  STRAIT_ASSIGN_OR_RETURN(std::string v, keys->get(key, std::chrono::milliseconds(1000)));
  size_t tab = v.find('\t');
  if (tab == std::string::npos)
    return invalidArgument("malformed '" + key + "' in " + store + ": '" + v + "'");
  if (v.compare(0, tab, "!") == 0) {
    if (refusal)
      *refusal = v.substr(tab + 1);
    return std::make_pair(int64_t(0), std::string());
  }
  return std::make_pair(static_cast<int64_t>(std::strtoll(v.c_str(), nullptr, 10)),
                        v.substr(tab + 1));
}

void HostRestart::leave(int g, const std::string &why) {
  // Best effort: a store that is gone cannot be told, and the others then
  // time out instead.
  (void)keys->set("fail/" + std::to_string(g), why);
  (void)keys->set("gone/" + host, why);
}

StatusOr<bool> HostRestart::finish(int g, std::chrono::milliseconds timeout,
                                   const volatile std::sig_atomic_t &stop) {
  std::string gen = std::to_string(g);
  STRAIT_RETURN_IF_ERROR(keys->set("done/" + gen + "/" + host, "1"));
  return waitAll("done/" + gen + "/", "fail/" + gen, timeout, stop, nullptr);
}

StatusOr<int64_t> HostRestart::agreeStep(int g, int64_t mine, std::chrono::milliseconds timeout,
                                         const volatile std::sig_atomic_t &stop) {
  std::string prefix = "step/" + std::to_string(g) + "/";
  STRAIT_RETURN_IF_ERROR(keys->set(prefix + host, std::to_string(mine)));
  std::vector<std::string> values;
  STRAIT_RETURN_IF_ERROR(waitAll(prefix, "", timeout, stop, &values).getStatus());
  int64_t least = mine;
  for (const std::string &v : values)
    least = std::min<int64_t>(least, std::strtoll(v.c_str(), nullptr, 10));
  return least;
}

} // namespace run
} // namespace strait
