// FP8 E4M3 on the host: decoding against known values, rounding (ties to even, saturation,
// subnormals), encoding back to codes, scale broadcasting per tensor / channel / block with ragged edges, and the loader's
// errors for broken FP8 checkpoints (each names the tensor or the key).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "config/safetensors_header.hpp"
#include "gpu/model/fp8.hpp"
#include "model/model_test_util.hpp"
#include "model/safetensors_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

namespace fs = std::filesystem;

TEST(fp8_e4m3, decodes_known_values) {
  struct known {
    uint8_t bits;
    float value;
  };
  for (const known& k : {known{0x00, 0.0f}, known{0x01, 0.001953125f}, known{0x02, 0.00390625f},
                         known{0x07, 0.013671875f}, known{0x08, 0.015625f}, known{0x0f, 0.029296875f},
                         known{0x30, 0.5f}, known{0x38, 1.0f}, known{0x39, 1.125f}, known{0x3f, 1.875f},
                         known{0x40, 2.0f}, known{0x54, 12.0f}, known{0x78, 256.0f}, known{0x7d, 416.0f},
                         known{0x7e, 448.0f}, known{0xb8, -1.0f}, known{0x81, -0.001953125f}, known{0xfe, -448.0f}}) {
    EXPECT_EQ(gpu::e4m3_to_f32(k.bits), k.value) << "bits 0x" << std::hex << int(k.bits);
  }
  EXPECT_TRUE(std::signbit(gpu::e4m3_to_f32(0x80)));
  EXPECT_EQ(gpu::e4m3_to_f32(0x80), 0.0f);
  EXPECT_TRUE(std::isnan(gpu::e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(gpu::e4m3_to_f32(0xff)));
  EXPECT_TRUE(gpu::e4m3_is_nan(0x7f) && gpu::e4m3_is_nan(0xff) && !gpu::e4m3_is_nan(0x7e));
}

TEST(fp8_e4m3, every_finite_value_rounds_to_itself_and_the_values_increase) {
  float previous = -1.0f;
  for (int b = 0; b < 0x7f; ++b) {
    const float v = gpu::e4m3_to_f32(static_cast<uint8_t>(b));
    EXPECT_GT(v, previous) << b;
    EXPECT_EQ(gpu::round_to_e4m3(v), v) << b;
    EXPECT_EQ(gpu::round_to_e4m3(-v), -v) << b;
    previous = v;
  }
}

TEST(fp8_e4m3, rounds_to_nearest_ties_to_even_and_saturates) {
  EXPECT_EQ(gpu::round_to_e4m3(1.0625f), 1.0f);      // tie between 1.0 (even) and 1.125
  EXPECT_EQ(gpu::round_to_e4m3(1.1875f), 1.25f);     // tie between 1.125 and 1.25 (even)
  EXPECT_EQ(gpu::round_to_e4m3(1.07f), 1.125f);
  EXPECT_EQ(gpu::round_to_e4m3(-3.3f), -3.25f);
  EXPECT_EQ(gpu::round_to_e4m3(0x1p-10f), 0.0f);     // half the smallest subnormal: tie to zero
  EXPECT_EQ(gpu::round_to_e4m3(3 * 0x1p-10f), 0x1p-8f);   // tie between 1 and 2 (even) x 2^-9
  EXPECT_EQ(gpu::round_to_e4m3(0.0146f), 0.013671875f);   // the largest subnormal
  EXPECT_EQ(gpu::round_to_e4m3(0.0155f), 0.015625f);      // up into the normals
  EXPECT_EQ(gpu::round_to_e4m3(440.0f), 448.0f);
  EXPECT_EQ(gpu::round_to_e4m3(500.0f), 448.0f);
  EXPECT_EQ(gpu::round_to_e4m3(-1e30f), -448.0f);
  EXPECT_EQ(gpu::round_to_e4m3(INFINITY), 448.0f);
  EXPECT_TRUE(std::isnan(gpu::round_to_e4m3(NAN)));
}

TEST(fp8_e4m3, encode_gives_the_code_of_the_rounded_value) {
  for (int b = 0; b < 0x100; ++b) {
    const auto bits = static_cast<uint8_t>(b);
    if (gpu::e4m3_is_nan(bits)) continue;
    EXPECT_EQ(gpu::e4m3_encode(gpu::e4m3_to_f32(bits)), bits) << b;
  }
  for (float x : {1.0625f, 1.07f, -3.3f, 0x1p-10f, 0.0146f, 440.0f, -1e30f, INFINITY, 1e-20f})
    EXPECT_EQ(gpu::e4m3_to_f32(gpu::e4m3_encode(x)), gpu::round_to_e4m3(x)) << x;
  EXPECT_TRUE(gpu::e4m3_is_nan(gpu::e4m3_encode(NAN)));
}

gpu::fp8_scale_view scale_view(const std::vector<float>& s, gpu::fp8_scale_kind kind, int64_t br = 0, int64_t bc = 0) {
  return {reinterpret_cast<const std::byte*>(s.data()), st_dtype::f32, kind, br, bc, "w.weight_scale", "f"};
}

TEST(fp8_e4m3, scales_broadcast_per_tensor_channel_and_ragged_block) {
  // 3 x 5 weights of 1.0 (0x38); the scale of element (r, c) shows where it came from.
  const std::vector<std::byte> ones(15, std::byte{0x38});
  std::vector<float> out(15);
  const std::vector<float> tensor{2.0f};
  ASSERT_TRUE(gpu::dequantize_e4m3(ones.data(), 3, 5, scale_view(tensor, gpu::fp8_scale_kind::per_tensor), "w", out.data()).ok());
  for (float v : out) EXPECT_EQ(v, 2.0f);
  const std::vector<float> channel{1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(gpu::dequantize_e4m3(ones.data(), 3, 5, scale_view(channel, gpu::fp8_scale_kind::per_channel), "w", out.data()).ok());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(out[r * 5 + c], channel[r]);
  // 2 x 2 blocks over 3 x 5: a 2 x 3 grid whose last row and column are ragged.
  const std::vector<float> block{1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(gpu::dequantize_e4m3(ones.data(), 3, 5, scale_view(block, gpu::fp8_scale_kind::block, 2, 2), "w", out.data()).ok());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(out[r * 5 + c], block[(r / 2) * 3 + c / 2]) << r << "," << c;
  EXPECT_TRUE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::block, 3, 5, 2, 2, {2, 3}));
  EXPECT_FALSE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::block, 3, 5, 2, 2, {1, 2}));
  EXPECT_TRUE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::block, 200, 300, 128, 128, {2, 3}));
  EXPECT_TRUE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::per_channel, 3, 5, 0, 0, {3, 1}));
  EXPECT_TRUE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::per_tensor, 3, 5, 0, 0, {}));
  EXPECT_TRUE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::per_tensor, 3, 5, 0, 0, {1}));
  EXPECT_FALSE(gpu::fp8_scale_shape_ok(gpu::fp8_scale_kind::per_tensor, 3, 5, 0, 0, {3}));
}

