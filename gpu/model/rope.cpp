#include "gpu/model/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

namespace actorserve::gpu {
namespace {

/// base^(2i/dim) for i < dim/2, in fp32 like torch's `base ** (arange(0, dim, 2).float() / dim)`.
std::vector<float> base_pos_freq(double base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  const float base_f = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(base_f), static_cast<double>(expo)));
  }
  return out;
}

/// 1 / base^(2i/dim) for i < dim/2.
std::vector<float> base_inv_freq(double base, int64_t dim) {
  std::vector<float> out = base_pos_freq(base, dim);
  for (float& f : out) f = 1.0f / f;
  return out;
}

/// YaRN (transformers' _compute_yarn_parameters): each frequency blends the interpolated value
/// (divided by factor) and the extrapolated one (unchanged) by a linear ramp over the dimensions
/// between the correction range of beta_fast and beta_slow rotations in the original context.
std::vector<float> yarn_inv_freq(const rope_config& r, int64_t dim) {
  const double orig = static_cast<double>(r.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(r.theta));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;   // as transformers: no zero-width ramp
  const std::vector<float> pos = base_pos_freq(r.theta, dim);
  const float factor = static_cast<float>(r.factor), low_f = static_cast<float>(low);
  const float width = static_cast<float>(high - low);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    const float extrapolated = 1.0f / pos[i];
    const float interpolated = 1.0f / (factor * pos[i]);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / width, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;   // the extrapolation weight
    inv[i] = interpolated * (1.0f - keep) + extrapolated * keep;
  }
  return inv;
}

void llama3_adjust(const rope_config& r, std::vector<float>& inv) {
  const float factor = static_cast<float>(r.factor);
  const float low = static_cast<float>(r.low_freq_factor), high = static_cast<float>(r.high_freq_factor);
  const float old_len = static_cast<float>(r.original_max_position_embeddings);
  const float low_wavelen = old_len / low, high_wavelen = old_len / high;
  const float two_pi = static_cast<float>(2.0 * M_PI);
  for (float& f : inv) {
    const float wavelen = two_pi / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const float smooth = (old_len / wavelen - low) / (high - low);
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const rope_config& r, int64_t head_dim, int64_t seq_len) {
  switch (r.kind) {
    case rope_kind::default_rope:
      return base_inv_freq(r.theta, head_dim);
    case rope_kind::linear: {
      auto inv = base_inv_freq(r.theta, head_dim);
      for (float& f : inv) f /= static_cast<float>(r.factor);
      return inv;
    }
    case rope_kind::dynamic: {
      const double orig = static_cast<double>(r.original_max_position_embeddings);
      const double len = std::max(static_cast<double>(seq_len), orig);
      const double d = static_cast<double>(head_dim);
      const double base = r.theta * std::pow(r.factor * len / orig - (r.factor - 1.0), d / (d - 2.0));
      return base_inv_freq(base, head_dim);
    }
    case rope_kind::llama3: {
      auto inv = base_inv_freq(r.theta, head_dim);
      llama3_adjust(r, inv);
      return inv;
    }
    case rope_kind::yarn:
      return yarn_inv_freq(r, head_dim);
  }
  return base_inv_freq(r.theta, head_dim);
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

double rope_attention_factor(const rope_config& r) {
  if (r.kind != rope_kind::yarn) return 1.0;
  if (r.attention_factor) return *r.attention_factor;
  if (r.mscale != 0 && r.mscale_all_dim != 0) return yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim);
  return yarn_mscale(r.factor, 1.0);
}

double yarn_softmax_scale_factor(const rope_config& r) {
  if (r.kind != rope_kind::yarn || r.mscale_all_dim == 0) return 1.0;
  const double m = yarn_mscale(r.factor, r.mscale_all_dim);
  return m * m;
}

float round_to_dtype(float x, const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // round to nearest even
    std::memcpy(&x, &u, sizeof u);
    return x;
  }
  if (torch_dtype == "float16") {
    const double d = x;
    if (!std::isfinite(d) || d == 0.0) return x;
    if (std::abs(d) >= 65520.0) return std::copysign(INFINITY, x);
    // The spacing of float16 values around |d|: 2^-24 for subnormals, else 2^(exponent - 10).
    const int e = std::max(std::ilogb(d), -14);
    const double quantum = std::ldexp(1.0, e - 10);
    return static_cast<float>(std::nearbyint(d / quantum) * quantum);
  }
  return x;
}

bool rope_inv_freq_in_checkpoint_dtype(const model_config& cfg) {
  for (const char* exact : {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM", "DeepseekV2ForCausalLM"})
    if (cfg.architecture == exact) return false;
  return true;
}

std::vector<float> model_rope_inv_freq(const model_config& cfg, int64_t seq_len) {
  std::vector<float> inv = rope_inv_freq(cfg.rope, cfg.head_dim, seq_len);
  if (rope_inv_freq_in_checkpoint_dtype(cfg))
    for (float& f : inv) f = round_to_dtype(f, cfg.torch_dtype);
  return inv;
}

void rope_cos_sin(const std::vector<float>& inv_freq, int64_t position, float* cos_out, float* sin_out, float scale) {
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = pos * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
  }
}

void apply_rope(float* x, const float* cos_v, const float* sin_v, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos_v[i] - b * sin_v[i];
    x[i + half] = b * cos_v[i] + a * sin_v[i];
  }
}

void apply_rope_interleaved(float* x, const float* cos_v, const float* sin_v, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float re = x[2 * i], im = x[2 * i + 1];
    x[2 * i] = re * cos_v[i] - im * sin_v[i];
    x[2 * i + 1] = re * sin_v[i] + im * cos_v[i];
  }
}

}  // namespace actorserve::gpu
