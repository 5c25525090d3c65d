// The kernel cache: compile request -> verified cubin bytes, on disk and in memory.
//
// Lifecycle contract
//  * Key. SHA-256 over everything that shapes the binary: the source text and the
//    text of every embedded file it includes (transitively), the entry name, the
//    complete NVRTC option list (exact target, -D defines, extras), the defines,
//    the NVRTC version, the exact target and the moeforge version. Two requests
//    with equal keys produce the same bytes; change any input and the key changes.
//  * Layout. <root>/<target>/<key>.cubin, <key>.json (key inputs, target, SHA-256
//    of the cubin, compile ms, created), <key>.lock. Root: $MOEFORGE_CACHE_DIR, else
//    $XDG_CACHE_HOME/moeforge, else ~/.cache/moeforge; directories created 0700.
//  * A miss never throws: it compiles (CompileError only if the source does not compile).
//  * Build is idempotent and publication atomic: tmp file in the same directory,
//    fsync, rename, fsync the directory; the .json is published after the .cubin.
//  * Concurrent builders (threads or processes) take flock(<key>.lock) and re-check
//    after taking it, so N racing processes compile once and load the same bytes.
//  * Every read is verified: metadata parses and matches the key and target, the
//    cubin's SHA-256 matches, the ELF is well-formed and built for exactly this
//    target, the files are ours. A failing entry is reported in one warning line and
//    rebuilt — never loaded.
//  * Refusal: a root or target directory owned by another user, or writable by
//    group/others (unless sticky and ours), is refused with CacheError naming the
//    directory, its mode and owner. That is the only way a read throws CacheError.
//  * Degradation: a root that cannot be created or written falls back, with one
//    warning, to reading verified entries that are there and keeping new builds in
//    memory only.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/compiler.hpp"

namespace moeforge::rt {

std::string sha256_hex(std::string_view bytes);

struct CacheKeyInputs {
  std::vector<std::pair<std::string, std::string>> sources;  // (path, text): source, then includes
  std::string entry;
  std::vector<std::string> options;
  std::vector<std::pair<std::string, std::string>> defines;
  std::string nvrtc_version;
  std::string target;
  std::string moeforge_version;
};
// The inputs for a request, as this build would compile it.
CacheKeyInputs key_inputs(const CompileRequest& req);
// SHA-256 hex over an unambiguous (length-prefixed) encoding of the inputs.
std::string cache_key(const CacheKeyInputs& in);

struct CacheResult {
  enum class From { Memory, Disk, Compiled };
  std::string key;
  std::shared_ptr<const std::string> cubin;
  From from = From::Memory;
  std::string path;  // the .cubin file, or "<memory>"
  double compile_ms = 0;
};

struct CacheEntryInfo {
  std::string target, key, source, entry, path, created;
  size_t bytes = 0;
  double compile_ms = 0;
  std::string problem;  // "" when the entry verifies
};

class KernelCache {
 public:
  explicit KernelCache(std::string root);

  // The verified cubin for req: memory, else disk, else compiled and published.
  CacheResult get(const CompileRequest& req);

  const std::string& root() const { return root_; }
  // "disk", "read-only" (reads verified entries, keeps new builds in memory) or "memory".
  std::string mode() const;
  // Entries under the root, grouped by target directory, with their verification result.
  std::vector<CacheEntryInfo> list() const;
  // Number of compiles this object ran (tests).
  int compiles() const;

  // "" if dir is safe to load from; else why not (names dir, mode and owner).
  static std::string unsafe_reason(const std::string& dir);

 private:
  enum class Mode { Unknown, Disk, ReadOnly, Memory };
  Mode prepare_dir(const std::string& target, std::string* dir);
  enum class Read { Hit, Miss, Rejected };
  // Rejected entries are reported in one warning line unless quiet.
  Read read_verified(const std::string& dir, const std::string& key, const std::string& target,
                     std::shared_ptr<const std::string>* out, bool quiet = false);
  void publish(const std::string& dir, const std::string& key, const CacheKeyInputs& in,
               const CompileRequest& req, const CompileResult& res);
  std::mutex& key_mutex(const std::string& key);

  std::string root_;
  mutable std::mutex m_;
  std::unordered_map<std::string, std::shared_ptr<const std::string>> memory_;
  std::unordered_map<std::string, std::unique_ptr<std::mutex>> key_mutexes_;
  std::unordered_map<std::string, Mode> dir_modes_;  // per target
  bool warned_fallback_ = false;
  int compiles_ = 0;
};

// The process's cache at settings().cache_root.
KernelCache& default_cache();

}  // namespace moeforge::rt
