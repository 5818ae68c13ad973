// Decode kernels of the two attention backends, both on tensor cores (mma.sync m16n8k16, fp32
// accumulation) with the keys as the MMAs' M dimension and the query heads of one GQA group (at
// most 8) as N (warp_keys.cuh), so each KV head is read once for all of its query heads:
//  - flash-decoding: the CTA streams its KV range in 64-token tiles through a 3-stage pipeline;
//    each of the 4 warps takes 16 keys of every tile. The tiles come by TMA (one thread issues
//    a tile's boxes, an mbarrier per stage counts their bytes) where blocks are a multiple of
//    64 tokens, else (and as decode_kernel::cp_async) by every thread's cp.async copies.
//  - vLLM-style: each warp walks its own 16-token blocks (u = warp, warp + 4, ...) with a private
//    3-stage cp.async pipeline and no CTA barrier in the loop (vLLM's warp-per-block walk).
// A sliding window (attn_launch::window) starts an item at the tile holding its first key (the
// plan's kv_begin) and masks the keys of that tile below it.
// Over the FP8 cache (attn_launch::kv_fp8) flash-decoding takes the cp.async kernel with E4M3
// byte tiles, which the warps convert in registers as they read them (warp_keys.cuh, e4m3_tile).
// Both end with a merge of the 4 warps' (max, sum, output) and either write the output or a
// normalised partial plus its log-sum-exp; the CTA finishing the last piece of a split
// (sequence, KV head) merges its pieces (decode_common.cuh), unless the backend runs the
// separate merge kernel (combine_kernel.cu).
// Programmatic dependent launch: a decode kernel may start while the step's rope_kv_write still
// runs; it reads its work item and block table and issues the copies of every leading K/V tile
// older than the newest token before it waits for that kernel, then reads Q.
#include <cmath>
#include <type_traits>

#include "gpu/cuda/attention/decode_common.cuh"
#include "gpu/cuda/attention/fp8_tiles.cuh"
#include "gpu/cuda/attention/kv_tensor_map.hpp"
#include "gpu/cuda/attention/prefill_wgmma.cuh"
#include "gpu/cuda/attention/warp_keys.cuh"
#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int kThreads = 128, kWarps = 4;

/// Dynamic shared memory of the flash-decoding kernels: kSt stages of K and V tiles of
/// kElemBytes a cache element (2; the FP8 cache 1), the 16-bit Q tile.
template <int D, int kSt = fd_stages, int kElemBytes = 2>
constexpr int fd_smem_bytes() { return kSt * 2 * fd_kv_tile * D * kElemBytes + 16 * D * 2; }

/// Stages of the FP8-cache flash-decoding kernel: its tiles are half the bytes of 16-bit ones, so
/// 5 stages keep as many bytes in flight per CTA (4 tiles of 16 KiB at head dim 128) as the
/// 16-bit cp.async kernel's 3 (2 of 32 KiB), at the same occupancy (84 KiB: 2 CTAs per SM).
constexpr int fd8_stages = 5;

/// Whether the query rows of a KV group fit the decode kernels' warp tile (warp_keys: the keys as
/// the MMAs' M dimension, at most 8 query rows as N; decode items hold one token, and the
/// tensor-core backends take GQA groups up to 8).
bool rows_fit(const attn_launch& a) { return a.num_heads <= warp_keys_max_rows * a.num_kv_heads; }

/// Shared-memory floats the merge of split pieces may use for their lse values.
constexpr int merge_cap(int smem_bytes) { return smem_bytes / 4; }

