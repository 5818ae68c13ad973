// The FP8-cache kernels' in-register E4M3 conversion (fp8_tiles.cuh, e4m3x4_to) against the
// host's exact decoding (gpu::e4m3_to_f32), all 256 codes in each of the four byte positions, to
// bf16 and fp16, bit for bit: normals, subnormals (0x01-0x07), +-0 and +-448 exact; the NaN
// codes read as +-480.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda_test_util.hpp"
#include "e4m3_convert_kernel.hpp"
#include "gpu/model/fp8.hpp"

namespace actorserve::testing {
namespace {

TEST(E4m3Convert, EveryCodeExactInBothDtypes) {
  AS_REQUIRE_CUDA();
  for (cuda::act_dtype dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16}) {
    dev_vec<uint16_t> out(256 * 4);
    out.poison();
    ASSERT_EQ(convert_all_e4m3_codes(dt, out.get()), 0);
    const std::vector<uint16_t> got = out.download();
    int wrong = 0;
    for (uint32_t i = 0; i < 256; ++i)
      for (uint32_t j = 0; j < 4; ++j) {
        const auto code = uint8_t((i + j) & 255u);
        const float want = gpu::e4m3_is_nan(code) ? (code & 0x80 ? -480.0f : 480.0f) : gpu::e4m3_to_f32(code);
        const uint16_t want_bits = to_act_bits(dt, want);  // exact: every E4M3 value is a T value
        if (got[4 * i + j] != want_bits && ++wrong <= 8)
          ADD_FAILURE() << (dt == cuda::act_dtype::bf16 ? "bf16" : "fp16") << " code 0x" << std::hex << int(code)
                        << " in byte " << j << ": bits 0x" << got[4 * i + j] << ", want 0x" << want_bits;
      }
    EXPECT_EQ(wrong, 0);
  }
}

}  // namespace
}  // namespace actorserve::testing
