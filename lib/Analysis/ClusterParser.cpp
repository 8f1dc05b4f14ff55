//===- ClusterParser.cpp - YAML reader for cluster files ------------------===//
//
// Reads the cluster format documented in docs/planner.md with LLVM's YAML
// parser, keeping every node's line and column so that errors name the
// file, the line and the field.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/ClusterModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"

using namespace strait;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
namespace yaml = llvm::yaml;

namespace {
class Reader {
public:
  Reader(StringRef file, llvm::SourceMgr &sm) : file(file.str()), sm(sm) {}

  std::string where(yaml::Node *node) const {
    // A node the parser made up for a broken document may point nowhere.
    llvm::SMLoc loc = node ? node->getSourceRange().Start : llvm::SMLoc();
    if (!loc.isValid() || !sm.FindBufferContainingLoc(loc))
      return file;
    auto [line, col] = sm.getLineAndColumn(loc);
    return file + ":" + std::to_string(line) + ":" + std::to_string(col);
  }
  Error fail(yaml::Node *node, const llvm::Twine &msg) const {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   where(node) + ": " + msg);
  }
  Expected<std::string> scalar(yaml::Node *node, StringRef field) const {
    auto *s = llvm::dyn_cast_or_null<yaml::ScalarNode>(node);
    if (!s)
      return fail(node, "field '" + field + "' must be a scalar");
    llvm::SmallString<32> storage;
    return s->getValue(storage).str();
  }
  Expected<double> number(yaml::Node *node, StringRef field) const {
    Expected<std::string> text = scalar(node, field);
    if (!text)
      return text.takeError();
    double value;
    if (StringRef(*text).getAsDouble(value))
      return fail(node, "field '" + field + "' must be a number, got '" +
                            *text + "'");
    return value;
  }
  Expected<double> positive(yaml::Node *node, StringRef field) const {
    Expected<double> v = number(node, field);
    if (v && !(*v > 0))
      return fail(node, "field '" + field + "' must be positive");
    return v;
  }
  /// Calls fn(key, value) for each entry of a mapping.
  Error forEach(yaml::Node *node, StringRef what,
                llvm::function_ref<Error(StringRef, yaml::Node *)> fn) const {
    auto *map = llvm::dyn_cast_or_null<yaml::MappingNode>(node);
    if (!map)
      return fail(node, "'" + what + "' must be a mapping");
    for (yaml::KeyValueNode &kv : *map) {
      Expected<std::string> key = scalar(kv.getKey(), "key");
      if (!key)
        return key.takeError();
      yaml::Node *value = kv.getValue();
      if (!value)
        return fail(kv.getKey(), "field '" + *key + "' has no value");
      if (Error err = fn(*key, value))
        return err;
    }
    return Error::success();
  }
  Error forEachItem(yaml::Node *node, StringRef what,
                    llvm::function_ref<Error(yaml::Node *)> fn) const {
    auto *seq = llvm::dyn_cast_or_null<yaml::SequenceNode>(node);
    if (!seq)
      return fail(node, "'" + what + "' must be a list");
    for (yaml::Node &item : *seq)
      if (Error err = fn(&item))
        return err;
    return Error::success();
  }
  Error unknown(yaml::Node *node, StringRef key, StringRef in) const {
    return fail(node, "unknown field '" + key + "' in " + in);
  }

  std::string file;
  llvm::SourceMgr &sm;
};
} // namespace

/// An `efficiency` map (op kind -> positive factor) of a device type or a
/// profile.
static Error parseEfficiency(const Reader &r, yaml::Node *v, StringRef key,
                             std::array<double, kNumOpKinds> &efficiency) {
  return r.forEach(v, key, [&](StringRef op, yaml::Node *f) -> Error {
    std::optional<OpKind> kind = symbolizeOpKind(op);
    if (!kind)
      return r.fail(f, "unknown op kind '" + op + "' in 'efficiency'");
    Expected<double> x = r.positive(f, "efficiency." + op.str());
    if (!x)
      return x.takeError();
    efficiency[unsigned(*kind)] = *x;
    return Error::success();
  });
}

