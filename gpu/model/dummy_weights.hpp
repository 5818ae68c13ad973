#pragma once
/// `--load-format dummy`: every weight is a deterministic pseudo-random value instead of a value
/// read from safetensors. Element `i` of a tensor is a counter-based hash of (seed, tensor id, i)
/// mapped to uniform [-1e-3, 1e-3] and rounded to bf16, so a host fill (CPU executor) and a device
/// fill (CUDA executor) agree element for element, and a shard's rows equal the whole tensor's.
/// Norm weights are 1, as a freshly initialized RMSNorm's, so activations stay finite.
#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define AS_DUMMY_FN __host__ __device__ inline
#else
#define AS_DUMMY_FN inline
#endif

namespace actorserve::gpu {

/// Where the weights come from: the safetensors files, or generated (`--load-format dummy`).
struct weight_source {
  bool dummy = false;
  uint64_t seed = 0;           ///< the generated values' seed (--seed)
};

/// How one dummy tensor (or a row range of it) is filled.
struct dummy_fill {
  uint64_t seed = 0;
  uint64_t tensor_id = 0;      ///< dummy_tensor_id(name): independent of the order of binding
  uint64_t first = 0;          ///< the element index of the view's first element in the whole tensor
  bool ones = false;           ///< a norm's weight: every element is 1
};

/// The half-range of the uniform values (vLLM's dummy loader uses [-1e-3, 1e-3] too).
inline constexpr float dummy_weight_range = 1e-3f;

/// FNV-1a of the tensor's name.
constexpr uint64_t dummy_tensor_id(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

/// True for names whose tensor is a norm's weight (input_layernorm, q_norm, model.norm, ...).
constexpr bool dummy_is_norm(std::string_view name) {
  constexpr std::string_view suffix = "norm.weight";
  return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

/// splitmix64's finalizer: a bijective 64-bit mix.
AS_DUMMY_FN uint64_t dummy_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// The bf16 bits of element `index` (in the whole tensor). Integer arithmetic and one fp32
/// multiply of exact operands, so host and device compute the same bits.
AS_DUMMY_FN uint16_t dummy_bf16_bits(uint64_t seed, uint64_t tensor_id, uint64_t index, bool ones) {
  if (ones) return 0x3f80;   // 1.0
  const uint64_t h = dummy_mix(dummy_mix(seed ^ dummy_mix(tensor_id)) + index);
  const int32_t centered = static_cast<int32_t>(h >> 40) - (1 << 23);   // [-2^23, 2^23)
  const float u = static_cast<float>(centered) * (dummy_weight_range / 8388608.0f);
#if defined(__CUDA_ARCH__)
  uint32_t bits = __float_as_uint(u);
#else
  uint32_t bits = 0;
  __builtin_memcpy(&bits, &u, sizeof bits);
#endif
  bits += 0x7fffu + ((bits >> 16) & 1u);   // round to nearest even; |u| <= 1e-3 is never NaN or Inf
  return static_cast<uint16_t>(bits >> 16);
}

/// The fp32 value of a bf16 bit pattern.
AS_DUMMY_FN float dummy_bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f = 0;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

/// Fills `out[0, n)` with the fp32 values of the view's elements (the CPU executor's fill).
void fill_dummy_f32(const dummy_fill& f, size_t n, float* out);

}  // namespace actorserve::gpu