/// One decode item with its K/V tiles copied by every thread's cp.async through kSt stages.
/// kFp8 (attn_launch::kv_fp8): the tiles are E4M3 bytes (half the bytes a key), which warp_keys
/// reads from shared memory and converts to T in registers (e4m3_tile, exact). k_scale is folded
/// into the queries' scale (q x scale x k_scale x log2(e) rounded to T once, as the 16-bit
/// cache's queries are rounded), and v_scale multiplies the fp32 output accumulator before the
/// warps' merge: scores and output are those of the dequantized cache (code x scale) up to fp32
/// rounding, with no bf16 rounding of code x scale.
template <class T, int D, int kSt, bool kFp8>
__device__ __forceinline__ void fd_decode_item(const attn_launch& a, const attn_item& it, uint4* smem_raw) {
  using E = std::conditional_t<kFp8, uint8_t, uint16_t>;  // one cache element
  using Kv = std::conditional_t<kFp8, e4m3_tile<D>, row_tile<D>>;
  constexpr int kTile = fd_kv_tile, kWarpKeys = kTile / kWarps, kTileBytes = kTile * D * int(sizeof(E));
  constexpr int kSmem = fd_smem_bytes<D, kSt, int(sizeof(E))>();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const uint32_t s0 = smem_addr(smem_raw), q_s = s0 + kSt * 2 * kTileBytes;
  const int32_t* bt = a.block_tables + it.bt_offset;
  const auto* kc = static_cast<const E*>(a.k_cache);
  const auto* vc = static_cast<const E*>(a.v_cache);
  const int ntiles = (it.kv_end - it.kv_begin + kTile - 1) / kTile;
  const int kv_lo = window_first_key(it.context_len - 1, a.window);  // the plan starts at its tile
  const auto load = [&](int tile, uint32_t dst) {
    load_kv_tile<D, kTile, kThreads>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads, it.kv_begin + tile * kTile,
                                     it.kv_end, dst, dst + kTileBytes, tid);
  };
  auto issue = [&](int s) {
    if (s < ntiles) load(s, s0 + s * 2 * kTileBytes);
    cp_async_commit();
  };
  // Leading tiles older than the newest key before the dependency wait, Q right after it (its
  // loads do not queue behind the rest of the copies), the remaining prologue tiles next.
  int s = 0;
  for (; s < kSt - 1 && s < ntiles && rows_precede_newest(a, it.kv_begin + s * kTile, kTile, it.kv_end, it.context_len);
       ++s)
    issue(s);
  wait_for_previous_kernel();
  q_prefetch<T, D, kThreads> qp;
  qp.load(a, it.q_begin, it.kv_head, G * it.q_len, tid);
  for (; s < kSt - 1; ++s) issue(s);
  if constexpr (kFp8)
    qp.store_scaled(a.scale * 1.4426950408889634f * a.k_scale, q_s, tid);
  else
    qp.store(a, q_s, tid);
  __syncthreads();
  warp_keys<T, D, Kv> w;
  w.init(q_s, lane);
  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<kSt - 2>();
    __syncthreads();
    const int nt = t + kSt - 1;
    if (nt < ntiles) load(nt, s0 + (nt % kSt) * 2 * kTileBytes);
    cp_async_commit();
    const uint32_t k_s = s0 + (t % kSt) * 2 * kTileBytes;
    w.template step<kWarpKeys>(k_s, k_s + kTileBytes, warp * kWarpKeys, it.kv_begin + t * kTile + warp * kWarpKeys,
                               kv_lo, it.kv_end, lane);
  }
  cp_async_wait<0>();
  __syncthreads();
  if constexpr (kFp8) w.scale_rows(a.v_scale, a.v_scale);
  merge_warps_and_store<T, D, kWarps>(a, it, w, reinterpret_cast<float*>(smem_raw), G * it.q_len, tid);
  if (it.partial >= 0 && a.split_counters)
    finish_split<T, D, kThreads>(a, it, reinterpret_cast<float*>(smem_raw), merge_cap(kSmem), tid);
}

/// Decode items [counts[0], counts[0] + counts[2]), grid-strided (a graph's grid is a bound).
template <class T, int D, int kSt, bool kFp8 = false>
__global__ void __launch_bounds__(kThreads) fd_decode_kernel(attn_launch a) {
  allow_dependents();
  extern __shared__ uint4 smem_raw[];
  const int n = a.counts[2];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    if (i != int(blockIdx.x)) __syncthreads();  // the previous item's merge still reads smem
    fd_decode_item<T, D, kSt, kFp8>(a, a.items[a.counts[0] + i], smem_raw);
  }
}

/// Dynamic shared memory of the TMA flash-decoding kernel: 1 KiB alignment slack, the stages,
/// the Q tile, one mbarrier per stage.
template <int D>
constexpr int fd_tma_smem_bytes() { return 1024 + fd_smem_bytes<D>() + 8 * fd_stages; }

