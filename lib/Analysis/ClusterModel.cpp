//===- ClusterModel.cpp - Cluster model resolution and validation ---------===//
//
// Turns a ClusterSpec into a ClusterModel: resolves names, assigns speed
// classes and fills the dense pair -> link matrix. The YAML reader lives in
// ClusterParser.cpp.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/ClusterModel.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace strait;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

StringRef strait::stringifyDeviceKind(DeviceKind kind) {
  switch (kind) {
  case DeviceKind::GPU:
    return "gpu";
  case DeviceKind::NPU:
    return "npu";
  case DeviceKind::CPU:
    return "cpu";
  }
  return "?";
}

StringRef strait::stringifyDType(DType type) {
  static const char *names[] = {"fp32", "fp16", "bf16", "int8"};
  return names[unsigned(type)];
}

StringRef strait::stringifyOpKind(OpKind kind) {
  static const char *names[] = {"matmul",  "conv",      "elementwise", "norm",
                                "softmax", "embedding", "other"};
  return names[unsigned(kind)];
}

std::optional<DType> strait::symbolizeDType(StringRef name) {
  return llvm::StringSwitch<std::optional<DType>>(name)
      .Cases("fp32", "f32", DType::F32)
      .Cases("fp16", "f16", DType::F16)
      .Case("bf16", DType::BF16)
      .Cases("int8", "i8", DType::I8)
      .Default(std::nullopt);
}

std::optional<OpKind> strait::symbolizeOpKind(StringRef name) {
  for (unsigned i = 0; i < kNumOpKinds; ++i)
    if (stringifyOpKind(OpKind(i)) == name)
      return OpKind(i);
  return std::nullopt;
}

unsigned strait::dtypeBytes(DType type) {
  static const unsigned bytes[] = {4, 2, 2, 1};
  return bytes[unsigned(type)];
}

static Error makeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

static std::string at(const std::string &where, const std::string &file) {
  return where.empty() ? file : where;
}

namespace {
/// Interns names into dense indices.
struct NameTable {
  llvm::StringMap<unsigned> index;
  std::vector<std::string> names;
  unsigned intern(StringRef name) {
    auto [it, inserted] = index.try_emplace(name, names.size());
    if (inserted)
      names.push_back(name.str());
    return it->second;
  }
  std::optional<unsigned> lookup(StringRef name) const {
    auto it = index.find(name);
    if (it == index.end())
      return std::nullopt;
    return it->second;
  }
};

uint64_t pairKey(unsigned a, unsigned b) {
  if (a > b)
    std::swap(a, b);
  return (uint64_t(a) << 32) | b;
}
} // namespace

static Error checkLinkSpec(const LinkSpec &spec, const std::string &where) {
  if (!(spec.bandwidth > 0))
    return makeError(where + ": field 'bandwidth' must be positive");
  if (spec.latency < 0)
    return makeError(where + ": field 'latency' must not be negative");
  return Error::success();
}

static Error addDevices(const ClusterSpec &spec, ClusterModel &model,
                        NameTable &hosts, NameTable &sites) {
  llvm::StringMap<unsigned> typeIndex;
  for (unsigned i = 0; i < spec.types.size(); ++i) {
    std::string where =
        at(i < spec.typeWhere.size() ? spec.typeWhere[i] : "", spec.file);
    if (!typeIndex.try_emplace(spec.types[i].name, i).second)
      return makeError(where + ": duplicate device type name '" +
                       spec.types[i].name + "'");
    const DeviceType &t = spec.types[i];
    if (!(t.peakFlops[0] > 0))
      return makeError(where + ": device type '" + t.name +
                       "': field 'peak_tflops.fp32' must be positive");
    if (!(t.memBandwidth > 0) || !(t.memCapacity > 0))
      return makeError(where + ": device type '" + t.name +
                       "': 'mem_bandwidth_gbs' and 'memory_gib' must be "
                       "positive");
  }
  model.types = spec.types;
  llvm::StringMap<unsigned> deviceIndex;
  for (const DeviceSpec &d : spec.devices) {
    std::string where = at(d.where, spec.file);
    auto type = typeIndex.find(d.type);
    if (type == typeIndex.end())
      return makeError(where + ": device '" + d.name +
                       "': field 'type' names unknown device type '" + d.type +
                       "'");
    if (!deviceIndex.try_emplace(d.name, model.devices.size()).second)
      return makeError(where + ": duplicate device name '" + d.name + "'");
    Device dev;
    dev.name = d.name;
    dev.type = type->second;
    dev.host = hosts.intern(d.host.empty() ? d.name : d.host);
    dev.site = sites.intern(d.site.empty() ? "default" : d.site);
    model.devices.push_back(std::move(dev));
  }
  if (model.devices.empty())
    return makeError(spec.file + ": the cluster has no devices");
  // Profiles: per type first, then per device (more specific wins).
  for (int pass = 0; pass < 2; ++pass) {
    for (const ProfileSpec &p : spec.profiles) {
      std::string where = at(p.where, spec.file);
      if (pass == 0 && !p.type.empty()) {
        auto type = typeIndex.find(p.type);
        if (type == typeIndex.end())
          return makeError(where + ": profile field 'type' names unknown "
                                   "device type '" + p.type + "'");
        for (Device &dev : model.devices)
          if (dev.type == type->second)
            dev.profile = p.profile;
      } else if (pass == 1 && !p.device.empty()) {
        auto dev = deviceIndex.find(p.device);
        if (dev == deviceIndex.end())
          return makeError(where + ": profile field 'device' names unknown "
                                   "device '" + p.device + "'");
        model.devices[dev->second].profile = p.profile;
      }
    }
  }
  return Error::success();
}