static Error parseDeviceType(const Reader &r, yaml::Node *node,
                             ClusterSpec &spec) {
  DeviceType type;
  Error err = r.forEach(node, "device type", [&](StringRef key,
                                                 yaml::Node *v) -> Error {
    if (key == "name") {
      Expected<std::string> s = r.scalar(v, key);
      if (!s)
        return s.takeError();
      type.name = *s;
    } else if (key == "kind") {
      Expected<std::string> s = r.scalar(v, key);
      if (!s)
        return s.takeError();
      auto kind = llvm::StringSwitch<std::optional<DeviceKind>>(*s)
                      .Case("gpu", DeviceKind::GPU)
                      .Case("npu", DeviceKind::NPU)
                      .Case("cpu", DeviceKind::CPU)
                      .Default(std::nullopt);
      if (!kind)
        return r.fail(v, "field 'kind' must be gpu, npu or cpu, got '" + *s +
                             "'");
      type.kind = *kind;
    } else if (key == "peak_tflops") {
      return r.forEach(v, key, [&](StringRef dt, yaml::Node *f) -> Error {
        std::optional<DType> dtype = symbolizeDType(dt);
        if (!dtype)
          return r.fail(f, "unknown dtype '" + dt + "' in 'peak_tflops'");
        Expected<double> x = r.positive(f, "peak_tflops." + dt.str());
        if (!x)
          return x.takeError();
        type.peakFlops[unsigned(*dtype)] = *x * 1e12;
        return Error::success();
      });
    } else if (key == "mem_bandwidth_gbs") {
      Expected<double> x = r.positive(v, key);
      if (!x)
        return x.takeError();
      type.memBandwidth = *x * 1e9;
    } else if (key == "memory_gib") {
      Expected<double> x = r.positive(v, key);
      if (!x)
        return x.takeError();
      type.memCapacity = *x * double(1ull << 30);
    } else if (key == "codec_gbs") { // transfer codecs (Compression.h)
      Expected<double> x = r.positive(v, key);
      if (!x)
        return x.takeError();
      type.codecBandwidth = *x * 1e9;
    } else if (key == "efficiency") {
      return parseEfficiency(r, v, key, type.efficiency);
    } else {
      return r.unknown(v, key, "a device type");
    }
    return Error::success();
  });
  if (err)
    return err;
  if (type.name.empty())
    return r.fail(node, "device type lacks field 'name'");
  if (!(type.peakFlops[0] > 0))
    return r.fail(node, "device type '" + type.name +
                            "' lacks field 'peak_tflops.fp32'");
  if (!(type.memBandwidth > 0) || !(type.memCapacity > 0))
    return r.fail(node, "device type '" + type.name +
                            "' lacks 'mem_bandwidth_gbs' or 'memory_gib'");
  spec.types.push_back(std::move(type));
  spec.typeWhere.push_back(r.where(node));
  return Error::success();
}

/// The most devices a cluster file describes (count, start and per_host
/// are at most this too): a corrupt count must not make billions of them.
constexpr unsigned kMaxDevices = 1u << 20;

/// A device entry is either one device (`name`) or a group (`prefix` and
/// `count`, optionally `per_host` with `host_prefix` and `start`).
static Error parseDevice(const Reader &r, yaml::Node *node,
                         ClusterSpec &spec) {
  std::string name, prefix, type, host, site, hostPrefix;
  double count = 0, perHost = 0, start = 0;
  Error err = r.forEach(node, "device", [&](StringRef key,
                                            yaml::Node *v) -> Error {
    std::string *text = llvm::StringSwitch<std::string *>(key)
                            .Case("name", &name)
                            .Case("prefix", &prefix)
                            .Case("type", &type)
                            .Case("host", &host)
                            .Case("site", &site)
                            .Case("host_prefix", &hostPrefix)
                            .Default(nullptr);
    double *num = llvm::StringSwitch<double *>(key)
                      .Case("count", &count)
                      .Case("per_host", &perHost)
                      .Case("start", &start)
                      .Default(nullptr);
    if (text) {
      Expected<std::string> s = r.scalar(v, key);
      if (!s)
        return s.takeError();
      *text = *s;
    } else if (num) {
      Expected<double> x = r.number(v, key);
      if (!x)
        return x.takeError();
      // (The range check comes first: converting 1e300 to an integer is
      // undefined.)
      if (*x < 0 || *x > double(kMaxDevices) || *x != double(int64_t(*x)))
        return r.fail(v, "field '" + key + "' must be a whole number in [0, " +
                             llvm::Twine(kMaxDevices) + "]");
      *num = *x;
    } else {
      return r.unknown(v, key, "a device");
    }
    return Error::success();
  });
  if (err)
    return err;
  if (type.empty())
    return r.fail(node, "device lacks field 'type'");
  std::string where = r.where(node);
  if (!name.empty()) {
    spec.devices.push_back({name, type, host, site, where});
    return Error::success();
  }
  if (prefix.empty() || count < 1)
    return r.fail(node, "device needs 'name', or 'prefix' and 'count'");
  if (spec.devices.size() + size_t(count) > kMaxDevices)
    return r.fail(node, "more than " + llvm::Twine(kMaxDevices) +
                            " devices in the cluster file");
  for (unsigned i = 0; i < unsigned(count); ++i) {
    std::string devHost = host;
    if (perHost >= 1)
      devHost = (hostPrefix.empty() ? prefix + "host" : hostPrefix) +
                std::to_string(unsigned(start) / unsigned(perHost) +
                               i / unsigned(perHost));
    spec.devices.push_back({prefix + std::to_string(unsigned(start) + i),
                            type, devHost, site, where});
  }
  return Error::success();
}

