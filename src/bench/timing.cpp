#include "bench/timing.hpp"

#include <algorithm>

#include "backends/device_buffer.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"

namespace moeforge::bench {

Timing time_on_stream(int device, CUstream stream, const std::function<void(CUstream)>& fn, int warmup, int runs) {
  const rt::Driver& d = rt::driver();
  rt::use_device(device);
  const rt::DeviceInfo info = rt::device_info(device);
  DeviceBuffer flush(device, size_t(std::max<int64_t>(info.l2_bytes, 1 << 20)) * 2);
  for (int i = 0; i < warmup; ++i) fn(stream);
  std::vector<CUevent> ev(2 * size_t(runs));
  for (auto& e : ev) rt::check(d.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  for (int i = 0; i < runs; ++i) {
    rt::check(d.cuMemsetD8Async(flush.ptr(), uint8_t(i), flush.bytes(), stream), "L2 flush");
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