/// Flash-decoding with the K/V tiles brought in by TMA: thread 0
/// issues a 64-token tile's K and V as D / 64 boxes each (kv_tensor_map.hpp) into
/// [D / 64][64][64] slabs with the 128-byte swizzle, the mbarrier of its stage counting the
/// bytes, while the other threads only arrive; a tile with rows past kv_end (the tail), and
/// every tile of an item whose blocks or first key are not 64-aligned, comes by cp.async with
/// those rows zero-filled, arriving on the same barrier. `n` counts the CTA's tiles over its
/// items (the stages' barrier phases).
template <class T, int D>
__device__ __forceinline__ void fd_decode_item_tma(const attn_launch& a, const kv_tensor_maps& maps,
                                                   const attn_item& it, uint32_t s0, int& n) {
  constexpr int kSt = fd_stages, kTile = fd_kv_tile, kWarpKeys = kTile / kWarps, kTileBytes = kTile * D * 2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const uint32_t q_s = s0 + kSt * 2 * kTileBytes, bars = q_s + 16 * D * 2;
  const int32_t* bt = a.block_tables + it.bt_offset;
  const int bs = a.block_size, ntiles = (it.kv_end - it.kv_begin + kTile - 1) / kTile;
  const int kv_lo = window_first_key(it.context_len - 1, a.window);  // the plan starts at its tile
  const bool tma = maps.box_rows == kTile && bs % kTile == 0 && it.kv_begin % kTile == 0;
  const auto stage = [&](int t) { return s0 + ((n + t) % kSt) * 2 * kTileBytes; };
  const auto bar = [&](int t) { return bars + 8 * ((n + t) % kSt); };
  const auto issue = [&](int t) {
    if (t >= ntiles) return;
    const int k0 = it.kv_begin + t * kTile;
    if (tma && k0 + kTile <= it.kv_end) {
      if (tid != 0) return wg::mbar_arrive(bar(t));
      // The item carries the block of its first key (set_first_blocks): tile 0's copy waits on
      // the item alone, not on a block-table read after it.
      const int blk = t == 0 && it.first_block >= 0 ? it.first_block : __ldg(bt + k0 / bs);
      const int row = blk * bs + k0 % bs;
      wg::fence_proxy_async();  // the warps' reads of this stage before the copy engine's writes
      wg::mbar_arrive_expect_tx(bar(t), 2 * kTileBytes);
#pragma unroll
      for (int j = 0; j < D / kv_box_cols; ++j) {
        wg::tma_load_2d(stage(t) + j * kTile * 128, &maps.k, it.kv_head * D + j * kv_box_cols, row, bar(t));
        wg::tma_load_2d(stage(t) + kTileBytes + j * kTile * 128, &maps.v, it.kv_head * D + j * kv_box_cols, row, bar(t));
      }
      return;
    }
    const auto* kc = static_cast<const uint16_t*>(a.k_cache);
    const auto* vc = static_cast<const uint16_t*>(a.v_cache);
    wg::load_rows<D, kTile, kThreads>(kc, bt, bs, it.kv_head, a.num_kv_heads, k0, it.kv_end, stage(t), tid);
    wg::load_rows<D, kTile, kThreads>(vc, bt, bs, it.kv_head, a.num_kv_heads, k0, it.kv_end, stage(t) + kTileBytes,
                                      tid);
    wg::mbar_arrive_cp_async(bar(t));
  };
  // As fd_decode_item: tiles older than the newest key before the dependency wait, then Q.
  int s = 0;
  for (; s < kSt - 1 && s < ntiles && rows_precede_newest(a, it.kv_begin + s * kTile, kTile, it.kv_end, it.context_len);
       ++s)
    issue(s);
  wait_for_previous_kernel();
  q_prefetch<T, D, kThreads> qp;
  qp.load(a, it.q_begin, it.kv_head, G * it.q_len, tid);
  for (; s < kSt - 1; ++s) issue(s);
  qp.store(a, q_s, tid);
  __syncthreads();
  warp_keys<T, D, slab_tile<kTile>> w;
  w.init(q_s, lane);
  for (int t = 0; t < ntiles; ++t) {
    // Every warp is past tile t - 1, so its stage takes tile t + kSt - 1 now, before the wait for
    // tile t: kSt tiles in flight while the CTA waits, not kSt - 1.
    if (t > 0) __syncthreads();
    issue(t + kSt - 1);
    wg::mbar_wait(bar(t), uint32_t(((n + t) / kSt) & 1));
    const uint32_t k_s = stage(t);
    w.template step<kWarpKeys>(k_s, k_s + kTileBytes, warp * kWarpKeys, it.kv_begin + t * kTile + warp * kWarpKeys,
                               kv_lo, it.kv_end, lane);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  n += ntiles;
  float* scratch = reinterpret_cast<float*>(__cvta_shared_to_generic(s0));  // below the Q tile and barriers
  merge_warps_and_store<T, D, kWarps>(a, it, w, scratch, G * it.q_len, tid);
  if (it.partial >= 0 && a.split_counters) finish_split<T, D, kThreads>(a, it, scratch, merge_cap(kSt * 2 * kTileBytes), tid);
}

/// Decode items [counts[0], counts[0] + counts[2]), grid-strided, over TMA (fd_decode_item_tma).
/// TMA and mbarrier transaction counts need sm_90: for older targets the kernel traps, and the
/// host selects it only on compute capability 9.x (cuda_tuning_for).
template <class T, int D>
__global__ void __launch_bounds__(kThreads) fd_decode_tma_kernel(attn_launch a, const __grid_constant__ kv_tensor_maps maps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  if (threadIdx.x == 0) {
    dev::prefetch_tensor_map(&maps.k);  // the copy engine's first use of them is not a cold miss
    dev::prefetch_tensor_map(&maps.v);
  }
  allow_dependents();
  extern __shared__ uint4 smem_raw[];
  const uint32_t s0 = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t bars = s0 + fd_smem_bytes<D>();
  if (threadIdx.x == 0) {
    for (int st = 0; st < fd_stages; ++st) wg::mbar_init(bars + 8 * st, kThreads);
    wg::fence_mbarrier_init();
  }
  __syncthreads();
  const int items = a.counts[2];
  const attn_item* list = a.items + a.counts[0];
  int n = 0;
  // Items are read into registers, the next one while this one streams: at an item boundary
  // the first copy of the next waits on no load.
  attn_item it{};
  if (int(blockIdx.x) < items) it = list[blockIdx.x];
  for (int i = blockIdx.x; i < items; i += gridDim.x) {
    attn_item next{};
    if (i + int(gridDim.x) < items) next = list[i + gridDim.x];
    if (i != int(blockIdx.x)) __syncthreads();  // the previous item's merge still reads smem
    fd_decode_item_tma<T, D>(a, maps, it, s0, n);
    it = next;
  }
#endif
}

template <int D, int kSt = fd_stages>
constexpr int vllm_smem_bytes() { return kWarps * kSt * 2 * vllm_warp_tokens * D * 2 + 16 * D * 2; }

template <class T, int D, int kSt>
__device__ __forceinline__ void vllm_decode_item(const attn_launch& a, const attn_item& it, uint4* smem_raw) {
  constexpr int kU = vllm_warp_tokens, kUnitBytes = kU * D * 2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const uint32_t s0 = smem_addr(smem_raw), q_s = s0 + kWarps * kSt * 2 * kUnitBytes;
  const uint32_t my = s0 + warp * kSt * 2 * kUnitBytes;  // this warp's stages
  const int32_t* bt = a.block_tables + it.bt_offset;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  const int units = (it.kv_end - it.kv_begin + kU - 1) / kU;
  const int kv_lo = window_first_key(it.context_len - 1, a.window);  // the plan starts at its tile
  const int mine = units > warp ? (units - warp + kWarps - 1) / kWarps : 0;
  auto issue = [&](int s) {
    if (s < mine)
      load_kv_tile<D, kU, 32>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                              it.kv_begin + (warp + s * kWarps) * kU, it.kv_end, my + s * 2 * kUnitBytes,
                              my + s * 2 * kUnitBytes + kUnitBytes, lane);
    cp_async_commit();
  };
  // As in the flash-decoding kernel: this warp's blocks older than the newest key, the
  // dependency wait, Q, the rest of the prologue.
  int s = 0;
  for (; s < kSt - 1 && s < mine &&
         rows_precede_newest(a, it.kv_begin + (warp + s * kWarps) * kU, kU, it.kv_end, it.context_len);
       ++s)
    issue(s);
  wait_for_previous_kernel();
  q_prefetch<T, D, kThreads> qp;
  qp.load(a, it.q_begin, it.kv_head, G * it.q_len, tid);
  for (; s < kSt - 1; ++s) issue(s);
  qp.store(a, q_s, tid);
  __syncthreads();
  warp_keys<T, D, row_tile<D>> w;
  w.init(q_s, lane);
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<kSt - 2>();
    __syncwarp();
    const int ni = i + kSt - 1;
    if (ni < mine) {
      const uint32_t st = my + (ni % kSt) * 2 * kUnitBytes;
      load_kv_tile<D, kU, 32>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                              it.kv_begin + (warp + ni * kWarps) * kU, it.kv_end, st, st + kUnitBytes, lane);
    }
    cp_async_commit();
    const uint32_t k_s = my + (i % kSt) * 2 * kUnitBytes;
    w.template step<kU>(k_s, k_s + kUnitBytes, 0, it.kv_begin + (warp + i * kWarps) * kU, kv_lo, it.kv_end, lane);
  }
  cp_async_wait<0>();
  __syncthreads();
  merge_warps_and_store<T, D, kWarps>(a, it, w, reinterpret_cast<float*>(smem_raw), G * it.q_len, tid);
  if (it.partial >= 0 && a.split_counters)
    finish_split<T, D, kThreads>(a, it, reinterpret_cast<float*>(smem_raw), merge_cap(vllm_smem_bytes<D, kSt>()), tid);
}