static void assignSpeedClasses(ClusterModel &model) {
  model.classRepresentative.clear();
  for (unsigned i = 0; i < model.devices.size(); ++i) {
    Device &dev = model.devices[i];
    unsigned cls = 0;
    for (; cls < model.classRepresentative.size(); ++cls) {
      const Device &rep = model.devices[model.classRepresentative[cls]];
      if (rep.type == dev.type && rep.profile == dev.profile)
        break;
    }
    if (cls == model.classRepresentative.size())
      model.classRepresentative.push_back(i);
    dev.speedClass = cls;
  }
}

namespace {
/// Rule tables at device, host and site granularity, holding link ids.
struct RuleTables {
  llvm::DenseMap<uint64_t, unsigned> devicePairs, hostPairs, sitePairs;
  int intraHost = -1, intraSite = -1, interSite = -1;
};
} // namespace

static Expected<RuleTables> collectRules(const ClusterSpec &spec,
                                         ClusterModel &model,
                                         const NameTable &hosts,
                                         const NameTable &sites) {
  RuleTables tables;
  auto addLink = [&](const LinkSpec &s, std::string origin) {
    Link link;
    static_cast<LinkSpec &>(link) = s;
    link.origin = std::move(origin);
    model.links.push_back(std::move(link));
    return int(model.links.size() - 1);
  };
  struct Default {
    const std::optional<LinkSpec> &spec;
    int &slot;
    const char *name;
  } defaults[] = {{spec.intraHost, tables.intraHost, "intra_host"},
                  {spec.intraSite, tables.intraSite, "intra_site"},
                  {spec.interSite, tables.interSite, "inter_site"}};
  for (Default &d : defaults) {
    if (!d.spec)
      continue;
    if (Error err = checkLinkSpec(*d.spec, spec.file + ": links." + d.name))
      return std::move(err);
    d.slot = addLink(*d.spec, d.name);
  }
  llvm::StringMap<unsigned> deviceIndex;
  for (unsigned i = 0; i < model.devices.size(); ++i)
    deviceIndex[model.devices[i].name] = i;
  for (const LinkRule &rule : spec.rules) {
    std::string where = at(rule.where, spec.file);
    if (Error err = checkLinkSpec(rule.spec, where))
      return std::move(err);
    std::optional<unsigned> a, b;
    const char *what = "site";
    if (rule.scope == LinkRule::Scope::Devices) {
      what = "device";
      if (auto it = deviceIndex.find(rule.a); it != deviceIndex.end())
        a = it->second;
      if (auto it = deviceIndex.find(rule.b); it != deviceIndex.end())
        b = it->second;
    } else {
      const NameTable &table =
          rule.scope == LinkRule::Scope::Hosts ? hosts : sites;
      if (rule.scope == LinkRule::Scope::Hosts)
        what = "host";
      a = table.lookup(rule.a);
      b = table.lookup(rule.b);
    }
    if (!a || !b)
      return makeError(where + ": field 'between' names unknown " + what +
                       " '" + (!a ? rule.a : rule.b) + "'");
    int id = addLink(rule.spec, std::string(what) + "s " + rule.a + "-" +
                                    rule.b);
    auto &map = rule.scope == LinkRule::Scope::Devices ? tables.devicePairs
                : rule.scope == LinkRule::Scope::Hosts ? tables.hostPairs
                                                       : tables.sitePairs;
    map[pairKey(*a, *b)] = id;
  }
  return tables;
}

