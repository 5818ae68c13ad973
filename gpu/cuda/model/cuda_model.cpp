#include "gpu/cuda/model/cuda_model.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <utility>

#include "config/log.hpp"
#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/fp8_gemv_mma.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/model/dtype_convert.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/load_progress.hpp"
#include "gpu/model/model_weights.hpp"
#include "gpu/model/rope.hpp"
#include "gpu/model/shard_views.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/model/dummy_fill.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {
namespace {

result<src_dtype> source_dtype(const tensor_view& v) {
  switch (v.dtype) {
    case st_dtype::f32: return src_dtype::f32;
    case st_dtype::bf16: return src_dtype::bf16;
    case st_dtype::f16: return src_dtype::f16;
    case st_dtype::f8_e4m3: return src_dtype::f32;  // uploader::stage dequantizes it on the host
    default:
      return make_error(error_code::unsupported,
                        fmt::format("{}: tensor '{}' has dtype {}; the CUDA executor reads F32, BF16 and F16",
                                    v.file, v.name, to_string(v.dtype)));
  }
}

/// Uploads host tensors through one device staging buffer and converts them on the device.
class uploader {
 public:
  uploader(device_model& m, cudaStream_t s, load_progress& progress) : m_(m), s_(s), progress_(progress) {}
  uploader(const uploader&) = delete;
  uploader& operator=(const uploader&) = delete;
  act_dtype dt() const { return m_.dt; }
  ~uploader() {
    if (staging_) cudaFree(staging_);
    if (rounding_) cudaFree(rounding_);
  }

  /// Converts `views`, concatenated along rows, into one new act-dtype matrix (F8_E4M3 views
  /// dequantized on the host first).
  result<void*> matrix(const std::vector<const tensor_view*>& views) {
    return concatenated(
        views, act_size(m_.dt),
        [&](const void* src, src_dtype sd, void* dst, size_t n) { return convert_to_act(m_.dt, src, sd, dst, n, s_); },
        [&](const dummy_fill& f, void* dst, size_t n) { return fill_dummy_act(f, m_.dt, dst, n, s_); });
  }

  /// A dense layer's weight from `views` (concatenated along rows): E4M3 bytes with per-row scales
  /// when every view is a per-tensor or per-channel F8_E4M3 weight, or when `quantize` and none
  /// is F8_E4M3 (rounded on the device by fp8_quantize_rows as quantize_rows_e4m3 rounds on the
  /// CPU; a generated view, --load-format dummy, is filled on the device first); else an act-dtype
  /// matrix().
  result<device_weight> weight(const std::vector<const tensor_view*>& views, bool quantize) {
    size_t fp8_views = 0, rows = 0, cols = 0;
    for (auto* v : views) {
      if (v->dtype == st_dtype::f8_e4m3 && v->scale && v->scale->kind != fp8_scale_kind::block) ++fp8_views;
      rows += size_t(v->shape[0]);
      cols = size_t(v->shape[1]);
    }
    const bool any_fp8 = std::any_of(views.begin(), views.end(),
                                     [](const tensor_view* v) { return v->dtype == st_dtype::f8_e4m3; });
    if (fp8_views != views.size() && !block_scaled(views) && (any_fp8 || !quantize)) {
      auto m = matrix(views);
      if (!m) return m.err();
      return device_weight{*m, nullptr};
    }
    auto w = block_scaled(views) ? block_weight(views, rows, cols) : row_scaled_weight(views, rows, cols);
    if (!w) return w.err();
    m_.fp8_max_elements = std::max(m_.fp8_max_elements, rows * cols);
    m_.fp8_max_cols = std::max(m_.fp8_max_cols, cols);
    return w;
  }

  /// An MoE layer's experts' matrices from `views` (stacked along rows, each expert's parts in
  /// turn) as E4M3 codes where the expert kernels take them: every view a per-tensor or
  /// per-channel F8_E4M3 weight or, with `quantize`, none F8_E4M3 (per-row scales, as weight());
  /// every view F8_E4M3 with 128 x 128 block scales (each view's block grid in turn); K a multiple
  /// of 16. Otherwise no data (the caller stores them in the act dtype).
  result<device_weight> expert_weight(const std::vector<const tensor_view*>& views, bool quantize) {
    size_t row_views = 0, block_views = 0, fp8_views = 0, rows = 0;
    const size_t cols = size_t(views.front()->shape[1]);
    for (auto* v : views) {
      if (v->dtype == st_dtype::f8_e4m3) ++fp8_views;
      if (v->dtype == st_dtype::f8_e4m3 && v->scale && v->scale->kind != fp8_scale_kind::block) ++row_views;
      if (v->dtype == st_dtype::f8_e4m3 && v->scale && v->scale->kind == fp8_scale_kind::block &&
          v->scale->block_rows == kFp8Block && v->scale->block_cols == kFp8Block)
        ++block_views;
      rows += size_t(v->shape[0]);
    }
    if (cols % 16 != 0) return device_weight{};
    if (block_views == views.size()) return block_weight(views, rows, cols);
    if (row_views == views.size() || (quantize && fp8_views == 0)) return row_scaled_weight(views, rows, cols);
    return device_weight{};
  }

