#include "runtime/cache.hpp"

#include "core/clock.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "moeforge/errors.hpp"
#include "runtime/elf.hpp"
#include "runtime/settings.hpp"

#ifndef MOEFORGE_VERSION
#define MOEFORGE_VERSION "unknown"
#endif

namespace moeforge::rt {
namespace {

using json = nlohmann::json;

// A metadata field, "" (0) when absent or of another JSON type: a damaged entry is then a
// mismatch, rejected and rebuilt (json::value() throws its own type_error on a wrong type,
// which would pass the Error handlers and fail the kernel load instead).
std::string meta_string(const json& meta, const char* key) {
  const auto it = meta.find(key);
  return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}
double meta_number(const json& meta, const char* key) {
  const auto it = meta.find(key);
  return it != meta.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string errno_text(int e) { return std::strerror(e); }

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Writes bytes to dir/name atomically: tmp in the same dir, fsync, rename. Returns "" or the error.
std::string write_atomic(const std::string& dir, const std::string& name, std::string_view bytes) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ uint64_t(::getpid())};
  const std::string tmp = fmt::format("{}/.{}.tmp.{}.{:x}", dir, name, ::getpid(), rng());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("create {}: {}", tmp, errno_text(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return fmt::format("write {}: {}", tmp, errno_text(e));
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fmt::format("fsync {}: {}", tmp, errno_text(e));
  }
  const std::string final_path = dir + "/" + name;
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fmt::format("rename {} -> {}: {}", tmp, final_path, errno_text(e));
  }
  return "";
}


void put(std::string& s, std::string_view field, std::string_view v) {
  s += field;
  s += ':';
  s += std::to_string(v.size());
  s += ':';
  s += v;
  s += ';';
}

// mkdir -p with 0700 for the parts we create; returns 0 or errno.
int mkdirs(const std::string& path) {
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    i = j + 1;
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return errno;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return ENOTDIR;
  return 0;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx, bytes.data(), bytes.size()) != 1 || EVP_DigestFinal_ex(ctx, md, &len) != 1) {
    EVP_MD_CTX_free(ctx);
    throw InternalError("SHA-256 (OpenSSL EVP) failed");
  }
  EVP_MD_CTX_free(ctx);
  static const char* hex = "0123456789abcdef";
  std::string out(len * 2, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  return out;
}

CacheKeyInputs key_inputs(const CompileRequest& req) {
  CacheKeyInputs in;
  for (const auto& [p, t] : source_closure(req.source)) in.sources.emplace_back(p, std::string(t));
  in.entry = req.entry;
  in.options = compile_options(req);
  in.defines = req.defines;
  in.nvrtc_version = nvrtc_version();
  in.target = req.target;
  in.moeforge_version = MOEFORGE_VERSION;
  return in;
}

std::string cache_key(const CacheKeyInputs& in) {
  std::string s = "moeforge-kernel-key-v1;";
  for (const auto& [p, t] : in.sources) {
    put(s, "source.path", p);
    put(s, "source.text", t);
  }
  put(s, "entry", in.entry);
  for (const auto& o : in.options) put(s, "option", o);
  for (const auto& [k, v] : in.defines) {
    put(s, "define.name", k);
    put(s, "define.value", v);
  }
  put(s, "nvrtc", in.nvrtc_version);
  put(s, "target", in.target);
  put(s, "moeforge", in.moeforge_version);
  return sha256_hex(s);
}

std::string KernelCache::unsafe_reason(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return "";  // not there yet: we create it 0700
  const unsigned mode = st.st_mode & 07777;
  const bool ours = st.st_uid == ::geteuid();
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  const bool sticky = (st.st_mode & S_ISVTX) != 0;
  if (!ours)
    return fmt::format("kernel cache directory {} (mode {:04o}, owner uid {}) is owned by another user (we are uid {}); "
                       "refusing to load kernels another user could have written",
                       dir, mode, st.st_uid, ::geteuid());
  if (others_write && !sticky)
    return fmt::format("kernel cache directory {} (mode {:04o}, owner uid {}) is writable by {}; refusing to load "
                       "kernels another user could have written (chmod go-w {})",
                       dir, mode, st.st_uid, (st.st_mode & S_IWOTH) ? "every user" : "its group", dir);
  return "";
}