static Error parseProfile(const Reader &r, yaml::Node *node,
                          ClusterSpec &spec) {
  ProfileSpec p;
  p.where = r.where(node);
  Error err = r.forEach(node, "profile", [&](StringRef key,
                                             yaml::Node *v) -> Error {
    if (key == "device" || key == "type") {
      Expected<std::string> s = r.scalar(v, key);
      if (!s)
        return s.takeError();
      (key == "device" ? p.device : p.type) = *s;
    } else if (key == "gemm_tflops") {
      Expected<double> x = r.positive(v, key);
      if (!x)
        return x.takeError();
      p.profile.gemmFlops = *x * 1e12;
    } else if (key == "peak_tflops") {
      Expected<double> x = r.positive(v, key);
      if (!x)
        return x.takeError();
      p.profile.peakFlops = *x * 1e12;
    } else if (key == "mem_bandwidth_gbs") {
      Expected<double> x = r.positive(v, key);
      if (!x)
        return x.takeError();
      p.profile.memBandwidth = *x * 1e9;
    } else if (key == "gemm_curve") {
      // {FLOPs per byte: TFLOP/s, ...}
      Error e = r.forEach(v, key, [&](StringRef at, yaml::Node *f) -> Error {
        double intensity = 0;
        if (at.getAsDouble(intensity) || !(intensity > 0))
          return r.fail(f, "'gemm_curve' key '" + at +
                               "' is not a positive intensity (FLOPs per byte)");
        Expected<double> x = r.positive(f, "gemm_curve." + at.str());
        if (!x)
          return x.takeError();
        p.profile.gemmCurve.push_back({intensity, *x * 1e12});
        return Error::success();
      });
      llvm::sort(p.profile.gemmCurve);
      return e;
    } else if (key == "op_tflops" || key == "op_gbs") {
      bool flops = key == "op_tflops";
      return r.forEach(v, key, [&](StringRef op, yaml::Node *f) -> Error {
        Expected<double> x = r.positive(f, key.str() + "." + op.str());
        if (!x)
          return x.takeError();
        (flops ? p.profile.opFlops : p.profile.opBandwidth)[op.str()] = *x * (flops ? 1e12 : 1e9);
        return Error::success();
      });
    } else if (key == "kernel_times") {
      // {kernel signature: seconds, ...}, from strait-probe --kernels.
      auto times = std::make_shared<llvm::StringMap<double>>();
      Error e = r.forEach(v, key, [&](StringRef sig, yaml::Node *f) -> Error {
        Expected<double> x = r.positive(f, "kernel_times." + sig.str());
        if (!x)
          return x.takeError();
        (*times)[sig] = *x;
        return Error::success();
      });
      p.profile.kernelTimes = std::move(times);
      return e;
    } else if (key == "efficiency") {
      return parseEfficiency(r, v, key, p.profile.efficiency);
    } else {
      return r.unknown(v, key, "a profile");
    }
    return Error::success();
  });
  if (err)
    return err;
  if (p.device.empty() == p.type.empty())
    return r.fail(node, "profile needs exactly one of 'device' or 'type'");
  spec.profiles.push_back(std::move(p));
  return Error::success();
}