  /// `views` concatenated along rows as E4M3 codes with one scale a row: an F8_E4M3 view's codes
  /// and its per-tensor or per-channel scales, a float view rounded on the device (fp8_quantize_rows).
  result<device_weight> row_scaled_weight(const std::vector<const tensor_view*>& views, size_t rows, size_t cols) {
    void* dst = nullptr;
    if (auto st = m_.alloc(&dst, rows * cols); !st) return st.err();
    void* scale = nullptr;
    if (auto st = m_.alloc(&scale, rows * sizeof(float)); !st) return st.err();
    size_t row = 0;
    for (auto* v : views) {
      const size_t r = size_t(v->shape[0]);
      uint8_t* codes = static_cast<uint8_t*>(dst) + row * cols;
      float* scales = static_cast<float*>(scale) + row;
      if (v->dtype == st_dtype::f8_e4m3) {
        std::vector<float> s(r);
        for (size_t i = 0; i < r; ++i) s[i] = row_scale(*v->scale, i);
        // Pageable copies: they complete before the host buffer `s` dies.
        AS_CUDA_TRY(cudaMemcpyAsync(codes, v->data, r * cols, cudaMemcpyHostToDevice, s_));
        AS_CUDA_TRY(cudaMemcpyAsync(scales, s.data(), r * sizeof(float), cudaMemcpyHostToDevice, s_));
        AS_CUDA_TRY(cudaStreamSynchronize(s_));
        progress_.advance(v->num_bytes());
      } else {
        if (auto st = quantize_view(*v, codes, scales); !st) return st.err();
        AS_CUDA_TRY(cudaStreamSynchronize(s_));  // start-up only: the staging buffer is reused
      }
      row += r;
    }
    return device_weight{dst, static_cast<float*>(scale)};
  }

  /// `views` concatenated along rows into one act-dtype matrix whose rows are first rounded
  /// through E4M3 with one scale per row of each view (`quantize`, --quantization fp8, for the
  /// weights whose kernels read 16-bit operands: experts and latent-attention projections): the
  /// values quantize_rows_e4m3 gives the CPU executor (fp8_quantize_rows from the stored or
  /// generated values), dequantized once to the act dtype. Without `quantize`, or for an FP8
  /// checkpoint (which --quantization fp8 loads as it is), matrix().
  result<void*> rounded_matrix(const std::vector<const tensor_view*>& views, bool quantize) {
    if (!quantize || std::any_of(views.begin(), views.end(),
                                 [](const tensor_view* v) { return v->dtype == st_dtype::f8_e4m3; }))
      return matrix(views);
    size_t total = 0;
    for (auto* v : views) total += v->num_elements();
    void* dst = nullptr;
    if (auto st = m_.alloc(&dst, total * act_size(m_.dt)); !st) return st.err();
    size_t offset = 0;
    for (auto* v : views) {
      const size_t r = size_t(v->shape[0]), cols = size_t(v->shape[1]);
      const size_t codes_bytes = (r * cols + 3) / 4 * 4;  // the scales behind, 4-byte aligned
      auto codes = rounding_scratch(codes_bytes + r * sizeof(float));
      if (!codes) return codes.err();
      uint8_t* q = static_cast<uint8_t*>(*codes);
      float* scales = reinterpret_cast<float*>(q + codes_bytes);
      if (auto st = quantize_view(*v, q, scales); !st) return st.err();
      AS_CUDA_TRY(fp8_dequantize(m_.dt, q, scales, int(r), int(cols),
                                 static_cast<char*>(dst) + offset * act_size(m_.dt), s_));
      AS_CUDA_TRY(cudaStreamSynchronize(s_));  // start-up only: the staging buffers are reused
      offset += r * cols;
    }
    return dst;
  }

  /// Whether `views` concatenate along rows into one block-scaled E4M3 weight: each is F8_E4M3
  /// with 128 x 128 block scales, and each but the last ends on a block row (else a block row of
  /// the fused matrix would mix two parts' scales).
  static bool block_scaled(const std::vector<const tensor_view*>& views) {
    for (size_t i = 0; i < views.size(); ++i) {
      const tensor_view& v = *views[i];
      if (v.dtype != st_dtype::f8_e4m3 || !v.scale || v.scale->kind != fp8_scale_kind::block ||
          v.scale->block_rows != kFp8Block || v.scale->block_cols != kFp8Block)
        return false;
      if (i + 1 < views.size() && v.shape[0] % kFp8Block != 0) return false;
    }
    return true;
  }