KernelCache::KernelCache(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string KernelCache::mode() const {
  std::lock_guard lock(m_);
  bool ro = false, mem = false;
  for (auto& [t, m] : dir_modes_) {
    ro |= m == Mode::ReadOnly;
    mem |= m == Mode::Memory;
  }
  return mem ? "memory" : ro ? "read-only" : "disk";
}

int KernelCache::compiles() const {
  std::lock_guard lock(m_);
  return compiles_;
}

std::mutex& KernelCache::key_mutex(const std::string& key) {
  std::lock_guard lock(m_);
  auto& p = key_mutexes_[key];
  if (!p) p = std::make_unique<std::mutex>();
  return *p;
}

KernelCache::Mode KernelCache::prepare_dir(const std::string& target, std::string* dir) {
  *dir = root_ + "/" + target;
  {
    std::lock_guard lock(m_);
    auto it = dir_modes_.find(target);
    if (it != dir_modes_.end()) return it->second;
  }
  // Security first: a directory someone else can write is refused, never used.
  for (const std::string& d : {root_, *dir})
    if (std::string why = unsafe_reason(d); !why.empty()) throw CacheError(why);
  Mode mode = Mode::Disk;
  std::string why;
  if (int e = mkdirs(*dir); e != 0) {
    struct stat st;
    mode = (::stat(dir->c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ? Mode::ReadOnly : Mode::Memory;
    why = fmt::format("cannot create {}: {}", *dir, errno_text(e));
  } else if (::access(dir->c_str(), W_OK) != 0) {
    mode = Mode::ReadOnly;
    why = fmt::format("{} is not writable: {}", *dir, errno_text(errno));
  } else {
    // Root ignores permission bits; probe for real (read-only mounts).
    const std::string probe = fmt::format("{}/.probe.{}", *dir, ::getpid());
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      mode = Mode::ReadOnly;
      why = fmt::format("{} is not writable: {}", *dir, errno_text(errno));
    } else {
      ::close(fd);
      ::unlink(probe.c_str());
    }
  }
  if (mode == Mode::Disk)
    if (std::string w = unsafe_reason(*dir); !w.empty()) throw CacheError(w);
  std::lock_guard lock(m_);
  if (mode != Mode::Disk && !warned_fallback_) {
    warned_fallback_ = true;
    warn(fmt::format("kernel cache {} unusable ({}); {}", root_, why,
                     mode == Mode::ReadOnly ? "reading verified entries, keeping new builds in memory only"
                                            : "keeping compiled kernels in memory only"));
  }
  dir_modes_[target] = mode;
  return mode;
}

KernelCache::Read KernelCache::read_verified(const std::string& dir, const std::string& key,
                                             const std::string& target, std::shared_ptr<const std::string>* out,
                                             bool quiet) {
  const std::string cubin_path = dir + "/" + key + ".cubin", meta_path = dir + "/" + key + ".json";
  struct stat st;
  const bool have_cubin = ::stat(cubin_path.c_str(), &st) == 0;
  struct stat sm;
  const bool have_meta = ::stat(meta_path.c_str(), &sm) == 0;
  if (!have_cubin && !have_meta) return Read::Miss;
  std::string problem;
  auto bytes = std::make_shared<std::string>();
  try {
    if (!have_cubin) throw CacheError("missing .cubin");
    if (!have_meta) throw CacheError("missing .json metadata");
    if (st.st_uid != ::geteuid() || sm.st_uid != ::geteuid())
      throw CacheError(fmt::format("owned by uid {}, not us (uid {})", st.st_uid != ::geteuid() ? st.st_uid : sm.st_uid,
                                   ::geteuid()));
    std::string meta_text;
    if (!read_file(meta_path, &meta_text) || !read_file(cubin_path, bytes.get()))
      throw CacheError("unreadable: " + errno_text(errno));
    json meta = json::parse(meta_text, nullptr, false);
    if (meta.is_discarded() || !meta.is_object()) throw CacheError("metadata is not valid JSON");
    if (meta_string(meta, "key") != key) throw CacheError("metadata key differs from the file name");
    if (meta_string(meta, "target") != target)
      throw CacheError(fmt::format("metadata target '{}' differs from the directory's {}", meta_string(meta, "target"), target));
    const std::string want = meta_string(meta, "cubin_sha256");
    const std::string got = sha256_hex(*bytes);
    if (want != got)
      throw CacheError(fmt::format("content hash mismatch ({} bytes, SHA-256 {}..., metadata says {}...)",
                                   bytes->size(), got.substr(0, 12), want.substr(0, 12)));
    verify_cubin(*bytes, target, cubin_path);
  } catch (const Error& e) {
    if (!quiet) warn(fmt::format("kernel cache entry {} rejected: {}; rebuilding", cubin_path, e.what()));
    return Read::Rejected;
  }
  *out = std::move(bytes);
  return Read::Hit;
}

void KernelCache::publish(const std::string& dir, const std::string& key, const CacheKeyInputs& in,
                          const CompileRequest& req, const CompileResult& res) {
  json meta;
  meta["format"] = 1;
  meta["key"] = key;
  meta["target"] = in.target;
  meta["source"] = req.source;
  meta["entry"] = in.entry;
  meta["defines"] = json::array();
  for (auto& [k, v] : in.defines) meta["defines"].push_back({k, v});
  meta["options"] = in.options;
  meta["nvrtc"] = in.nvrtc_version;
  meta["moeforge"] = in.moeforge_version;
  meta["sources"] = json::array();
  for (auto& [p, t] : in.sources) meta["sources"].push_back({{"path", p}, {"sha256", sha256_hex(t)}});
  meta["cubin_sha256"] = sha256_hex(res.cubin);
  meta["cubin_bytes"] = res.cubin.size();
  meta["compile_ms"] = std::round(res.ms * 10) / 10;
  meta["created"] = iso8601_utc_now();
  std::string err = write_atomic(dir, key + ".cubin", res.cubin);
  if (err.empty()) err = write_atomic(dir, key + ".json", meta.dump(2) + "\n");
  if (err.empty()) fsync_dir(dir);
  if (!err.empty()) warn(fmt::format("kernel cache could not publish {}/{} ({}); kept in memory", dir, key, err));
}

CacheResult KernelCache::get(const CompileRequest& req) {
  CacheKeyInputs in = key_inputs(req);
  CacheResult out;
  out.key = cache_key(in);
  std::lock_guard key_lock(key_mutex(out.key));  // one builder per key in this process
  {
    std::lock_guard lock(m_);
    auto it = memory_.find(out.key);
    if (it != memory_.end()) {
      out.cubin = it->second;
      out.from = CacheResult::From::Memory;
      out.path = "<memory>";
      return out;
    }
  }
  std::string dir;
  const Mode mode = prepare_dir(req.target, &dir);
  auto remember = [&](std::shared_ptr<const std::string> bytes) {
    std::lock_guard lock(m_);
    memory_[out.key] = bytes;
    out.cubin = std::move(bytes);
  };
  std::shared_ptr<const std::string> bytes;
  Read first = Read::Miss;
  if (mode != Mode::Memory && (first = read_verified(dir, out.key, req.target, &bytes)) == Read::Hit) {
    out.from = CacheResult::From::Disk;
    out.path = dir + "/" + out.key + ".cubin";
    remember(std::move(bytes));
    return out;
  }
  int lock_fd = -1;
  if (mode == Mode::Disk) {
    const std::string lock_path = dir + "/" + out.key + ".lock";
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd >= 0) {
      while (::flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
      }
      // Someone may have built it while we waited.
      if (read_verified(dir, out.key, req.target, &bytes, first == Read::Rejected) == Read::Hit) {
        ::close(lock_fd);
        out.from = CacheResult::From::Disk;
        out.path = dir + "/" + out.key + ".cubin";
        remember(std::move(bytes));
        return out;
      }
    }
  }
  CompileResult res;
  try {
    res = compile(req);
  } catch (...) {
    if (lock_fd >= 0) ::close(lock_fd);
    throw;
  }
  {
    std::lock_guard lock(m_);
    ++compiles_;
  }
  out.compile_ms = res.ms;
  out.from = CacheResult::From::Compiled;
  out.path = "<memory>";
  try {
    verify_cubin(res.cubin, req.target, "<fresh NVRTC output>");
  } catch (...) {
    if (lock_fd >= 0) ::close(lock_fd);
    throw;
  }
  if (mode == Mode::Disk) {
    publish(dir, out.key, in, req, res);
    out.path = dir + "/" + out.key + ".cubin";
  }
  if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
  remember(std::make_shared<const std::string>(std::move(res.cubin)));
  return out;
}

std::vector<CacheEntryInfo> KernelCache::list() const {
  std::vector<CacheEntryInfo> out;
  DIR* root = ::opendir(root_.c_str());
  if (!root) return out;
  std::vector<std::string> targets;
  while (dirent* e = ::readdir(root))
    if (std::strncmp(e->d_name, "sm_", 3) == 0) targets.emplace_back(e->d_name);
  ::closedir(root);
  std::sort(targets.begin(), targets.end());
  for (const std::string& t : targets) {
    const std::string dir = root_ + "/" + t;
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> keys;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n[0] != '.' && n.compare(n.size() - 5, 5, ".json") == 0) keys.push_back(n.substr(0, n.size() - 5));
    }
    ::closedir(d);
    std::sort(keys.begin(), keys.end());
    for (const std::string& k : keys) {
      CacheEntryInfo info;
      info.target = t;
      info.key = k;
      info.path = dir + "/" + k + ".cubin";
      std::string meta_text, bytes;
      json meta;
      if (read_file(dir + "/" + k + ".json", &meta_text)) meta = json::parse(meta_text, nullptr, false);
      if (meta.is_object()) {
        info.source = meta_string(meta, "source");
        info.entry = meta_string(meta, "entry");
        info.created = meta_string(meta, "created");
        info.compile_ms = meta_number(meta, "compile_ms");
      }
      try {
        if (!meta.is_object()) throw CacheError("metadata is not valid JSON");
        if (!read_file(info.path, &bytes)) throw CacheError("missing .cubin");
        info.bytes = bytes.size();
        if (meta_string(meta, "cubin_sha256") != sha256_hex(bytes)) throw CacheError("content hash mismatch");
        verify_cubin(bytes, t, info.path);
      } catch (const Error& e) {
        info.problem = e.what();
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

KernelCache& default_cache() {
  static KernelCache& c = *new KernelCache(settings().cache_root);  // immortal
  return c;
}

}  // namespace moeforge::rt
