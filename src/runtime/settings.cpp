#include "runtime/settings.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace moeforge::rt {
namespace {

bool truthy(const char* v) { return v && *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0; }

std::mutex g_warn_mutex;
WarningSink& sink() {
  static WarningSink& s = *new WarningSink;  // immortal
  return s;
}

}  // namespace

Settings settings_from(const std::function<const char*(const char*)>& env) {
  Settings s;
  if (const char* d = env("MOEFORGE_CACHE_DIR"); d && *d) {
    s.cache_root = d;
    s.cache_root_source = "MOEFORGE_CACHE_DIR";
  } else if (const char* x = env("XDG_CACHE_HOME"); x && *x) {
    s.cache_root = std::string(x) + "/moeforge";
    s.cache_root_source = "XDG_CACHE_HOME";
  } else if (const char* h = env("HOME"); h && *h) {
    s.cache_root = std::string(h) + "/.cache/moeforge";
    s.cache_root_source = "HOME";
  } else {
    s.cache_root = ".moeforge-cache";
    s.cache_root_source = "cwd";
  }
  s.allow_family = truthy(env("MOEFORGE_ALLOW_FAMILY"));
  s.sync_check = truthy(env("MOEFORGE_SYNC_CHECK"));
  if (const char* f = env("MOEFORGE_FAULT_STAGE")) s.fault_stage = f;
  if (const char* c = env("MOEFORGE_COMMIT"); c && *c) s.commit = c;
  if (const char* x = env("MOEFORGE_SM90_CROSSOVER"); x && *x) {
    char* end = nullptr;
    const double v = std::strtod(x, &end);
    if (end && *end == '\0' && v >= 0) s.sm90_crossover = v;
    else warn(std::string("MOEFORGE_SM90_CROSSOVER='") + x + "' is not a number >= 0; using the tuned table");
  }
  if (const char* x = env("MOEFORGE_SM90_DECODE_BT"); x && *x) {
    const std::string v = x;
    if (v == "16" || v == "32" || v == "64" || v == "128") s.sm90_decode_bt = std::stoi(v);
    else warn("MOEFORGE_SM90_DECODE_BT='" + v + "' is not 16, 32, 64 or 128; using the planner's rule");
  }
  if (const char* x = env("MOEFORGE_SM90_STREAM_K"); x && *x) {
    const std::string v = x;
    if (v == "0" || v == "1") s.sm90_stream_k = v == "1";
    else warn("MOEFORGE_SM90_STREAM_K='" + v + "' is not 0 or 1; using the planner's rule");
  }
  if (const char* x = env("MOEFORGE_PDL"); x && *x) {
    const std::string v = x;
    if (v == "0" || v == "1") s.pdl = v == "1";
    else warn("MOEFORGE_PDL='" + v + "' is not 0 or 1; programmatic dependent launch stays on");
  }
  return s;
}

const Settings& settings() {
  static const Settings s = settings_from([](const char* name) { return std::getenv(name); });
  return s;
}

void warn(std::string_view message) {
  std::lock_guard lock(g_warn_mutex);
  if (sink()) {
    sink()(message);
    return;
  }
  std::fprintf(stderr, "moeforge: warning: %.*s\n", int(message.size()), message.data());
}

WarningSink set_warning_sink(WarningSink s) {
  std::lock_guard lock(g_warn_mutex);
  WarningSink old = std::move(sink());
  sink() = std::move(s);
  return old;
}

}  // namespace moeforge::rt