  /// The views' stored E4M3 bytes and their block scales (as fp32), concatenated along rows, each
  /// view's block grid after the previous one's (one grid of the whole when every view but the
  /// last ends on a block row, block_scaled()).
  result<device_weight> block_weight(const std::vector<const tensor_view*>& views, size_t rows, size_t cols) {
    const size_t block_cols = fp8_blocks(cols);
    size_t block_rows = 0;
    for (auto* v : views) block_rows += fp8_blocks(size_t(v->shape[0]));
    std::vector<float> scales(block_rows * block_cols);
    void* dst = nullptr;
    if (auto st = m_.alloc(&dst, rows * cols); !st) return st.err();
    void* scale = nullptr;
    if (auto st = m_.alloc(&scale, scales.size() * sizeof(float)); !st) return st.err();
    size_t row = 0, block_row = 0;
    for (auto* v : views) {
      const size_t r = size_t(v->shape[0]), n = fp8_blocks(r) * block_cols;
      upcast_to_f32(v->scale->data, v->scale->dtype, n, scales.data() + block_row * block_cols);
      AS_CUDA_TRY(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + row * cols, v->data, r * cols,
                                  cudaMemcpyHostToDevice, s_));
      progress_.advance(v->num_bytes());
      row += r;
      block_row += fp8_blocks(r);
    }
    // Pageable copies: they complete before the host buffer `scales` dies.
    AS_CUDA_TRY(cudaMemcpyAsync(scale, scales.data(), scales.size() * sizeof(float), cudaMemcpyHostToDevice, s_));
    AS_CUDA_TRY(cudaStreamSynchronize(s_));
    return device_weight{dst, nullptr, static_cast<float*>(scale)};
  }

  /// Converts `views` (concatenated) into one new fp32 vector.
  result<float*> vector(std::initializer_list<const tensor_view*> views) {
    auto dst = concatenated(
        std::vector<const tensor_view*>(views), sizeof(float),
        [&](const void* src, src_dtype sd, void* out, size_t n) {
          return convert_to_f32(src, sd, static_cast<float*>(out), n, s_);
        },
        [&](const dummy_fill& f, void* out, size_t n) {
          return fill_dummy_f32_device(f, static_cast<float*>(out), n, s_);
        });
    if (!dst) return dst.err();
    return static_cast<float*>(*dst);
  }

 private:
  /// Allocates elements of `elem_bytes` for all of `views` and fills them in order with
  /// `convert(src, src_dtype, dst, n)` (a launcher's cudaError_t as an int), one staged view at a
  /// time; a generated view (--load-format dummy) is written by `fill(dummy_fill, dst, n)` on the
  /// device instead, with nothing staged.
  template <class Convert, class Fill>
  result<void*> concatenated(const std::vector<const tensor_view*>& views, size_t elem_bytes, Convert convert,
                             Fill fill) {
    size_t total = 0;
    for (auto* v : views) total += v->num_elements();
    void* dst = nullptr;
    if (auto st = m_.alloc(&dst, total * elem_bytes); !st) return st.err();
    size_t offset = 0;
    for (auto* v : views) {
      if (v->dummy) {
        AS_CUDA_TRY(fill(*v->dummy, static_cast<char*>(dst) + offset * elem_bytes, v->num_elements()));
        progress_.advance(v->num_bytes());
        offset += v->num_elements();
        continue;
      }
      auto sd = source_dtype(*v);
      if (!sd) return sd.err();
      auto src = stage(*v);
      if (!src) return src.err();
      AS_CUDA_TRY(convert(*src, *sd, static_cast<char*>(dst) + offset * elem_bytes, v->num_elements()));
      AS_CUDA_TRY(cudaStreamSynchronize(s_));  // start-up only: the staging buffer is reused
      offset += v->num_elements();
    }
    return dst;
  }

  /// Enqueues the rounding of float view `v` [r][cols] to E4M3 codes with one scale a row on the
  /// device (fp8_quantize_rows, as quantize_rows_e4m3 rounds on the CPU), from its stored values
  /// staged as they are or, generated (--load-format dummy), filled as bf16 (its values are
  /// bf16-exact) into the staging buffer: the caller syncs before the buffer is reused.
  status quantize_view(const tensor_view& v, uint8_t* codes, float* scales) {
    const int r = int(v.shape[0]), cols = int(v.shape[1]);
    if (v.dummy) {
      auto buf = staging(size_t(r) * cols * act_size(act_dtype::bf16));
      if (!buf) return buf.err();
      AS_CUDA_TRY(fill_dummy_act(*v.dummy, act_dtype::bf16, *buf, size_t(r) * cols, s_));
      progress_.advance(v.num_bytes());
      AS_CUDA_TRY(fp8_quantize_rows(*buf, src_dtype::bf16, r, cols, codes, scales, s_));
      return {};
    }
    auto sd = source_dtype(v);
    if (!sd) return sd.err();
    auto src = stage(v);
    if (!src) return src.err();
    AS_CUDA_TRY(fp8_quantize_rows(*src, *sd, r, cols, codes, scales, s_));
    return {};
  }

  /// Row `i`'s scale of a per-tensor or per-channel E4M3 weight.
  static float row_scale(const fp8_scale_view& s, size_t i) {
    float v = 0;
    const size_t index = s.kind == fp8_scale_kind::per_channel ? i : 0;
    upcast_to_f32(s.data + index * dtype_size(s.dtype), s.dtype, 1, &v);
    return v;
  }

