// Loads libcuda.so.1 at run time and resolves MOEFORGE_DRIVER_FUNCTIONS.
//
// Resolution: dlsym of the name cuda.h maps each function to ("cuMemAlloc" ->
// "cuMemAlloc_v2"), whose ABI is the prototype we compiled against; the
// versioned cuGetProcAddress only as a fallback (resolve() says why).
#include "runtime/driver.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <vector>

#include "moeforge/errors.hpp"
#include "runtime/breadcrumbs.hpp"

namespace moeforge::rt {
namespace {

#define MOEFORGE_STR_EXPANDED(x) MOEFORGE_STR_RAW(x)
#define MOEFORGE_STR_RAW(x) #x

struct Loaded {
  Driver driver;
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded L;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    L.why = e ? e : "libcuda.so.1: cannot be opened";
    return L;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  std::vector<std::string> missing;
  // The exported symbol cuda.h maps a name to ("cuMemAlloc" -> "cuMemAlloc_v2")
  // is exactly the ABI the header declares, so dlsym of that name comes first.
  // cuGetProcAddress(name, CUDA_VERSION) is NOT equivalent: it returns the newest
  // ABI of that name for the version, e.g. cuCtxSynchronize_v2(CUcontext) for
  // "cuCtxSynchronize" under CUDA 13, whose header still declares
  // cuCtxSynchronize(void) — calling it through the old signature passes a
  // garbage context (seen on the H200: CUDA_ERROR_CONTEXT_IS_DESTROYED, 709).
  // It is only the fallback for drivers that do not export the mapped name.
  auto resolve = [&](const char* base, const char* mapped) -> void* {
    void* p = dlsym(h, mapped);
    if (!p) p = dlsym(h, base);
    if (!p && get_proc) {
      CUdriverProcAddressQueryResult status{};
      if (get_proc(base, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS)
        p = nullptr;
    }
    return p;
  };
  // #name is the unexpanded base name; MOEFORGE_STR_EXPANDED(name) the cuda.h mapping.
#define MOEFORGE_RESOLVE(name)                                                                  \
  L.driver.name = reinterpret_cast<decltype(L.driver.name)>(resolve(#name, MOEFORGE_STR_EXPANDED(name))); \
  if (!L.driver.name) missing.push_back(#name);
  MOEFORGE_DRIVER_FUNCTIONS(MOEFORGE_RESOLVE)
#undef MOEFORGE_RESOLVE
  if (!missing.empty()) {
    std::string list;
    for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    L.why = "libcuda.so.1 lacks " + list + " (driver too old for CUDA " + std::to_string(CUDA_VERSION / 1000) +
            " headers)";
    return L;
  }
  CUresult r = L.driver.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* n = nullptr;
    const char* s = nullptr;
    L.driver.cuGetErrorName(r, &n);
    L.driver.cuGetErrorString(r, &s);
    L.why = fmt::format("cuInit: {} ({}): {}", n ? n : "?", int(r), s ? s : "");
    return L;
  }
  L.driver.cuDriverGetVersion(&L.driver.version);
  L.ok = true;
  return L;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded& L = *new Loaded;  // immortal (see use_device)
  std::call_once(once, [] { L = load(); });
  return L;
}

}  // namespace

const Driver* driver_or_null(std::string* why) {
  const Loaded& L = loaded();
  if (L.ok) return &L.driver;
  if (why) *why = L.why;
  return nullptr;
}

const Driver& driver() {
  std::string why;
  if (const Driver* d = driver_or_null(&why)) return *d;
  throw DeviceError("no CUDA driver: " + why);
}

std::string error_name(CUresult r) {
  const char* n = nullptr;
  if (const Driver* d = driver_or_null(); d && d->cuGetErrorName(r, &n) == CUDA_SUCCESS && n) return n;
  return "CUDA_ERROR_" + std::to_string(int(r));
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) {
    note_driver_success(what);
    return;
  }
  const char* s = nullptr;
  if (const Driver* d = driver_or_null()) d->cuGetErrorString(r, &s);
  std::string msg = fmt::format("{}: {} ({}): {}", what, error_name(r), int(r), s ? s : "unknown error");
  // A sticky error poisons the context: name the first stage launched since the
  // last successful check, and make later calls fail fast (breadcrumbs.cpp).
  if (is_sticky_error(r)) msg = note_context_lost(int(r), msg);
  throw DeviceError(msg, int(r));
}

void use_device(int ordinal) {
  // Immortal: layers and buffers held in other statics are destroyed at exit,
  // after function-local statics constructed later; they still call use_device.
  static std::mutex& m = *new std::mutex;
  static std::vector<CUcontext>& contexts = *new std::vector<CUcontext>;
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  {
    std::lock_guard lock(m);
    if (ordinal < 0) throw InvalidArgument("device", fmt::format("must be >= 0, got {}", ordinal));
    if (size_t(ordinal) >= contexts.size()) contexts.resize(ordinal + 1, nullptr);
    if (!contexts[ordinal]) {
      int n = 0;
      check(d.cuDeviceGetCount(&n), "cuDeviceGetCount");
      if (ordinal >= n)
        throw InvalidArgument("device", fmt::format("ordinal {} out of range ({} CUDA devices)", ordinal, n));
      CUdevice dev;
      check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
      check(d.cuDevicePrimaryCtxRetain(&contexts[ordinal], dev), "cuDevicePrimaryCtxRetain");
    }
    ctx = contexts[ordinal];
  }
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

}  // namespace moeforge::rt
