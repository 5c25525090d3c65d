#include "bench/timing.hpp"

#include <algorithm>

#include "backends/device_buffer.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"

namespace moeforge::bench {

const char* to_string(L2Flush f) { return f == L2Flush::Read ? "read" : "write"; }

void stream_read(int device, CUdeviceptr src, size_t bytes, CUdeviceptr sink, CUstream stream, const char* stage) {
  rt::KernelSpec spec;
  spec.source = "common/stream_read.cuh";
  spec.entry = "moe_stream_read";
  spec.threads = 512;
  const rt::LoadedKernel& k = rt::load_kernel(device, spec);
  unsigned long long n_vec = bytes / 16;
  void* args[] = {&src, &n_vec, &sink};
  rt::launch(k, {unsigned(rt::cached_device_info(device).sm_count * 4)}, {512}, 0, stream, args, stage);
}

Timing time_on_stream(int device, CUstream stream, const std::function<void(CUstream)>& fn, int warmup, int runs,
                      L2Flush flush_kind) {
  const rt::Driver& d = rt::driver();
  rt::use_device(device);
  const rt::DeviceInfo info = rt::device_info(device);
  DeviceBuffer flush(device, size_t(std::max<int64_t>(info.l2_bytes, 1 << 20)) * 2);
  // Written once here; the read flush's first sweep (in the warm-ups) evicts these dirty lines.
  rt::check(d.cuMemsetD8Async(flush.ptr(), 0x5a, flush.bytes(), stream), "L2 flush buffer");
  DeviceBuffer sink(device, 4);
  auto empty_l2 = [&](int i) {
    if (flush_kind == L2Flush::Write) {
      rt::check(d.cuMemsetD8Async(flush.ptr(), uint8_t(i), flush.bytes(), stream), "L2 flush");
      return;
    }
    stream_read(device, flush.ptr(), flush.bytes(), sink.ptr(), stream, "L2 flush");
  };
  for (int i = 0; i < warmup; ++i) {
    empty_l2(i);
    fn(stream);
  }
  std::vector<CUevent> ev(2 * size_t(runs));
  for (auto& e : ev) rt::check(d.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; i < runs; ++i) {
    empty_l2(i);
    rt::check(d.cuEventRecord(ev[2 * i], stream), "cuEventRecord");
    fn(stream);
    rt::check(d.cuEventRecord(ev[2 * i + 1], stream), "cuEventRecord");
  }
  rt::check(d.cuStreamSynchronize(stream), "timed runs");
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    rt::check(d.cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cuEventElapsedTime");
    us.push_back(ms * 1000.0);
  }
  for (auto& e : ev) d.cuEventDestroy(e);
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us.back(), runs};
}

}  // namespace moeforge::bench
