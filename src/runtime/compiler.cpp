#include "runtime/compiler.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <map>

#include "moeforge/errors.hpp"
#include "runtime/embedded.hpp"

namespace moeforge::rt {
namespace {

bool has_embedded(const std::string& path) {
  for (const EmbeddedFile* f = embedded_files(); f->path; ++f)
    if (path == f->path) return true;
  return false;
}

std::string dir_of(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? "" : p.substr(0, s + 1);
}

// Quoted includes of one text, in order: #include "x"
std::vector<std::string> quoted_includes(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string_view::npos || line.substr(i, 7) != "include") continue;
    size_t q1 = line.find('"', i + 7);
    if (q1 == std::string_view::npos) continue;
    size_t q2 = line.find('"', q1 + 1);
    if (q2 == std::string_view::npos) continue;
    out.emplace_back(line.substr(q1 + 1, q2 - q1 - 1));
  }
  return out;
}

// Resolves an include written in `from`: root-relative first, then relative to from's dir.
std::string resolve_include(const std::string& from, const std::string& name) {
  if (has_embedded(name)) return name;
  std::string rel = dir_of(from) + name;
  if (has_embedded(rel)) return rel;
  return "";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

}  // namespace

std::vector<std::string> compile_options(const CompileRequest& req) {
  std::vector<std::string> o = {"-arch=" + req.target, "-std=c++17", "-default-device"};
  for (const auto& [k, v] : req.defines) o.push_back(v.empty() ? "-D" + k : "-D" + k + "=" + v);
  for (const auto& x : req.options) o.push_back(x);
  if (req.grid_wait) o.push_back("-DMOE_PDL=1");  // common/grid_dependency.cuh
  return o;
}

namespace {

// Whether the PTX body of `entry` executes griddepcontrol.wait (inlined into it, as
// common/grid_dependency.cuh's helpers are: a callee's wait would not be seen, a false negative).
bool entry_waits_on_prior_grid(std::string_view ptx, const std::string& entry) {
  const size_t at = ptx.find(".entry " + entry + "(");
  if (at == std::string_view::npos) return false;
  const size_t end = ptx.find(".entry ", at + 1);
  return ptx.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at)
             .find("griddepcontrol.wait") != std::string_view::npos;
}

}  // namespace

std::vector<std::pair<std::string, std::string_view>> source_closure(const std::string& source) {
  std::vector<std::pair<std::string, std::string_view>> out;
  std::vector<std::string> todo = {source};
  while (!todo.empty()) {
    std::string p = todo.front();
    todo.erase(todo.begin());
    bool seen = false;
    for (auto& e : out) seen |= e.first == p;
    if (seen) continue;
    std::string_view text = embedded_source(p);
    out.emplace_back(p, text);
    for (const std::string& inc : quoted_includes(text)) {
      std::string r = resolve_include(p, inc);
      if (!r.empty()) todo.push_back(r);
    }
  }
  return out;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

std::vector<int> nvrtc_supported_sms() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS) return {};
  std::vector<int> v(n);
  nvrtcGetSupportedArchs(v.data());
  return v;
}

CompileResult compile(const CompileRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileResult res;
  res.options = compile_options(req);
  std::string_view text = embedded_source(req.source);

  // Every embedded file as a header under its root-relative name, plus the
  // dir-relative names the closure of this source actually uses.
  std::map<std::string, std::string_view> headers;
  for (const EmbeddedFile* f = embedded_files(); f->path; ++f) headers[f->path] = {f->text, f->size};
  for (const auto& [path, t] : source_closure(req.source))
    for (const std::string& inc : quoted_includes(t))
      if (!headers.count(inc)) {
        std::string r = resolve_include(path, inc);
        if (!r.empty()) headers[inc] = embedded_source(r);
      }
  std::vector<std::string> header_texts, header_names;
  for (auto& [n, t] : headers) {
    header_names.push_back(n);
    header_texts.emplace_back(t);
  }
  std::vector<const char*> hn, ht, opts;
  for (size_t i = 0; i < header_names.size(); ++i) {
    hn.push_back(header_names[i].c_str());
    ht.push_back(header_texts[i].c_str());
  }
  for (auto& o : res.options) opts.push_back(o.c_str());

  std::string src(text);
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nvrtcCreateProgram(&prog, src.c_str(), req.source.c_str(), int(hn.size()), ht.data(), hn.data());
  if (r != NVRTC_SUCCESS)
    throw CompileError(fmt::format("nvrtcCreateProgram({}): {}", req.source, nvrtcGetErrorString(r)));
  struct Guard {
    nvrtcProgram* p;
    ~Guard() { nvrtcDestroyProgram(p); }
  } guard{&prog};
  r = nvrtcCompileProgram(prog, int(opts.size()), opts.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  res.log.resize(log_size);
  if (log_size) nvrtcGetProgramLog(prog, res.log.data());
  while (!res.log.empty() && (res.log.back() == '\0' || res.log.back() == '\n')) res.log.pop_back();
  if (r != NVRTC_SUCCESS)
    throw CompileError(fmt::format("NVRTC {} failed to compile {} (entry {}) for {}: {}\n  options: {}\n  log:\n{}",
                                   nvrtc_version(), req.source, req.entry, req.target, nvrtcGetErrorString(r),
                                   join(res.options), res.log));
  size_t size = 0;
  r = nvrtcGetCUBINSize(prog, &size);
  if (r != NVRTC_SUCCESS || size == 0)
    throw CompileError(fmt::format("nvrtcGetCUBINSize({} for {}): {} (was a virtual compute_ target given?)",
                                   req.source, req.target, nvrtcGetErrorString(r)));
  res.cubin.resize(size);
  r = nvrtcGetCUBIN(prog, res.cubin.data());
  if (r != NVRTC_SUCCESS) throw CompileError(fmt::format("nvrtcGetCUBIN({}): {}", req.source, nvrtcGetErrorString(r)));
  if (req.grid_wait) {  // the proof that launching it with PDL is safe
    size_t ptx_size = 0;
    std::string ptx;
    if (nvrtcGetPTXSize(prog, &ptx_size) == NVRTC_SUCCESS) {
      ptx.resize(ptx_size);
      if (nvrtcGetPTX(prog, ptx.data()) != NVRTC_SUCCESS) ptx.clear();
    }
    if (!entry_waits_on_prior_grid(ptx, req.entry))
      throw CompileError(fmt::format(
          "{} (entry {}) is declared for programmatic dependent launch but its PTX for {} has no griddepcontrol.wait: "
          "call wait_for_prior_grid() (common/grid_dependency.cuh) before its first dependent memory access",
          req.source, req.entry, req.target));
  }
  res.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace moeforge::rt