  /// Stages `v` on the device: as stored, or dequantized to fp32 for F8_E4M3 (src_dtype f32).
  result<const void*> stage(const tensor_view& v) {
    if (v.dtype != st_dtype::f8_e4m3) return stage_bytes(v, v.data, v.num_bytes());
    const std::vector<float> w = weight_store::to_f32(v);
    return stage_bytes(v, w.data(), w.size() * sizeof(float));
  }

  /// Device buffer `buf` of `have` bytes, grown to at least `bytes` (its contents not kept).
  static result<void*> grown(void*& buf, size_t& have, size_t bytes) {
    if (bytes > have) {
      if (buf) cudaFree(buf);
      buf = nullptr;
      have = 0;
      AS_CUDA_TRY(cudaMalloc(&buf, bytes));
      have = bytes;
    }
    return buf;
  }
  /// The device staging buffer, grown to at least `bytes`.
  result<void*> staging(size_t bytes) { return grown(staging_, staging_bytes_, bytes); }
  /// The device buffer of rounded_matrix's codes and scales, grown to at least `bytes`.
  result<void*> rounding_scratch(size_t bytes) { return grown(rounding_, rounding_bytes_, bytes); }

  result<const void*> stage_bytes(const tensor_view& v, const void* data, size_t bytes) {
    auto buf = staging(bytes);
    if (!buf) return buf.err();
    // Same stream as the conversion: a pageable copy may return before its DMA lands.
    AS_CUDA_TRY(cudaMemcpyAsync(staging_, data, bytes, cudaMemcpyHostToDevice, s_));
    // The host copy of a dequantized view dies on return: the copy must have landed by then.
    if (data != v.data) AS_CUDA_TRY(cudaStreamSynchronize(s_));
    progress_.advance(v.num_bytes());
    return static_cast<const void*>(staging_);
  }

  device_model& m_;
  cudaStream_t s_;
  load_progress& progress_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  void* rounding_ = nullptr;
  size_t rounding_bytes_ = 0;
};

/// A sparse layer's router and its experts stacked: gate/up as [E][2 * inter][hidden], down as
/// [E][hidden][inter]; the shared experts, when present, as one dense MLP. `quantize`
/// (--quantization fp8): the experts' rows rounded through E4M3. `e4m3` (one shard): the routed
/// experts' matrices kept as E4M3 codes with their scales where expert_weight can
/// (device_experts' scales set), each matrix on its own; the rest in the act dtype
/// (rounded_matrix).
status upload_experts(uploader& up, const moe_views& v, device_experts& out, bool quantize, bool e4m3) {
  auto router = up.matrix({&v.router});
  if (!router) return router.err();
  out.router = *router;
  std::vector<const tensor_view*> gate_up, down;
  for (const mlp_views& e : v.experts) {
    gate_up.push_back(&e.gate_proj);
    gate_up.push_back(&e.up_proj);
    down.push_back(&e.down_proj);
  }
  const auto stack = [&](const std::vector<const tensor_view*>& views, int parts, void*& data,
                         moe_fp8_scales& fp8) -> status {
    if (e4m3) {
      auto w = up.expert_weight(views, quantize);
      if (!w) return w.err();
      if (w->data) {
        data = w->data;
        fp8 = moe_fp8_scales{.scale = w->scales(), .mode = w->scale_mode(), .parts = parts};
        return {};
      }
    }
    auto m = up.rounded_matrix(views, quantize);
    if (!m) return m.err();
    data = *m;
    return {};
  };
  if (auto st = stack(gate_up, 2, out.gate_up, out.gate_up_fp8); !st) return st;
  if (auto st = stack(down, 1, out.down, out.down_fp8); !st) return st;
  if (v.shared) {
    auto sgu = up.rounded_matrix({&v.shared->gate_proj, &v.shared->up_proj}, quantize);
    if (!sgu) return sgu.err();
    out.shared_gate_up = *sgu;
    auto sd = up.rounded_matrix({&v.shared->down_proj}, quantize);
    if (!sd) return sd.err();
    out.shared_down = *sd;
  }
  return {};
}

/// A latent-attention layer's projections (DeepSeek-V2), as stored, or with `quantize`
/// (--quantization fp8) rounded through E4M3 (rounded_matrix); norms and biases in fp32.
status upload_mla(uploader& up, const mla_views& v, device_mla& out, bool quantize) {
  const auto matrix = [&](const tensor_view& t, void*& dst) -> status {
    auto m = up.rounded_matrix({&t}, quantize);
    if (!m) return m.err();
    dst = *m;
    return {};
  };
  const auto vector = [&](const tensor_view& t, float*& dst) -> status {
    auto m = up.vector({&t});
    if (!m) return m.err();
    dst = *m;
    return {};
  };
  if (v.q_proj) {  // q_proj and kv_a_proj as one matrix (device_mla::kv_a_proj)
    auto m = up.rounded_matrix({&*v.q_proj, &v.kv_a_proj}, quantize);
    if (!m) return m.err();
    out.q_proj = *m;
    out.kv_a_proj = static_cast<char*>(*m) + v.q_proj->num_elements() * act_size(up.dt());
  } else {
    if (auto st = matrix(*v.q_a_proj, out.q_a_proj); !st) return st;
    if (v.q_a_bias)
      if (auto st = vector(*v.q_a_bias, out.q_a_bias); !st) return st;
    if (auto st = vector(*v.q_a_norm, out.q_a_norm); !st) return st;
    if (auto st = matrix(*v.q_b_proj, out.q_b_proj); !st) return st;
    if (auto st = matrix(v.kv_a_proj, out.kv_a_proj); !st) return st;
  }
  if (v.kv_a_bias)
    if (auto st = vector(*v.kv_a_bias, out.kv_a_bias); !st) return st;
  if (auto st = vector(v.kv_a_norm, out.kv_a_norm); !st) return st;
  return matrix(v.kv_b_proj, out.kv_b_proj);
}

}  // namespace