/// Decode items [counts[0], counts[0] + counts[2]), grid-strided (a graph's grid is a bound).
template <class T, int D, int kSt>
__global__ void __launch_bounds__(kThreads) vllm_decode_kernel(attn_launch a) {
  allow_dependents();
  extern __shared__ uint4 smem_raw[];
  const int n = a.counts[2];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    if (i != int(blockIdx.x)) __syncthreads();  // the previous item's merge still reads smem
    vllm_decode_item<T, D, kSt>(a, a.items[a.counts[0] + i], smem_raw);
  }
}

template <class K>
int configure(K kernel, int smem) {
  return int(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

/// Launches a decode kernel as a programmatic dependent of the previous kernel when
/// programmatic_launch() is on (the kernels wait before they read what that kernel writes).
int launch_decode(void (*kernel)(attn_launch), int smem, const attn_launch& a, cudaStream_t s) {
  if (a.decode_grid <= 0) return 0;
  return int(dev::launch_pdl_smem(kernel, dim3(a.decode_grid), dim3(kThreads), size_t(smem), s, a));
}

/// The dynamic shared memory a block of the current device may opt in to (cached per thread).
int max_block_smem() {
  thread_local int bytes = 0;
  if (bytes == 0) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      (void)cudaGetLastError();
      bytes = 48 * 1024;
    }
  }
  return bytes;
}

