#include "bench/record.hpp"

#include <fmt/format.h>

#include "core/clock.hpp"
#include "runtime/compiler.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"
#include "runtime/jit.hpp"
#include "runtime/settings.hpp"

namespace moeforge::bench {
namespace {

nlohmann::json device_record(int device) {
  nlohmann::json d = {{"nvrtc", rt::nvrtc_version()}};
  std::string why;
  const rt::Driver* drv = rt::driver_or_null(&why);
  if (!drv) {
    d["name"] = "none";
    d["driver"] = "no CUDA driver: " + why;
    return d;
  }
  d["driver"] = fmt::format("{}.{}", drv->version / 1000, (drv->version % 1000) / 10);
  if (rt::device_count() <= device) {
    d["name"] = "none";
    return d;
  }
  try {
    const rt::DeviceInfo& info = rt::cached_device_info(device);
    d["name"] = info.name;
    d["target"] = info.target;
    d["compute_capability"] = fmt::format("{}.{}", info.cc_major, info.cc_minor);
    d["family_fallback"] = info.family_fallback;
    d["sm_count"] = info.sm_count;
  } catch (const std::exception& e) {
    d["name"] = "?";
    d["error"] = e.what();
  }
  return d;
}

}  // namespace

nlohmann::json record_header(std::string_view kind, int device) {
  return {{"kind", kind},
          {"commit", rt::settings().commit},
          {"date", iso8601_utc_now()},
          {"device", device_record(device)},
          {"planner",  // the planner's knobs: < 0 / 0 = the tuned table / rule
           {{"sm90_crossover", rt::settings().sm90_crossover},
            {"sm90_decode_bt", rt::settings().sm90_decode_bt},
            {"sm90_stream_k", rt::settings().sm90_stream_k}}}};
}

}  // namespace moeforge::bench