TEST(fp8_e4m3, nan_elements_and_bad_scales_are_errors_naming_the_tensor) {
  std::vector<std::byte> w(6, std::byte{0x38});
  w[4] = std::byte{0xff};
  std::vector<float> out(6);
  const std::vector<float> one{1.0f};
  status st = gpu::dequantize_e4m3(w.data(), 2, 3, scale_view(one, gpu::fp8_scale_kind::per_tensor), "w.weight", out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("'w.weight' holds NaN at [1, 1]"), std::string::npos) << st.err().message;
  w[4] = std::byte{0x38};
  const std::vector<float> negative{-1.0f};
  st = gpu::dequantize_e4m3(w.data(), 2, 3, scale_view(negative, gpu::fp8_scale_kind::per_tensor), "w.weight", out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("'w.weight_scale'"), std::string::npos) << st.err().message;
}

TEST(fp8_e4m3, per_channel_quantization_uses_all_448_and_stays_on_the_grid) {
  std::vector<float> w{0.1f, -0.37f, 0.0031f, 0.2f, 0, 0, 0, 0, 5.0f, 1.0f, -2.5f, 0.01f};
  const std::vector<float> original = w;
  gpu::quantize_rows_e4m3(w.data(), 3, 4);
  for (int r = 0; r < 3; ++r) {
    float amax = 0;
    for (int c = 0; c < 4; ++c) amax = std::fmax(amax, std::fabs(original[r * 4 + c]));
    const float s = amax / gpu::e4m3_max;
    for (int c = 0; c < 4; ++c) {
      const float q = w[r * 4 + c];
      if (amax == 0) {
        EXPECT_EQ(q, 0.0f);
        continue;
      }
      EXPECT_EQ(gpu::round_to_e4m3(q / s) * s, q) << r << "," << c;   // an E4M3 value times s
      EXPECT_NEAR(q, original[r * 4 + c], amax / 16) << r << "," << c;
    }
  }
  EXPECT_FLOAT_EQ(w[1], -0.37f);   // the row's amax maps to 448
}

