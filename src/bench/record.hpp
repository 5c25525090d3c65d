// Result records (DESIGN.md, "Result records"): the fields every measuring tool
// writes first, so that charts, reviews and checks read all records alike.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

namespace moeforge::bench {

// {"kind", "commit" (from $MOEFORGE_COMMIT), "date", "device": {name, target,
// compute_capability, family_fallback, driver, nvrtc, sm_count}, "planner":
// {"sm90_crossover", "sm90_decode_bt", "sm90_stream_k"} (MOEFORGE_SM90_CROSSOVER, _DECODE_BT,
// _STREAM_K; < 0 / 0 / -1 = the tuned table / rule)} for `device`;
// without a driver or device, device.name is "none" and says why.
nlohmann::json record_header(std::string_view kind, int device = 0);

}  // namespace moeforge::bench