/// Whether the cp.async decode kernels run fd_stages (3) stages: they do where a block may take
/// their shared memory (compute capability 8.0 and 9.x: 163 and 227 KiB), else 2 (8.6 and 8.9
/// allow 99 KiB, under the 100 KiB that three 64-token stages take at head dim 128).
template <int D>
bool full_stages(bool vllm) {
  return (vllm ? vllm_smem_bytes<D>() : fd_smem_bytes<D>()) <= max_block_smem();
}

template <class T, int D, int kSt>
int launch_fd_kernel(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = fd_smem_bytes<D, kSt>();
  static const int configured = configure(fd_decode_kernel<T, D, kSt>, smem);
  if (configured != 0) return configured;
  return launch_decode(fd_decode_kernel<T, D, kSt>, smem, a, s);
}

/// The cp.async flash-decoding kernel.
template <class T, int D>
int launch_fd_cp_async(const attn_launch& a, cudaStream_t s) {
  return full_stages<D>(false) ? launch_fd_kernel<T, D, fd_stages>(a, s) : launch_fd_kernel<T, D, 2>(a, s);
}

template <class T, int D>
int launch_fd_tma_kernel(const attn_launch& a, const kv_tensor_maps& maps, cudaStream_t s) {
  constexpr int smem = fd_tma_smem_bytes<D>();
  static const int configured = configure(fd_decode_tma_kernel<T, D>, smem);
  if (configured != 0) return configured;
  if (a.decode_grid <= 0) return 0;
  return int(dev::launch_pdl_smem(fd_decode_tma_kernel<T, D>, dim3(a.decode_grid), dim3(kThreads),
                                  size_t(smem), s, a, maps));
}

/// The TMA kernel (fd_decode_item_tma); the cp.async one where the descriptors cannot be made.
template <class T, int D>
int launch_fd_tma(const attn_launch& a, cudaStream_t s) {
  kv_tensor_maps maps{};
  if (!make_kv_tensor_maps(a.k_cache, a.v_cache, a.num_kv_heads, a.head_dim, a.block_size, &maps) ||
      maps.box_rows != fd_kv_tile)
    return launch_fd_cp_async<T, D>(a, s);
  return launch_fd_tma_kernel<T, D>(a, maps, s);
}

/// Dynamic shared memory of the FP8-cache kernel (fd_decode_item with kFp8).
template <int D>
constexpr int fd8_smem_bytes() { return fd_smem_bytes<D, fd8_stages, 1>(); }