static int resolvePair(const RuleTables &t, const Device &a, const Device &b,
                       unsigned ia, unsigned ib) {
  if (!t.devicePairs.empty())
    if (auto it = t.devicePairs.find(pairKey(ia, ib)); it != t.devicePairs.end())
      return it->second;
  if (a.host != b.host && !t.hostPairs.empty())
    if (auto it = t.hostPairs.find(pairKey(a.host, b.host));
        it != t.hostPairs.end())
      return it->second;
  if (a.site != b.site) {
    if (auto it = t.sitePairs.find(pairKey(a.site, b.site));
        it != t.sitePairs.end())
      return it->second;
    return t.interSite;
  }
  if (a.host == b.host && t.intraHost >= 0)
    return t.intraHost;
  return t.intraSite >= 0 ? t.intraSite : t.interSite;
}

Expected<ClusterModel> strait::buildCluster(const ClusterSpec &spec) {
  ClusterModel model;
  model.name = spec.name;
  NameTable hosts, sites;
  if (Error err = addDevices(spec, model, hosts, sites))
    return std::move(err);
  model.hosts = hosts.names;
  model.sites = sites.names;
  assignSpeedClasses(model);
  Expected<RuleTables> tables = collectRules(spec, model, hosts, sites);
  if (!tables)
    return tables.takeError();
  // Self links: infinite bandwidth, no latency.
  Link self;
  self.bandwidth = 1e30;
  self.origin = "self";
  model.links.push_back(self);
  uint32_t selfId = model.links.size() - 1;
  size_t n = model.devices.size();
  model.linkIds.assign(n * n, selfId);
  // Site pairs resolve identically for most device pairs; the row loop is
  // O(n^2) with a hash lookup only when device or host rules exist.
  for (unsigned i = 0; i < n; ++i) {
    for (unsigned j = i + 1; j < n; ++j) {
      const Device &a = model.devices[i], &b = model.devices[j];
      int id = resolvePair(*tables, a, b, i, j);
      if (id < 0) {
        std::string hint =
            a.site != b.site
                ? "add a links.sites entry between '" + model.sites[a.site] +
                      "' and '" + model.sites[b.site] +
                      "' or links.inter_site"
                : std::string("add links.intra_site");
        return makeError(spec.file + ": devices '" + a.name + "' (site '" +
                         model.sites[a.site] + "') and '" + b.name +
                         "' (site '" + model.sites[b.site] +
                         "') have no path between them: " + hint);
      }
      model.linkIds[i * n + j] = model.linkIds[j * n + i] = id;
    }
  }
  return model;
}

ClusterModel strait::makeUniformCluster(const DeviceType &type, unsigned sites,
                                        unsigned hostsPerSite,
                                        unsigned devicesPerHost,
                                        LinkSpec intraHost, LinkSpec intraSite,
                                        LinkSpec interSite) {
  ClusterSpec spec;
  spec.name = llvm::formatv("uniform-{0}x{1}x{2}", sites, hostsPerSite,
                            devicesPerHost)
                  .str();
  spec.file = "<generated>";
  spec.types.push_back(type);
  for (unsigned s = 0; s < sites; ++s)
    for (unsigned h = 0; h < hostsPerSite; ++h)
      for (unsigned d = 0; d < devicesPerHost; ++d) {
        DeviceSpec dev;
        unsigned hostIdx = s * hostsPerSite + h;
        dev.name = llvm::formatv("d{0}", hostIdx * devicesPerHost + d).str();
        dev.type = type.name;
        dev.host = llvm::formatv("h{0}", hostIdx).str();
        dev.site = llvm::formatv("s{0}", s).str();
        spec.devices.push_back(std::move(dev));
      }
  spec.intraHost = intraHost;
  spec.intraSite = intraSite;
  spec.interSite = interSite;
  Expected<ClusterModel> model = buildCluster(spec);
  if (!model) {
    llvm::consumeError(model.takeError());
    return ClusterModel();
  }
  return std::move(*model);
}

static DeviceType makeType(StringRef name, DeviceKind kind, double tf32,
                           double tf16, double memGBs, double memGiB) {
  DeviceType t;
  t.name = name.str();
  t.kind = kind;
  t.peakFlops[unsigned(DType::F32)] = tf32 * 1e12;
  t.peakFlops[unsigned(DType::F16)] = tf16 * 1e12;
  t.peakFlops[unsigned(DType::BF16)] = tf16 * 1e12;
  t.memBandwidth = memGBs * 1e9;
  t.memCapacity = memGiB * double(1ull << 30);
  return t;
}

DeviceType strait::makeA100() {
  return makeType("A100", DeviceKind::GPU, 19.5, 312, 2039, 80);
}
DeviceType strait::makeV100() {
  return makeType("V100", DeviceKind::GPU, 15.7, 125, 900, 32);
}
DeviceType strait::makeCpuType() {
  return makeType("CPU", DeviceKind::CPU, 1.0, 1.0, 50, 32);
}