static Expected<LinkSpec> parseLinkSpec(const Reader &r, yaml::Node *node,
                                        LinkRule *rule) {
  LinkSpec spec;
  bool hasBandwidth = false;
  Error err = r.forEach(node, "link", [&](StringRef key,
                                          yaml::Node *v) -> Error {
    if (key == "between" && rule) {
      std::vector<std::string> ends;
      Error e = r.forEachItem(v, key, [&](yaml::Node *item) -> Error {
        Expected<std::string> s = r.scalar(item, key);
        if (!s)
          return s.takeError();
        ends.push_back(*s);
        return Error::success();
      });
      if (e)
        return e;
      if (ends.size() != 2)
        return r.fail(v, "field 'between' must list exactly two names");
      rule->a = ends[0];
      rule->b = ends[1];
      return Error::success();
    }
    if (key == "shared") {
      Expected<std::string> s = r.scalar(v, key);
      if (!s)
        return s.takeError();
      if (*s != "true" && *s != "false")
        return r.fail(v, "field 'shared' must be true or false");
      spec.shared = *s == "true";
      return Error::success();
    }
    double scale = llvm::StringSwitch<double>(key)
                       .Case("bandwidth_gbps", 1e9 / 8)
                       .Case("bandwidth_mbps", 1e6 / 8)
                       .Case("bandwidth_gbs", 1e9)
                       .Case("latency_ms", 1e-3)
                       .Case("latency_us", 1e-6)
                       .Case("allreduce_latency_ms", 1e-3)
                       .Case("allreduce_latency_us", 1e-6)
                       .Default(0);
    if (scale == 0)
      return r.unknown(v, key, "a link");
    bool isBandwidth = key.starts_with("bandwidth");
    Expected<double> x =
        isBandwidth ? r.positive(v, key) : r.number(v, key);
    if (!x)
      return x.takeError();
    if (!isBandwidth && *x < 0)
      return r.fail(v, "field '" + key + "' must not be negative");
    (isBandwidth                          ? spec.bandwidth
     : key.starts_with("allreduce_latency") ? spec.allReduceLatency
                                            : spec.latency) = *x * scale;
    hasBandwidth |= isBandwidth;
    return Error::success();
  });
  if (err)
    return std::move(err);
  if (!hasBandwidth)
    return r.fail(node, "link lacks a bandwidth field (bandwidth_gbps, "
                        "bandwidth_mbps or bandwidth_gbs)");
  if (rule && rule->a.empty())
    return r.fail(node, "link rule lacks field 'between'");
  return spec;
}

static Error parseLinks(const Reader &r, yaml::Node *node, ClusterSpec &spec) {
  return r.forEach(node, "links", [&](StringRef key, yaml::Node *v) -> Error {
    std::optional<LinkSpec> *slot =
        llvm::StringSwitch<std::optional<LinkSpec> *>(key)
            .Case("intra_host", &spec.intraHost)
            .Case("intra_site", &spec.intraSite)
            .Case("inter_site", &spec.interSite)
            .Default(nullptr);
    if (slot) {
      Expected<LinkSpec> link = parseLinkSpec(r, v, nullptr);
      if (!link)
        return link.takeError();
      *slot = *link;
      return Error::success();
    }
    auto scope = llvm::StringSwitch<std::optional<LinkRule::Scope>>(key)
                     .Case("sites", LinkRule::Scope::Sites)
                     .Case("hosts", LinkRule::Scope::Hosts)
                     .Case("devices", LinkRule::Scope::Devices)
                     .Default(std::nullopt);
    if (!scope)
      return r.unknown(v, key, "'links'");
    return r.forEachItem(v, key, [&](yaml::Node *item) -> Error {
      LinkRule rule;
      rule.scope = *scope;
      rule.where = r.where(item);
      Expected<LinkSpec> link = parseLinkSpec(r, item, &rule);
      if (!link)
        return link.takeError();
      rule.spec = *link;
      spec.rules.push_back(std::move(rule));
      return Error::success();
    });
  });
}

/// A host `exclude_hosts` leaves out (or `include_hosts` brings back), and
/// where the file names it.
struct ExcludedHost {
  std::string host, where;
  bool include = false;
};

static Error parseTop(const Reader &r, yaml::Node *root, ClusterSpec &spec,
                      std::vector<ExcludedHost> &excluded) {
  return r.forEach(root, "cluster", [&](StringRef key,
                                        yaml::Node *v) -> Error {
    if (key == "exclude_hosts" || key == "include_hosts")
      return r.forEachItem(v, key, [&](yaml::Node *item) -> Error {
        Expected<std::string> s = r.scalar(item, key);
        if (!s)
          return s.takeError();
        excluded.push_back({*s, r.where(item), key == "include_hosts"});
        return Error::success();
      });
    if (key == "name") {
      Expected<std::string> s = r.scalar(v, key);
      if (!s)
        return s.takeError();
      spec.name = *s;
      return Error::success();
    }
    if (key == "device_types")
      return r.forEachItem(v, key, [&](yaml::Node *item) {
        return parseDeviceType(r, item, spec);
      });
    if (key == "devices")
      return r.forEachItem(
          v, key, [&](yaml::Node *item) { return parseDevice(r, item, spec); });
    if (key == "profiles")
      return r.forEachItem(v, key, [&](yaml::Node *item) {
        return parseProfile(r, item, spec);
      });
    if (key == "links")
      return parseLinks(r, v, spec);
    return r.unknown(v, key, "the cluster file");
  });
}

