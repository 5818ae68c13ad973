#include "gpu/model/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

namespace actorserve::gpu {
namespace {

/// 1 / base^(2i/dim) for i < dim/2, in fp32 like torch's `base ** (arange(0, dim, 2).float() / dim)`.
std::vector<float> base_inv_freq(double base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  const float base_f = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(base_f), static_cast<double>(expo)));
    out[static_cast<size_t>(i)] = 1.0f / p;
  }
  return out;
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
  }
  return base_inv_freq(r.theta, head_dim);
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

void rope_cos_sin(const std::vector<float>& inv_freq, int64_t position, float* cos_out, float* sin_out) {
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = pos * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void apply_rope(float* x, const float* cos_v, const float* sin_v, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos_v[i] - b * sin_v[i];
    x[i + half] = b * cos_v[i] + a * sin_v[i];
  }
}

}  // namespace actorserve::gpu
