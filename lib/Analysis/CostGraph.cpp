//===- CostGraph.cpp - Cost graph utilities -------------------------------===//

#include "strait/Analysis/CostGraph.h"

#include <deque>

using namespace strait;

double CostGraph::totalFwdFlops() const {
  double sum = 0;
  for (const CostNode &n : nodes)
    sum += n.fwdFlops;
  return sum;
}

double CostGraph::totalBwdFlops() const {
  double sum = 0;
  for (const CostNode &n : nodes)
    sum += n.backwardFlops();
  return sum;
}

double CostGraph::totalParamBytes() const {
  double sum = 0;
  for (const CostNode &n : nodes)
    sum += n.paramBytes;
  return sum;
}

double CostGraph::totalActivationBytes() const {
  double sum = 0;
  for (const CostNode &n : nodes)
    sum += n.activationBytes;
  return sum;
}

llvm::Expected<std::vector<unsigned>> CostGraph::topologicalOrder() const {
  unsigned n = nodes.size();
  std::vector<unsigned> indegree(n, 0), offsets(n + 1, 0), targets;
  for (const CostEdge &e : edges) {
    if (e.src >= n || e.dst >= n)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "cost graph '" + name + "': edge " + std::to_string(e.src) +
              " -> " + std::to_string(e.dst) + " names a missing node");
    ++offsets[e.src + 1];
    ++indegree[e.dst];
  }
  for (unsigned i = 0; i < n; ++i)
    offsets[i + 1] += offsets[i];
  targets.resize(edges.size());
  std::vector<unsigned> fill(offsets.begin(), offsets.end() - 1);
  for (const CostEdge &e : edges)
    targets[fill[e.src]++] = e.dst;
  std::deque<unsigned> ready;
  for (unsigned i = 0; i < n; ++i)
    if (indegree[i] == 0)
      ready.push_back(i);
  std::vector<unsigned> order;
  order.reserve(n);
  while (!ready.empty()) {
    unsigned v = ready.front();
    ready.pop_front();
    order.push_back(v);
    for (unsigned k = offsets[v]; k < offsets[v + 1]; ++k)
      if (--indegree[targets[k]] == 0)
        ready.push_back(targets[k]);
  }
  if (order.size() != n) {
    for (unsigned i = 0; i < n; ++i)
      if (indegree[i] != 0)
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "cost graph '" + name +
                                           "' has a cycle through node '" +
                                           nodes[i].name + "'");
  }
  return order;
}