/// `exclude_hosts: [H, ...]` (strait-run --on-host-loss writes it after a
/// host is lost for good): the devices on those hosts are left out, with
/// the link rules and profiles that name them (or a site no device is left
/// on). `include_hosts: [H, ...]` (strait-run --on-host-join writes it when
/// a host joins the running job) brings back a host an earlier entry left
/// out: the lists apply in the order of the file, so a later exclusion
/// wins again. A name that is no device's host is an error naming it.
static Error excludeHosts(ClusterSpec &spec, const std::vector<ExcludedHost> &excluded) {
  if (excluded.empty())
    return Error::success();
  llvm::StringSet<> hosts, sitesBefore, sitesAfter, devices;
  for (const DeviceSpec &d : spec.devices)
    hosts.insert(d.host);
  for (const ExcludedHost &x : excluded)
    if (x.host.empty() || !hosts.contains(x.host))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          x.where + ": field '" + (x.include ? "include_hosts" : "exclude_hosts") + "' names '" +
              x.host + "', which is no device's host");
  llvm::StringSet<> gone;
  for (const ExcludedHost &x : excluded) {
    if (x.include)
      gone.erase(x.host);
    else
      gone.insert(x.host);
  }
  if (gone.empty())
    return Error::success();
  std::vector<DeviceSpec> kept;
  for (DeviceSpec &d : spec.devices) {
    sitesBefore.insert(d.site);
    if (gone.contains(d.host)) {
      devices.insert(d.name);
      continue;
    }
    sitesAfter.insert(d.site);
    kept.push_back(std::move(d));
  }
  spec.devices = std::move(kept);
  auto names = [&](const LinkRule &rule, llvm::StringRef n) {
    switch (rule.scope) {
    case LinkRule::Scope::Devices:
      return devices.contains(n);
    case LinkRule::Scope::Hosts:
      return gone.contains(n);
    case LinkRule::Scope::Sites:
      return sitesBefore.contains(n) && !sitesAfter.contains(n);
    }
    return false;
  };
  llvm::erase_if(spec.rules, [&](const LinkRule &rule) {
    return names(rule, rule.a) || names(rule, rule.b);
  });
  llvm::erase_if(spec.profiles,
                 [&](const ProfileSpec &p) { return !p.device.empty() && devices.contains(p.device); });
  return Error::success();
}

Expected<ClusterSpec> strait::parseClusterSpec(StringRef text,
                                               StringRef fileName) {
  llvm::SourceMgr sm;
  std::string diag;
  sm.setDiagHandler(
      [](const llvm::SMDiagnostic &d, void *ctx) {
        auto *out = static_cast<std::string *>(ctx);
        if (out->empty())
          *out = (d.getFilename() + ":" + llvm::Twine(d.getLineNo()) + ":" +
                  llvm::Twine(d.getColumnNo() + 1) + ": " + d.getMessage())
                     .str();
      },
      &diag);
  // YAML is UTF-8 text: LLVM's scanner, given a truncated multi-byte
  // sequence at the end, points a node past the buffer (a crash in the
  // error message that names its line).
  size_t bad = 0;
  if (!llvm::json::isUTF8(text, &bad))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   fileName + ": not UTF-8 text (invalid byte at offset " +
                                       llvm::Twine(bad) + ")");
  ClusterSpec spec;
  spec.file = fileName.str();
  spec.name = fileName.str();
  yaml::Stream stream(llvm::MemoryBufferRef(text, fileName), sm);
  Reader reader(fileName, sm);
  yaml::document_iterator doc = stream.begin();
  if (doc == stream.end() || !doc->getRoot())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   fileName + ": empty cluster file");
  std::vector<ExcludedHost> excluded;
  Error err = parseTop(reader, doc->getRoot(), spec, excluded);
  if (!diag.empty()) {
    llvm::consumeError(std::move(err));
    return llvm::createStringError(llvm::inconvertibleErrorCode(), diag);
  }
  if (err)
    return std::move(err);
  if (Error e = excludeHosts(spec, excluded))
    return std::move(e);
  return spec;
}

Expected<ClusterModel> strait::parseCluster(StringRef text,
                                            StringRef fileName) {
  Expected<ClusterSpec> spec = parseClusterSpec(text, fileName);
  if (!spec)
    return spec.takeError();
  return buildCluster(*spec);
}

Expected<ClusterModel> strait::loadClusterFile(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   path + ": " + buffer.getError().message());
  return parseCluster((*buffer)->getBuffer(), path);
}