/// The FP8-cache kernel, whichever decode kernel is asked for.
template <class T, int D>
int launch_fd8(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = fd8_smem_bytes<D>();
  static const int configured = configure(fd_decode_kernel<T, D, fd8_stages, true>, smem);
  if (configured != 0) return configured;
  return launch_decode(fd_decode_kernel<T, D, fd8_stages, true>, smem, a, s);
}

/// The TMA kernel only where the GPU and the loaded code run it (tuning.hpp, runs_tma).
template <class T, int D>
int launch_fd(const attn_launch& a, decode_kernel k, cudaStream_t s) {
  if (a.kv_fp8) return launch_fd8<T, D>(a, s);
  if (k == decode_kernel::cp_async || !runs_tma(loaded_gpu_target())) return launch_fd_cp_async<T, D>(a, s);
  return launch_fd_tma<T, D>(a, s);
}

template <class T, int D, int kSt>
int launch_vllm_kernel(const attn_launch& a, cudaStream_t s) {
  static const int configured = configure(vllm_decode_kernel<T, D, kSt>, vllm_smem_bytes<D, kSt>());
  if (configured != 0) return configured;
  return launch_decode(vllm_decode_kernel<T, D, kSt>, vllm_smem_bytes<D, kSt>(), a, s);
}

template <class T, int D>
int launch_vllm(const attn_launch& a, cudaStream_t s) {
  return full_stages<D>(true) ? launch_vllm_kernel<T, D, fd_stages>(a, s) : launch_vllm_kernel<T, D, 2>(a, s);
}

/// Resident CTAs per SM of `kernel` with `smem` bytes of dynamic shared memory (0 on error).
template <class K>
int resident(K kernel, int smem) {
  int n = 0;
  cudaError_t e = cudaError_t(configure(kernel, smem));
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <class T, int D>
int occupancy(bool vllm, bool tma, bool kv_fp8) {
  if (kv_fp8) return resident(fd_decode_kernel<T, D, fd8_stages, true>, fd8_smem_bytes<D>());
  if (vllm)
    return full_stages<D>(true) ? resident(vllm_decode_kernel<T, D, fd_stages>, vllm_smem_bytes<D>())
                                : resident(vllm_decode_kernel<T, D, 2>, vllm_smem_bytes<D, 2>());
  if (tma) return resident(fd_decode_tma_kernel<T, D>, fd_tma_smem_bytes<D>());
  return full_stages<D>(false) ? resident(fd_decode_kernel<T, D, fd_stages>, fd_smem_bytes<D>())
                               : resident(fd_decode_kernel<T, D, 2>, fd_smem_bytes<D, 2>());
}

}  // namespace

int launch_fd_decode(act_dtype dt, const attn_launch& a, decode_kernel k, cudaStream_t s) {
  if (!rows_fit(a)) return int(cudaErrorInvalidValue);
  if (a.head_dim == 128)
    return dt == act_dtype::bf16 ? launch_fd<__nv_bfloat16, 128>(a, k, s) : launch_fd<__half, 128>(a, k, s);
  if (a.head_dim == 64)
    return dt == act_dtype::bf16 ? launch_fd<__nv_bfloat16, 64>(a, k, s) : launch_fd<__half, 64>(a, k, s);
  return int(cudaErrorInvalidValue);
}

int launch_vllm_decode(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (!rows_fit(a)) return int(cudaErrorInvalidValue);
  if (a.head_dim == 128)
    return dt == act_dtype::bf16 ? launch_vllm<__nv_bfloat16, 128>(a, s) : launch_vllm<__half, 128>(a, s);
  if (a.head_dim == 64)
    return dt == act_dtype::bf16 ? launch_vllm<__nv_bfloat16, 64>(a, s) : launch_vllm<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

int decode_ctas_per_sm(act_dtype dt, int head_dim, bool vllm, bool tma, bool kv_fp8) {
  if (head_dim == 128)
    return dt == act_dtype::bf16 ? occupancy<__nv_bfloat16, 128>(vllm, tma, kv_fp8)
                                 : occupancy<__half, 128>(vllm, tma, kv_fp8);
  if (head_dim == 64)
    return dt == act_dtype::bf16 ? occupancy<__nv_bfloat16, 64>(vllm, tma, kv_fp8)
                                 : occupancy<__half, 64>(vllm, tma, kv_fp8);
  return 0;
}

}  // namespace actorserve::gpu::cuda
