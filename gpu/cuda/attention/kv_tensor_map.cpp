#include "gpu/cuda/attention/kv_tensor_map.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace actorserve::gpu::cuda {
namespace {

/// The two driver entry points, looked up once through the runtime (no link to libcuda).
struct driver_calls {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  PFN_cuMemGetAddressRange_v3020 range = nullptr;
};

const driver_calls& driver() {
  static const driver_calls d = [] {
    driver_calls c;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      c.encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      c.range = reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(fn);
    (void)cudaGetLastError();
    return c;
  }();
  return d;
}

}  // namespace

bool make_kv_tensor_map(const void* cache, int num_kv_heads, int head_dim, int box_rows, CUtensorMap* out) {
  const driver_calls& d = driver();
  if (!d.encode || !d.range || !cache || num_kv_heads <= 0 || head_dim % kv_box_cols != 0 || box_rows < 1 ||
      box_rows > 256)
    return false;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const auto ptr = reinterpret_cast<CUdeviceptr>(cache);
  if (d.range(&base, &bytes, ptr) != CUDA_SUCCESS) return false;
  const uint64_t cols = uint64_t(num_kv_heads) * head_dim, row_bytes = cols * 2;
  const uint64_t rows = (base + bytes - ptr) / row_bytes;
  if (rows == 0 || rows > (uint64_t(1) << 31) || row_bytes % 16 != 0 || ptr % 16 != 0) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {kv_box_cols, cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return d.encode(out, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(cache), dims, strides, box, elem_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool make_kv_tensor_maps(const void* k_cache, const void* v_cache, int num_kv_heads, int head_dim, int block_size,
                         kv_tensor_maps* out) {
  const int rows = kv_box_rows(block_size);
  if (rows == 0 || !make_kv_tensor_map(k_cache, num_kv_heads, head_dim, rows, &out->k) ||
      !make_kv_tensor_map(v_cache, num_kv_heads, head_dim, rows, &out->v))
    return false;
  out->box_rows = rows;
  return true;
}

}  // namespace actorserve::gpu::cuda
