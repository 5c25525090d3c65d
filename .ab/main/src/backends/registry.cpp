// The backend registry and `auto` selection (see backend.hpp).
#include <fmt/format.h>

#include <cstdio>
#include <mutex>
#include <set>

#include "backends/backend.hpp"
#include "backends/selftest.hpp"
#include "moeforge/errors.hpp"
#include "runtime/device.hpp"
#include "runtime/driver.hpp"

namespace moeforge {

const std::vector<const Backend*>& all_backends() {
  static const std::vector<const Backend*> backends = {&sm90_backend(), &portable_backend(), &cpu_backend()};
  return backends;
}

const Backend& find_backend(std::string_view name) {
  std::vector<std::string> names;
  for (const Backend* b : all_backends()) {
    if (b->name() == name) return *b;
    names.emplace_back(b->name());
  }
  throw InvalidArgument("backend", fmt::format("unknown backend '{}' (expected auto or one of: {})", name,
                                               fmt::join(names, ", ")));
}

namespace {

// Why `backend` cannot serve spec on `device` here; "" when it can.
std::string why_not_here(const Backend& backend, const MoeSpec& spec, int device, rt::DeviceInfo* info) {
  if (!backend.needs_gpu()) return backend.why_not(spec, nullptr);
  std::string why;
  if (!rt::driver_or_null(&why)) return "no CUDA driver (" + why + ")";
  const int count = rt::device_count();
  if (device < 0 || device >= count)
    return fmt::format("no CUDA device {} (this machine has {})", device, count);
  *info = rt::device_info(device);
  return backend.why_not(spec, info);
}

void log_once(const std::string& line) {
  static std::mutex& mu = *new std::mutex;  // immortal
  static auto& said = *new std::set<std::string>;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(line).second) std::fprintf(stderr, "moeforge: %s\n", line.c_str());
}

}  // namespace

BackendChoice choose_backend(const MoeSpec& spec, std::string_view requested, int device) {
  BackendChoice choice;
  if (requested != "auto") {
    const Backend& b = find_backend(requested);
    rt::DeviceInfo info;
    const std::string why = why_not_here(b, spec, device, &info);
    if (!why.empty()) {
      std::vector<std::string> can;
      for (const Backend* other : all_backends()) {
        rt::DeviceInfo i2;
        if (why_not_here(*other, spec, device, &i2).empty()) can.emplace_back(other->name());
      }
      throw Unsupported(fmt::format("backend '{}' cannot run here: {}; backends that can: {}", requested, why,
                                    can.empty() ? "none" : fmt::format("{}", fmt::join(can, ", "))));
    }
    choice.backend = &b;
    choice.reason = fmt::format("requested explicitly{}", b.needs_gpu() ? fmt::format(" ({} on device {}, {})",
                                                                                       b.name(), device, info.target)
                                                                        : std::string());
    return choice;
  }

  // auto: every GPU backend that can serve runs its self-test; among those that
  // passed, the highest priority wins, then the fastest. The CPU reference is the
  // answer only when no GPU backend can.
  const Backend* best = nullptr;
  SelfTestResult best_result;
  for (const Backend* b : all_backends()) {
    if (!b->needs_gpu()) continue;
    rt::DeviceInfo info;
    const std::string why = why_not_here(*b, spec, device, &info);
    if (!why.empty()) {
      choice.rejected.push_back(fmt::format("{}: {}", b->name(), why));
      continue;
    }
    const SelfTestResult r = self_test(*b, spec, device);
    if (!r.passed) {
      choice.rejected.push_back(fmt::format("{}: self-test {}", b->name(), r.detail));
      continue;
    }
    if (!best || b->priority() > best->priority() || (b->priority() == best->priority() && r.us < best_result.us)) {
      best = b;
      best_result = r;
    }
  }
  if (best) {
    choice.backend = best;
    choice.reason = fmt::format("auto: highest-priority, then fastest, GPU backend whose self-test passed ({})",
                                best_result.detail);
  } else {
    choice.backend = &cpu_backend();
    choice.reason = "auto: no GPU backend can run here, using the CPU reference";
  }
  std::string log = fmt::format("backend {} chosen for {}: {}", choice.backend->name(), spec.name, choice.reason);
  for (const auto& r : choice.rejected) log += fmt::format("; rejected {}", r);
  log_once(log);
  return choice;
}

}  // namespace moeforge
