#pragma once
/// NCCL, opened with dlopen when a tensor-parallel CUDA group first needs it: the build does not
/// link NCCL (nccl.h gives the types only), so one binary runs where NCCL is installed with CUDA,
/// only inside a Python package's directory (--nccl-library PATH), or not at all (then only the
/// one-GPU paths run).
#include <nccl.h>

#include <string>

#include "config/error.hpp"

namespace actorserve::gpu::cuda {

/// The NCCL functions the collectives call, typed from nccl.h's declarations.
struct nccl_functions {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitAll) comm_init_all = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclGetErrorString) get_error_string = nullptr;
};

/// NCCL's version, decoded from ncclGetVersion's code.
struct nccl_version {
  int major = 0, minor = 0, patch = 0;
  std::string to_string() const;
};

/// The oldest NCCL the collectives take: 2.10 (bf16 and the async-error and abort calls).
inline constexpr nccl_version min_nccl_version{2, 10, 0};

/// A loaded NCCL: its path, version and functions. Loaded once per path and kept for the process
/// (see load_nccl), so a reference stays valid.
struct nccl_library {
  std::string path;  ///< what dlopen was given ("libnccl.so.2" when the dynamic loader found it)
  nccl_version version;
  nccl_functions fn;
  /// "ncclAllReduce: unhandled cuda error (...)" for a failed NCCL call; empty on success.
  std::string describe(ncclResult_t r, const char* what) const;
  /// A failed NCCL call as the project's error (error_code::internal); success as {}.
  status check(ncclResult_t r, const char* what) const;
};

/// Decodes ncclGetVersion's code (2.8 and older: X*1000+Y*100+Z; newer: X*10000+Y*100+Z).
nccl_version decode_nccl_version(int code);

/// Opens NCCL: `explicit_path` (--nccl-library) when not empty, and nothing else then; otherwise
/// libnccl.so.2 through the dynamic loader, then libnccl.so.2 beside the loaded CUDA runtime,
/// then /usr/local/cuda/lib64. Refused with a message that names every path tried, a missing
/// symbol or the version found, and --nccl-library. Thread-safe; each path is opened once and
/// stays loaded for the process: NCCL keeps threads and exit handlers that unloading it would
/// pull from under them (PyTorch and vLLM never unload it either).
result<const nccl_library*> load_nccl(const std::string& explicit_path);

}  // namespace actorserve::gpu::cuda
