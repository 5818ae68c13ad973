#include "gpu/cuda/parallel/nccl_library.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace actorserve::gpu::cuda {

namespace {

constexpr const char* nccl_soname = "libnccl.so.2";
constexpr const char* cuda_lib64 = "/usr/local/cuda/lib64";
constexpr const char* flag_hint = "give NCCL's path with --nccl-library PATH (e.g. the nvidia-nccl-cu12 Python "
                                  "package's nvidia/nccl/lib/libnccl.so.2)";

/// The directory of the loaded CUDA runtime library, or "" where it is linked statically or
/// cannot be found: NCCL installed with CUDA sits beside it.
std::string cuda_runtime_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaRuntimeGetVersion), &info) == 0 || info.dli_fname == nullptr)
    return {};
  const std::string file = info.dli_fname;
  const auto slash = file.rfind('/');
  if (slash == std::string::npos || file.find("libcudart") == std::string::npos) return {};
  return file.substr(0, slash);
}

/// The paths to dlopen, in order: the explicit one alone, else the loader's search and the
/// CUDA installation's directories (without repeats).
std::vector<std::string> candidate_paths(const std::string& explicit_path) {
  if (!explicit_path.empty()) return {explicit_path};
  std::vector<std::string> paths{nccl_soname};
  for (const std::string& dir : {cuda_runtime_dir(), std::string(cuda_lib64)}) {
    if (dir.empty()) continue;
    std::string path = dir + "/" + nccl_soname;
    bool seen = false;
    for (const auto& p : paths) seen = seen || p == path;
    if (!seen) paths.push_back(std::move(path));
  }
  return paths;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

/// Resolves every function of `fn` from `handle`; the error names the first missing symbol.
status resolve(void* handle, const std::string& path, nccl_functions& fn) {
  status st;
  const auto bind = [&](auto& slot, const char* name) {
    if (!st) return;
    dlerror();
    void* sym = dlsym(handle, name);
    if (sym == nullptr) {
      st = make_error(error_code::unsupported,
                      fmt::format("{} lacks the symbol {}: not an NCCL library; {}", path, name,
                                  flag_hint));
      return;
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(sym);
  };
  bind(fn.get_version, "ncclGetVersion");
  bind(fn.get_unique_id, "ncclGetUniqueId");
  bind(fn.comm_init_all, "ncclCommInitAll");
  bind(fn.comm_init_rank, "ncclCommInitRank");
  bind(fn.all_reduce, "ncclAllReduce");
  bind(fn.all_gather, "ncclAllGather");
  bind(fn.broadcast, "ncclBroadcast");
  bind(fn.group_start, "ncclGroupStart");
  bind(fn.group_end, "ncclGroupEnd");
  bind(fn.comm_abort, "ncclCommAbort");
  bind(fn.comm_destroy, "ncclCommDestroy");
  bind(fn.comm_get_async_error, "ncclCommGetAsyncError");
  bind(fn.get_error_string, "ncclGetErrorString");
  return st;
}

bool older(const nccl_version& a, const nccl_version& b) {
  if (a.major != b.major) return a.major < b.major;
  if (a.minor != b.minor) return a.minor < b.minor;
  return a.patch < b.patch;
}

/// dlopens `path` and checks its symbols and version; the handle is closed again when refused.
result<std::unique_ptr<nccl_library>> open_one(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return make_error(error_code::not_found, fmt::format("{}: {}", path, dl_error()));
  auto lib = std::make_unique<nccl_library>();
  lib->path = path;
  if (auto st = resolve(handle, path, lib->fn); !st) {
    dlclose(handle);
    return st.err();
  }
  int code = 0;
  if (auto r = lib->fn.get_version(&code); r != ncclSuccess) {
    const std::string why = lib->describe(r, "ncclGetVersion");
    dlclose(handle);
    return make_error(error_code::unsupported, fmt::format("{}: {}; {}", path, why, flag_hint));
  }
  lib->version = decode_nccl_version(code);
  if (lib->version.major != min_nccl_version.major || older(lib->version, min_nccl_version)) {
    dlclose(handle);
    return make_error(error_code::unsupported,
                      fmt::format("{} is NCCL {}; the collectives need NCCL 2.x from {} on; {}", path,
                                  lib->version.to_string(), min_nccl_version.to_string(), flag_hint));
  }
  // NOTE: `handle` stays open for the process (load_nccl's comment says why).
  return lib;
}

}  // namespace

std::string nccl_version::to_string() const { return fmt::format("{}.{}.{}", major, minor, patch); }

nccl_version decode_nccl_version(int code) {
  if (code >= 10000) return {code / 10000, (code / 100) % 100, code % 100};
  return {code / 1000, (code / 100) % 10, code % 100};
}

std::string nccl_library::describe(ncclResult_t r, const char* what) const {
  if (r == ncclSuccess) return {};
  const char* text = fn.get_error_string ? fn.get_error_string(r) : nullptr;
  return fmt::format("{}: NCCL error {} ({})", what, static_cast<int>(r), text ? text : "no description");
}

status nccl_library::check(ncclResult_t r, const char* what) const {
  if (r == ncclSuccess) return {};
  return make_error(error_code::internal, describe(r, what));
}

result<const nccl_library*> load_nccl(const std::string& explicit_path) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<nccl_library>> loaded;  // by explicit_path ("" = searched)
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(explicit_path); it != loaded.end()) return it->second.get();
  std::string tried;
  for (const std::string& path : candidate_paths(explicit_path)) {
    auto lib = open_one(path);
    if (lib) return (loaded[explicit_path] = std::move(lib.value())).get();
    // A library that opens but is refused (symbols, version) ends the search: its message says why.
    if (lib.err().code != error_code::not_found) return lib.err();
    tried += (tried.empty() ? "" : "; ") + lib.err().message;
  }
  if (!explicit_path.empty())
    return make_error(error_code::not_found, fmt::format("--nccl-library: cannot open {}", tried));
  return make_error(error_code::not_found,
                    fmt::format("NCCL not found (tensor parallelism over GPUs needs it): tried {}; {}", tried,
                                flag_hint));
}

}  // namespace actorserve::gpu::cuda
