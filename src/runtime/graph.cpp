#include "runtime/graph.hpp"

#include "runtime/driver.hpp"

namespace moeforge::rt {

Graph Graph::capture(CUstream stream, const std::function<void(CUstream)>& fn) {
  const Driver& d = driver();
  check(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  CUgraph graph = nullptr;
  try {
    fn(stream);
  } catch (...) {
    if (d.cuStreamEndCapture(stream, &graph) == CUDA_SUCCESS && graph) d.cuGraphDestroy(graph);
    throw;
  }
  check(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  if (CUresult r = d.cuGraphInstantiate(&exec, graph, 0); r != CUDA_SUCCESS) {
    d.cuGraphDestroy(graph);
    check(r, "cuGraphInstantiate");
  }
  return Graph(graph, exec);
}

void Graph::launch(CUstream stream) const { check(driver().cuGraphLaunch(exec_, stream), "cuGraphLaunch"); }

Graph::~Graph() {
  const Driver* d = driver_or_null(nullptr);
  if (!d) return;
  if (exec_) d->cuGraphExecDestroy(exec_);
  if (graph_) d->cuGraphDestroy(graph_);
}

}  // namespace moeforge::rt