device_model::~device_model() {
  for (void* p : allocations_) cudaFree(p);
}

status device_model::alloc(void** ptr, size_t n) {
  if (auto e = cudaMalloc(ptr, std::max<size_t>(n, 16)); e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return make_error(error_code::out_of_memory,
                      fmt::format("out of device memory loading the weights: {:.1f} MiB more needed with {:.1f} "
                                  "MiB free of {:.1f} MiB ({} MiB loaded so far)",
                                  n / 1048576.0, free_b / 1048576.0, total_b / 1048576.0, bytes >> 20));
  }
  allocations_.push_back(*ptr);
  bytes += n;
  return {};
}

result<act_dtype> resolve_dtype(dtype_choice choice, const std::string& torch_dtype) {
  switch (choice) {
    case dtype_choice::bfloat16: return act_dtype::bf16;
    case dtype_choice::float16: return act_dtype::fp16;
    case dtype_choice::float32:
      return make_error(error_code::unsupported,
                        "--dtype float32 is not supported by the CUDA executor (use auto, bfloat16 or float16)");
    default: return torch_dtype == "float16" ? act_dtype::fp16 : act_dtype::bf16;
  }
}

result<std::unique_ptr<device_model>> load_device_model(const std::string& model_dir, dtype_choice choice,
                                                        bool quantize_fp8, cudaStream_t stream,
                                                        const weight_source& source, int rank, int num_shards) {
  auto files = open_model_files(model_dir, source);
  if (!files) return files.err();
  auto plan = shard_plan::make(files->config, num_shards);
  if (!plan) return plan.err();
  if (rank < 0 || rank >= num_shards)
    return make_error(error_code::invalid_argument, fmt::format("shard {} of {} does not exist", rank, num_shards));
  auto shard = cut_shard_views(files->views, plan.value(), rank);
  if (!shard) return shard.err();
  const model_config cfg = plan->shard_config(rank);
  auto dt = resolve_dtype(choice, cfg.torch_dtype);
  if (!dt) return dt.err();
  if (cfg.head_dim % 8 != 0 || cfg.head_dim > 256)
    return make_error(error_code::unsupported, fmt::format("{}/config.json: head_dim {} is not supported by the "
                                                           "CUDA executor (multiples of 8 up to 256)",
                                                           model_dir, cfg.head_dim));
  if (cfg.num_heads / cfg.num_kv_heads > attn_tile_rows)
    return make_error(error_code::unsupported, fmt::format("{}/config.json: {} query heads per KV head is over the "
                                                           "CUDA executor's {}", model_dir,
                                                           cfg.num_heads / cfg.num_kv_heads, attn_tile_rows));
  if (cfg.moe) {
    const moe_config& moe = *cfg.moe;
    // The grouped expert GEMM reads its operands 8 elements (16 bytes) at a time.
    if (cfg.hidden_size % 8 != 0 || moe.expert_intermediate_size % 8 != 0)
      return make_error(error_code::unsupported,
                        fmt::format("{}/config.json: hidden_size {} and the experts' intermediate size {}{} "
                                    "(moe_intermediate_size, or intermediate_size for Mixtral) must be multiples of 8 "
                                    "for the CUDA executor's expert GEMMs", model_dir, cfg.hidden_size,
                                    moe.expert_intermediate_size,
                                    num_shards > 1 ? fmt::format(" per shard at --tensor-parallel-size {}", num_shards)
                                                   : std::string()));
    if (moe.top_k > moe_max_top_k || moe.num_experts > moe_max_experts)
      return make_error(error_code::unsupported,
                        fmt::format("{}/config.json: num_experts_per_tok {} over {} experts; the CUDA executor "
                                    "routes at most {} of at most {}", model_dir, moe.top_k, moe.num_experts,
                                    moe_max_top_k, moe_max_experts));
  }
  // An FP8 checkpoint loads as it is under --quantization fp8, as on the CPU.
  quantize_fp8 = quantize_fp8 && !cfg.quantization;
  if (quantize_fp8 && num_shards > 1)
    return make_error(error_code::unsupported,
                      fmt::format("--quantization fp8: per-row scales are computed over whole weights, which the CUDA "
                                  "executor does at --tensor-parallel-size 1 only, not {} (FP8 checkpoints shard)",
                                  num_shards));
  if (rope_depends_on_length(cfg.rope))
    return make_error(error_code::unsupported,
                      fmt::format("{}/config.json: rope_type dynamic is not supported by the CUDA executor", model_dir));
  auto m = std::make_unique<device_model>();
  m->cfg = cfg;
  m->plan = plan.value();
  m->rank = rank;
  m->dt = *dt;
  log::info("loading {} ({} layers) onto the GPU as {}", model_dir, cfg.num_layers,
            *dt == act_dtype::bf16 ? "bfloat16" : "float16");
  // A shard reads its slices and the whole embedding table.
  const uint64_t read_bytes = num_shards == 1 ? files->store.total_bytes()
                                              : shard->total_bytes() - shard->views.embed_tokens.num_bytes() +
                                                    files->views.embed_tokens.num_bytes();
  load_progress progress(read_bytes, load_progress::stderr_output());
  uploader up(*m, stream, progress);
  const model_weight_views& v = shard->views;
  auto embed = up.matrix({&files->views.embed_tokens});
  if (!embed) return embed.err();
  m->embed = *embed;
  if (v.lm_head_tied) {  // the shard's vocabulary rows of the replicated table
    m->lm_head = static_cast<char*>(m->embed) + size_t(plan->vocab(rank).begin) * size_t(cfg.hidden_size) * act_size(*dt);
  } else {
    auto head = up.matrix({&v.lm_head});
    if (!head) return head.err();
    m->lm_head = *head;
  }
  auto fnorm = up.vector({&v.final_norm});
  if (!fnorm) return fnorm.err();
  m->final_norm = *fnorm;
  for (size_t i = 0; i < v.layers.size(); ++i) {
    const layer_views& lv = v.layers[i];
    device_layer d;
    if (lv.mla) {  // its projections in the act dtype (an FP8 checkpoint's dequantized by matrix())
      if (auto st = upload_mla(up, *lv.mla, d.mla, quantize_fp8); !st) return st.err();
    } else {
      auto qkv = up.weight({&lv.q_proj, &lv.k_proj, &lv.v_proj}, quantize_fp8);
      if (!qkv) return qkv.err();
      d.qkv = *qkv;
    }
    if (lv.q_bias && lv.k_bias && lv.v_bias) {
      auto b = up.vector({&*lv.q_bias, &*lv.k_bias, &*lv.v_bias});
      if (!b) return b.err();
      d.qkv_bias = *b;
    }
    auto o = up.weight({&lv.o_proj}, quantize_fp8);
    if (!o) return o.err();
    d.o = *o;
    // Every shard adds the whole bias once, after the all-reduce of o_proj's partial sums.
    if (const std::optional<tensor_view>& o_bias = files->views.layers[i].o_bias) {
      auto b = up.vector({&*o_bias});
      if (!b) return b.err();
      d.o_bias = *b;
    }
    if (lv.moe) {
      if (auto st = upload_experts(up, *lv.moe, d.experts, quantize_fp8, num_shards == 1); !st) return st.err();
    } else {
      auto gu = up.weight({&lv.gate_proj, &lv.up_proj}, quantize_fp8);
      if (!gu) return gu.err();
      d.gate_up = *gu;
      auto down = up.weight({&lv.down_proj}, quantize_fp8);
      if (!down) return down.err();
      d.down = *down;
    }
    auto in_norm = up.vector({&lv.input_norm});
    if (!in_norm) return in_norm.err();
    d.input_norm = *in_norm;
    auto post_norm = up.vector({&lv.post_norm});
    if (!post_norm) return post_norm.err();
    d.post_norm = *post_norm;
    if (cfg.qk_norm) {
      if (!lv.q_norm || !lv.k_norm)
        return make_error(error_code::invalid_argument,
                          fmt::format("{}: layer {} has no self_attn.q_norm / k_norm weights, which qk_norm needs",
                                      model_dir, i));
      auto qn = up.vector({&*lv.q_norm});
      if (!qn) return qn.err();
      d.q_norm = *qn;
      auto kn = up.vector({&*lv.k_norm});
      if (!kn) return kn.err();
      d.k_norm = *kn;
    }
    // --kv-cache-dtype fp8: the per-layer K/V scales, as the CPU executor reads them (1.0 when absent).
    for (auto [name, out] : {std::pair{"k_scale", &d.k_scale}, std::pair{"v_scale", &d.v_scale}}) {
      const std::string tensor = fmt::format("model.layers.{}.self_attn.{}", i, name);
      if (!files->store.contains(tensor)) continue;
      auto sc = files->store.get_scalar(tensor);
      if (!sc) return make_error(sc.err().code, fmt::format("{}: {}", tensor, sc.err().message));
      *out = sc.value();
    }
    m->layers.push_back(d);
  }
  if (cfg.quantization || quantize_fp8) {
    size_t rows = 0, blocks = 0, dense = 0;
    for (const device_layer& d : m->layers)
      for (const device_weight* w : {&d.qkv, &d.o, &d.gate_up, &d.down}) {
        rows += w->row_scale != nullptr;
        blocks += w->block_scaled();
        dense += w->data != nullptr;
      }
    log::info("{} of {} dense-layer weight matrices are FP8 E4M3 with per-row scales and {} with 128 x 128 block "
              "scales; the rest (fused matrices whose parts do not end on a block row, unquantized) are {}",
              rows, dense, blocks, *dt == act_dtype::bf16 ? "bfloat16" : "float16");
    if (cfg.moe) {
      size_t e4m3 = 0, stacks = 0;
      for (const device_layer& d : m->layers) {
        if (!d.experts.router) continue;
        stacks += 2;
        e4m3 += (d.experts.gate_up_fp8.scale != nullptr) + (d.experts.down_fp8.scale != nullptr);
      }
      log::info("{} of {} stacked routed-expert matrices are FP8 E4M3; the rest{} are {}", e4m3, stacks,
                num_shards > 1 ? " (every one under tensor parallelism)" : "",
                *dt == act_dtype::bf16 ? "bfloat16" : "float16");
    }
    const bool shared = cfg.moe && cfg.moe->num_shared_experts > 0;
    if (quantize_fp8 && (shared || cfg.mla))
      log::info("--quantization fp8: the {} rows are rounded through E4M3 with one scale a row and kept in {} (their "
                "kernels read 16-bit weights)",
                shared && cfg.mla ? "shared experts' and latent-attention projections'"
                : shared          ? "shared experts'"
                                  : "latent-attention projections'",
                *dt == act_dtype::bf16 ? "bfloat16" : "float16");
  }
  // The checkpoint dtype rounds HF's inv_freq buffer; match it (see gpu/model/rope.hpp).
  const std::vector<float> inv_freq = model_rope_inv_freq(cfg);
  void* f = nullptr;
  if (auto st = m->alloc(&f, inv_freq.size() * sizeof(float)); !st) return st.err();
  AS_CUDA_TRY(cudaMemcpyAsync(f, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  AS_CUDA_TRY(cudaStreamSynchronize(stream));
  m->inv_freq = static_cast<float*>(f);
  m->rope_attention_factor = static_cast<float>(rope_attention_factor(cfg.rope));
  AS_CUDA_TRY(cudaStreamSynchronize(stream));
  progress.finish(fmt::format("{}, {} MiB on the GPU", source.dummy ? "generated" : "read", m->bytes >> 20));
  return m;
}

gemm_runner::~gemm_runner() {
  if (handle_) cublasDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
  if (fp8_scratch_) cudaFree(fp8_scratch_);
}

status gemm_runner::reserve_fp8_scratch(act_dtype dt, size_t elements) {
  if (elements <= fp8_scratch_elements_) return {};
  if (fp8_scratch_) cudaFree(fp8_scratch_);
  fp8_scratch_ = nullptr;
  fp8_scratch_elements_ = 0;
  fp8_gemm_.set_pad_scratch(nullptr, 0);
  AS_CUDA_TRY(cudaMalloc(&fp8_scratch_, elements * act_size(dt)));
  fp8_scratch_elements_ = elements;
  // Block-scaled GEMMs of m % 4 != 0 rows write their padded rows here; a run uses the scratch for
  // that or for a dequantized weight, never both at once.
  fp8_gemm_.set_pad_scratch(fp8_scratch_, elements * act_size(dt));
  return {};
}

result<const void*> gemm_runner::dequantized(act_dtype dt, const device_weight& w, int n, int k) {
  if (size_t(n) * size_t(k) > fp8_scratch_elements_)
    return make_error(error_code::internal,
                      fmt::format("an FP8 weight of {} x {} is larger than the dequantization scratch of {} elements",
                                  n, k, fp8_scratch_elements_));
  AS_CUDA_TRY(fp8_dequantize(dt, static_cast<const uint8_t*>(w.data), w.scales(), n, k, fp8_scratch_, stream_,
                             w.scale_mode()));
  ++fp8_dequantize_runs_;
  return static_cast<const void*>(fp8_scratch_);
}

status gemm_runner::run(act_dtype dt, const void* x, int m, int k, const device_weight& w, int n, float* y,
                        float beta) {
  if (!w.fp8()) return run(dt, x, m, k, static_cast<const void*>(w.data), n, y, beta);
  if (m == 0) return {};
  const auto* q = static_cast<const uint8_t*>(w.data);
  // fp8_mma_min_rows to 8 rows with per-row scales multiply on the tensor cores.
  if (bulk_.fp8 && bulk_.fp8_mma_min_rows > 0 && m >= bulk_.fp8_mma_min_rows && m <= fp8_gemv_max_rows_ && w.scale_mode() == fp8_scale_mode::per_row &&
      fp8_gemv_mma_supported(x, m, k, q)) {
    AS_CUDA_TRY(fp8_gemv_mma(dt, x, m, k, q, w.scales(), n, y, beta, stream_, bulk_));
    ++fp8_gemv_mma_runs_;
    return {};
  }
  if (m < fp8_gemm_min_rows_ && m <= fp8_gemv_max_rows_ && fp8_gemv_supported(x, m, k, q)) {
    // One token streams its weights through the bulk-copy ring where the GPU runs it (the same
    // bits as fp8_gemv).
    if (m == 1 && bulk_.fp8 && fp8_gemv_bulk_supported(x, k, q)) {
      AS_CUDA_TRY(fp8_gemv_bulk(dt, x, k, q, w.scales(), n, y, beta, stream_, w.scale_mode(), bulk_));
      ++fp8_gemv_bulk_runs_;
      return {};
    }
    AS_CUDA_TRY(fp8_gemv(dt, x, m, k, q, w.scales(), n, y, beta, stream_, w.scale_mode()));
    return {};
  }
  if (m >= fp8_gemm_min_rows_ && fp8_gemm_.supported(x, m, k, q, w.scales(), n, y, w.scale_mode())) {
    auto ran = fp8_gemm_.run(dt, x, m, k, q, w.scales(), n, y, true, beta, w.scale_mode());
    if (!ran) return ran.err();
    if (*ran) return {};
  }
  auto dense = dequantized(dt, w, n, k);
  if (!dense) return dense.err();
  return cublas(dt, x, m, k, *dense, n, y, beta);
}

status gemm_runner::run_act(act_dtype dt, const void* x, int m, int k, const device_weight& w, int n, void* y) {
  if (!w.fp8()) return run_act(dt, x, m, k, static_cast<const void*>(w.data), n, y);
  if (m == 0) return {};
  const auto* q = static_cast<const uint8_t*>(w.data);
  // No GEMV writes dt, so every m the FP8 GEMM supports takes it unless it is switched off.
  if (fp8_gemm_min_rows_ != std::numeric_limits<int>::max() &&
      fp8_gemm_.supported(x, m, k, q, w.scales(), n, y, w.scale_mode())) {
    auto ran = fp8_gemm_.run(dt, x, m, k, q, w.scales(), n, y, false, 0.0f, w.scale_mode());
    if (!ran) return ran.err();
    if (*ran) return {};
  }
  auto dense = dequantized(dt, w, n, k);
  if (!dense) return dense.err();
  return run_act(dt, x, m, k, *dense, n, y);
}

status gemm_runner::init(cudaStream_t stream, size_t workspace_bytes) {
  stream_ = stream;
  int device = 0;
  AS_CUDA_TRY(cudaGetDevice(&device));
  AS_CUDA_TRY(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  AS_CUBLAS_TRY(cublasCreate(&handle_));
  AS_CUBLAS_TRY(cublasSetStream(handle_, stream));
  AS_CUDA_TRY(cudaMalloc(&workspace_, workspace_bytes));
  AS_CUBLAS_TRY(cublasSetWorkspace(handle_, workspace_, workspace_bytes));
  AS_CUBLAS_TRY(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  // The two libraries share the workspace: both enqueue on this one stream only.
  return fp8_gemm_.init(stream, workspace_, workspace_bytes);
}

int gemm_runner::gemv_rows_for(int n) const {
  // About 8 blocks of 4 rows fit per SM: between one and four waves, the tail of a partial
  // wave costs more than halving the rows per block.
  const int wave = 8 * num_sms_, blocks4 = (n + 3) / 4;
  return blocks4 > wave && blocks4 < 4 * wave ? 2 : 4;
}

status gemm_runner::run(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta) {
  if (m == 0) return {};
  if (m <= gemv_max_rows_ && gemv_supported(x, m, k, w)) {
    const int rows = gemv_rows_per_block_ ? gemv_rows_per_block_ : gemv_rows_for(n);
    AS_CUDA_TRY(gemv(dt, x, m, k, w, n, y, beta, stream_, rows, bulk_));
    return {};
  }
  return cublas(dt, x, m, k, w, n, y, beta);
}

status gemm_runner::cublas(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta) {
  const float alpha = 1.0f;
  const cudaDataType_t t = dt == act_dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  // Row-major Y[m,n] = X[m,k] W[n,k]^T is column-major Y^T[n,m] = W^T... : op(W) = T over W (k x n).
  AS_CUBLAS_TRY(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, t, k, x, t, k, &beta, y,
                             CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return {};
}

status gemm_runner::run_act(act_dtype dt, const void* x, int m, int k, const void* w, int n, void* y) {
  if (m == 0) return {};
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = dt == act_dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  AS_CUBLAS_TRY(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, t, k, x, t, k, &beta, y, t, n,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return {};
}

status gemm_runner::run_batched(act_dtype dt, int batch, int m, int n, int k, const void* a, int lda,
                                long long stride_a, const void* b, bool b_rows_are_n, int ldb, long long stride_b,
                                void* c, bool c_f32, int ldc, long long stride_c) {
  if (m == 0 || batch == 0) return {};
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = dt == act_dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  // Column-major, C_i^T[n][m] = B_i^T[n][k] * A_i^T[k][m]: A_i as stored is A_i^T, and so is a
  // [k][n] B_i; an [n][k] B_i is B_i^T only transposed (op T).
  AS_CUBLAS_TRY(cublasGemmStridedBatchedEx(handle_, b_rows_are_n ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k,
                                           &alpha, b, t, ldb, stride_b, a, t, lda, stride_a, &beta, c,
                                           c_f32 ? CUDA_R_32F : t, ldc, stride_c, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
  return {};
}

}  // namespace actorserve::gpu::cuda