// ---- the loader on broken copies of the FP8 fixtures ----

std::string load_error(const scratch_dir& dir) { return cpu_load_error(dir.path().string()); }

void rename_tensor(const scratch_dir& dir, const std::string& from, const std::string& to) {
  auto parts = split_safetensors(read_file(dir / "model.safetensors"));
  parts.header = replace_once(parts.header, "\"" + from + "\"", "\"" + to + "\"");
  write_file(dir / "model.safetensors", join_safetensors(parts.header, parts.data));
}

TEST(fp8_loader, nan_weight_element_is_named) {
  const scratch_dir dir = copy_model("qwen3-hd128-fp8", "fp8_nan");
  const std::string bytes = read_file(dir / "model.safetensors");
  auto header = parse_safetensors_header(bytes, bytes.size(), "f");
  ASSERT_TRUE(header.ok()) << header.err().message;
  std::string edited = bytes;
  for (const auto& t : header->tensors)
    if (t.name == "model.layers.1.self_attn.k_proj.weight") edited[header->data_offset + t.begin + 256 + 3] = '\x7f';
  write_file(dir / "model.safetensors", edited);
  expect_has(load_error(dir), {"'model.layers.1.self_attn.k_proj.weight' holds NaN at [1, 3]"});
}

TEST(fp8_loader, missing_scale_or_input_scale_is_named) {
  const scratch_dir dir = copy_model("qwen3-hd128-fp8", "fp8_no_scale");
  rename_tensor(dir, "model.layers.0.mlp.up_proj.weight_scale", "model.layers.0.mlp.up_proj.weight_scalX");
  expect_has(load_error(dir), {"'model.layers.0.mlp.up_proj.weight'", "no scale tensor",
                               "'model.layers.0.mlp.up_proj.weight_scale'"});
  const scratch_dir dir2 = copy_model("qwen3-hd128-fp8", "fp8_no_input_scale");
  rename_tensor(dir2, "model.layers.1.self_attn.o_proj.input_scale", "model.layers.1.self_attn.o_proj.input_scalX");
  expect_has(load_error(dir2), {"missing tensor 'model.layers.1.self_attn.o_proj.input_scale'"});
}

TEST(fp8_loader, fp8_weights_without_quantization_config_are_refused) {
  const scratch_dir dir = copy_model("qwen3-hd128-fp8", "fp8_no_config");
  fs::copy_file(fs::path(model_dir("qwen3-hd128-bf16")) / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  expect_has(load_error(dir), {"self_attn.q_proj.weight", "F8_E4M3"});
}

TEST(fp8_loader, the_ignore_list_decides_which_modules_are_fp8) {
  // The ignore list names layer 1's down_proj (stored bf16); without that entry it must be FP8.
  const scratch_dir dir = copy_model("qwen3-hd128-fp8-channel", "fp8_ignore_removed");
  write_file(dir / "config.json", replace_once(read_file(dir / "config.json"), R"("lm_head",
      "re:.*layers\\.1\\.mlp\\.down_proj$")",
                                               R"("lm_head")"));
  expect_has(load_error(dir), {"'model.layers.1.mlp.down_proj.weight' has dtype BF16", "quantizes it", "ignore"});
  // A module in the ignore list must not be FP8.
  const scratch_dir dir2 = copy_model("qwen3-hd128-fp8-channel", "fp8_ignore_added");
  write_file(dir2 / "config.json", replace_once(read_file(dir2 / "config.json"), R"("lm_head",)",
                                                R"("lm_head", "model.layers.0.mlp.up_proj",)"));
  expect_has(load_error(dir2), {"'model.layers.0.mlp.up_proj.weight'", "F8_E4M3", "ignore list"});
}

TEST(fp8_loader, block_scales_must_match_the_block_size) {
  const scratch_dir dir = copy_model("mixtral-fp8-block", "fp8_block_64");
  std::string cfg = read_file(dir / "config.json");
  cfg = replace_once(cfg, "\"weight_block_size\": [\n      128,\n      128\n    ]",
                     "\"weight_block_size\": [\n      64,\n      64\n    ]");
  write_file(dir / "config.json", cfg);
  expect_has(load_error(dir), {"'model.layers.0.self_attn.q_proj.weight_scale_inv' has shape [1, 1], expected [2, 2] (64 x 64 blocks)"});
}

}  // namespace
}  // namespace actorserve::testing
