#pragma once
/// FP8 E4M3 (OCP "e4m3fn", safetensors F8_E4M3) on the host: exact decoding, rounding of fp32 to
/// the nearest E4M3 value, and the dequantization of stored FP8 weights with their scales
/// (per tensor, per output channel, or per 128 x 128 block with ragged edges).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/error.hpp"
#include "config/safetensors_header.hpp"

namespace actorserve::gpu {

/// The largest finite E4M3 value (S.1111.110 = 1.75 x 2^8).
inline constexpr float e4m3_max = 448.0f;

/// True for the two NaN encodings of E4M3 (S.1111.111); it has no infinities.
inline bool e4m3_is_nan(uint8_t bits) { return (bits & 0x7fu) == 0x7fu; }

/// E4M3 bits -> float, exact (bias 7; exponent field 0 encodes subnormals of 2^-9 steps).
/// NaN encodings decode to a quiet NaN.
float e4m3_to_f32(uint8_t bits);

/// `x` rounded to the nearest E4M3 value (ties to even), saturated to +-448 as vLLM's quantizers
/// clamp before the cast; NaN stays NaN.
float round_to_e4m3(float x);

/// v[i] = round_to_e4m3(v[i] / scale) x scale for i < n: the values an E4M3 store with `scale`
/// gives back (a quantized weight row, an FP8 KV-cache or latent-cache row).
void round_through_e4m3(float* v, int64_t n, float scale);

/// The E4M3 code of round_to_e4m3(x) (e4m3_to_f32 of it gives that value back); NaN -> 0x7f.
uint8_t e4m3_encode(float x);

/// How a weight's scale broadcasts over its [rows][cols] (out x in) elements.
enum class fp8_scale_kind { per_tensor, per_channel, block };

/// A stored F8_E4M3 weight's scale tensor (F32, BF16 or F16) as bound from the checkpoint.
struct fp8_scale_view {
  const std::byte* data = nullptr;
  st_dtype dtype = st_dtype::f32;
  fp8_scale_kind kind = fp8_scale_kind::per_tensor;
  int64_t block_rows = 0, block_cols = 0;   ///< block: the block shape (weight_block_size)
  std::string name;                         ///< e.g. "model.layers.0.mlp.up_proj.weight_scale"
  std::string file;
};

/// The scale tensor's shape a weight of [rows][cols] needs: [] or [1] per tensor (either is
/// accepted, `shape_ok` says), [rows][1] or [rows] per channel, [ceil(rows/br)][ceil(cols/bc)] per block.
bool fp8_scale_shape_ok(fp8_scale_kind kind, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                        const std::vector<int64_t>& shape);

/// Dequantizes `rows` x `cols` F8_E4M3 values at `src` with `scale` into `dst` (fp32):
/// dst[r][c] = e4m3(src[r][c]) x scale(r, c). A NaN element or a non-finite or negative scale is an
/// error naming the tensor and the element.
status dequantize_e4m3(const std::byte* src, int64_t rows, int64_t cols, const fp8_scale_view& scale,
                       const std::string& weight_name, float* dst);

/// Rounds a [rows][cols] fp32 weight in place as FP8 E4M3 with one scale per output row
/// (amax / 448): w = round_to_e4m3(w / s) x s, what `--quantization fp8` stores. All-zero rows stay zero.
void quantize_rows_e4m3(float* w, int64_t rows, int64_t cols);

}  // namespace actorserve::gpu
