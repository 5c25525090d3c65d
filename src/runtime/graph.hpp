// A CUDA graph captured from stream work, owned (destroyed with it) and replayed on a stream.
//
//   rt::Graph g = rt::Graph::capture(stream, [&](CUstream s) { layer.forward(x, logits, out, s); });
//   g.launch(stream);  // the captured launches, with the graph's short launch gaps
//
// Decode-sized forwards are a handful of short kernels: inference engines replay them from a
// graph, so that is how `moeforge bench` times them by default (--launch graph). The work
// must be capturable: no host synchronization, copies to the host or allocation outside the
// stream (moeforge's forward with router logits is; tests/gpu/test_robustness.cpp checks).
#pragma once
#include <cuda.h>

#include <functional>

namespace moeforge::rt {

class Graph {
 public:
  // Captures fn(stream) (thread-local capture mode) and instantiates it. If fn throws, the
  // capture is ended and discarded and the exception propagates: the stream is usable again.
  static Graph capture(CUstream stream, const std::function<void(CUstream)>& fn);

  void launch(CUstream stream) const;

  Graph(Graph&& o) noexcept : graph_(o.graph_), exec_(o.exec_) { o.graph_ = nullptr, o.exec_ = nullptr; }
  Graph& operator=(Graph&&) = delete;
  Graph(const Graph&) = delete;
  ~Graph();

 private:
  Graph(CUgraph g, CUgraphExec e) : graph_(g), exec_(e) {}
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace moeforge::rt
