// What `moeforge doctor` reports, as one JSON object (the CLI formats it; the
// Python package can return it as a dict). Never throws for a missing driver or
// device: it says so in the report.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace moeforge::rt {

struct DoctorOptions {
  std::string model = "mistral-small-4";  // preset for the `auto` backend choice
  bool run_selftest = true;               // compile + load + run common/selftest.cuh per GPU
  bool choose_backend = true;             // run `auto` (runs backend self-tests on a GPU)
};

// Keys: moeforge, driver, nvrtc, supported_targets, settings, devices, cache,
// budget, backend, problems.
nlohmann::json doctor_report(const DoctorOptions& options = {});

}  // namespace moeforge::rt
