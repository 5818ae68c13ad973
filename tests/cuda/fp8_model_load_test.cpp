// What load_device_model puts on the device for FP8: a per-channel and a per-tensor checkpoint's
// dense weights as their stored E4M3 bytes with one scale per row (layer 1's unquantized
// down_proj as bf16), a block-scaled checkpoint's o_proj and experts as their E4M3 bytes and block
// scales (its fused QKV, whose k_proj ends mid-block, dequantized to bf16), and --quantization fp8 as
// the codes and scales of the CPU's per-row rounding, of read and of generated (--load-format
// dummy) weights.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/model/dtype_convert.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/model_weights.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

template <class T>
std::vector<T> download(const void* p, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

/// The scale of row `r` of a per-tensor or per-channel FP8 view.
float stored_scale(const gpu::tensor_view& v, size_t r) {
  const gpu::fp8_scale_view& s = *v.scale;
  const size_t i = s.kind == gpu::fp8_scale_kind::per_channel ? r : 0;
  float out = 0;
  gpu::upcast_to_f32(s.data + i * dtype_size(s.dtype), s.dtype, 1, &out);
  return out;
}

/// `w` holds the views' bytes and scales, concatenated along rows.
void expect_stored_fp8(const cuda::device_weight& w, const std::vector<const gpu::tensor_view*>& views,
                       const char* what) {
  ASSERT_TRUE(w.fp8()) << what;
  size_t rows = 0, offset = 0;
  for (auto* v : views) rows += size_t(v->shape[0]);
  const size_t cols = size_t(views[0]->shape[1]);
  const auto bytes = download<uint8_t>(w.data, rows * cols);
  const auto scales = download<float>(w.row_scale, rows);
  for (auto* v : views) {
    const size_t r = size_t(v->shape[0]);
    ASSERT_EQ(v->dtype, st_dtype::f8_e4m3) << v->name;
    EXPECT_EQ(std::memcmp(bytes.data() + offset * cols, v->data, r * cols), 0) << what << ": " << v->name;
    for (size_t i = 0; i < r; ++i) ASSERT_EQ(scales[offset + i], stored_scale(*v, i)) << v->name << " row " << i;
    offset += r;
  }
}

class CudaFp8Load : public ::testing::Test {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    ASSERT_EQ(cudaStreamCreate(&s_), cudaSuccess);
  }
  void TearDown() override {
    if (s_) cudaStreamDestroy(s_);
  }
  std::unique_ptr<cuda::device_model> load(const std::string& model, bool quantize,
                                           const gpu::weight_source& source = {}) {
    auto m = cuda::load_device_model(model_dir(model), dtype_choice::auto_detect, quantize, s_, source);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.err().message);
    return m.ok() ? std::move(m.value()) : nullptr;
  }
  cudaStream_t s_ = nullptr;
};

TEST_F(CudaFp8Load, CheckpointWeightsStayE4m3WithTheirRowScales) {
  for (const char* model : {"qwen3-hd128-fp8-channel", "qwen3-hd128-fp8"}) {
    auto files = gpu::open_model_files(model_dir(model));
    ASSERT_TRUE(files.ok()) << files.err().message;
    auto m = load(model, false);
    ASSERT_NE(m, nullptr);
    const auto& cfg = files->config;
    EXPECT_EQ(m->fp8_max_elements, size_t(2 * cfg.intermediate_size * cfg.hidden_size)) << model;
    // The FP8 GEMM's activation rows: down_proj's input (layer 0's is E4M3 in both checkpoints).
    EXPECT_EQ(m->fp8_max_cols, size_t(cfg.intermediate_size)) << model;
    for (size_t l = 0; l < m->layers.size(); ++l) {
      const gpu::layer_views& v = files->views.layers[l];
      const cuda::device_layer& d = m->layers[l];
      expect_stored_fp8(d.qkv, {&v.q_proj, &v.k_proj, &v.v_proj}, model);
      expect_stored_fp8(d.o, {&v.o_proj}, model);
      expect_stored_fp8(d.gate_up, {&v.gate_proj, &v.up_proj}, model);
      if (v.down_proj.dtype == st_dtype::f8_e4m3) {
        expect_stored_fp8(d.down, {&v.down_proj}, model);
      } else {  // in the ignore list: stored as the activation dtype
        EXPECT_FALSE(d.down.fp8()) << model << " layer " << l;
        const auto want = gpu::weight_store::to_f32(v.down_proj);
        const auto got = download<uint16_t>(d.down.data, want.size());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16_bits(want[i])) << i;
      }
    }
  }
}

// mixtral-fp8-block: o_proj (128 x 128) stays E4M3 with its block scales; the fused QKV does not
// (k_proj's 32 rows end mid-block, so a block row of the fused matrix would mix two parts' scales)
// and is dequantized to bf16. The experts stay E4M3, each view's block grid after the previous
// one's (gate/up in two parts).
TEST_F(CudaFp8Load, BlockScaledWeightsStayE4m3WithTheirBlockScales) {
  auto files = gpu::open_model_files(model_dir("mixtral-fp8-block"));
  ASSERT_TRUE(files.ok()) << files.err().message;
  auto m = load("mixtral-fp8-block", false);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->has_fp8());
  for (size_t l = 0; l < m->layers.size(); ++l) {
    const gpu::layer_views& v = files->views.layers[l];
    const cuda::device_layer& d = m->layers[l];
    ASSERT_EQ(v.o_proj.dtype, st_dtype::f8_e4m3);
    ASSERT_TRUE(d.o.block_scaled()) << "layer " << l;
    EXPECT_EQ(d.o.row_scale, nullptr);
    const size_t rows = size_t(v.o_proj.shape[0]), cols = size_t(v.o_proj.shape[1]);
    const auto bytes = download<uint8_t>(d.o.data, rows * cols);
    EXPECT_EQ(std::memcmp(bytes.data(), v.o_proj.data, rows * cols), 0) << "layer " << l;
    const size_t blocks = ((rows + 127) / 128) * ((cols + 127) / 128);
    std::vector<float> want(blocks);
    gpu::upcast_to_f32(v.o_proj.scale->data, v.o_proj.scale->dtype, blocks, want.data());
    EXPECT_EQ(download<float>(d.o.block_scale, blocks), want) << "layer " << l;
    EXPECT_FALSE(d.qkv.fp8()) << "layer " << l;
    ASSERT_TRUE(v.moe.has_value());
    for (bool gate_up : {true, false}) {
      const cuda::moe_fp8_scales& f = gate_up ? d.experts.gate_up_fp8 : d.experts.down_fp8;
      ASSERT_NE(f.scale, nullptr) << "layer " << l;
      EXPECT_EQ(f.mode, cuda::fp8_scale_mode::block128);
      EXPECT_EQ(f.parts, gate_up ? 2 : 1);
      size_t row = 0, block_row = 0;
      for (const gpu::mlp_views& e : v.moe->experts)
        for (const gpu::tensor_view* t : gate_up ? std::vector{&e.gate_proj, &e.up_proj} : std::vector{&e.down_proj}) {
          ASSERT_EQ(t->dtype, st_dtype::f8_e4m3);
          const size_t r = size_t(t->shape[0]), c = size_t(t->shape[1]);
          const size_t blocks = ((r + 127) / 128) * ((c + 127) / 128);
          const auto* data = static_cast<const uint8_t*>(gate_up ? d.experts.gate_up : d.experts.down);
          EXPECT_EQ(std::memcmp(download<uint8_t>(data + row * c, r * c).data(), t->data, r * c), 0) << t->name;
          std::vector<float> want(blocks);
          gpu::upcast_to_f32(t->scale->data, t->scale->dtype, blocks, want.data());
          EXPECT_EQ(download<float>(f.scale + block_row * ((c + 127) / 128), blocks), want) << t->name;
          row += r;
          block_row += (r + 127) / 128;
        }
    }
  }
  const gpu::layer_views& v = files->views.layers[0];
  ASSERT_EQ(v.k_proj.dtype, st_dtype::f8_e4m3);
  std::vector<float> want;
  for (auto* t : {&v.q_proj, &v.k_proj, &v.v_proj}) {
    const auto w = gpu::weight_store::to_f32(*t);
    want.insert(want.end(), w.begin(), w.end());
  }
  const auto got = download<uint16_t>(m->layers[0].qkv.data, want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16_bits(want[i])) << i;
}

// The block-scaled o_proj and experts take half the bytes of the bf16 model they came from (one
// byte a weight and one fp32 scale a block, against two bytes a weight); everything else is
// stored alike.
TEST_F(CudaFp8Load, BlockScaledWeightsHoldHalfTheBytesOfBf16) {
  auto fp8 = load("mixtral-fp8-block", false);
  auto bf16 = load("mixtral-bf16", false);
  ASSERT_NE(fp8, nullptr);
  ASSERT_NE(bf16, nullptr);
  // A [rows][cols] matrix's bytes in bf16 and as E4M3 with block scales.
  const auto saved = [](size_t rows, size_t cols) {
    const size_t fp8_bytes = rows * cols + ((rows + 127) / 128) * ((cols + 127) / 128) * sizeof(float);
    EXPECT_LT(fp8_bytes, rows * cols * 2 * 51 / 100);
    return rows * cols * 2 - fp8_bytes;
  };
  const size_t n = size_t(fp8->cfg.hidden_size), k = size_t(fp8->cfg.num_heads * fp8->cfg.head_dim);
  const size_t inter = size_t(fp8->cfg.moe->expert_intermediate_size), E = size_t(fp8->cfg.moe->num_experts);
  // o_proj; each expert's gate_proj, up_proj and down_proj.
  const size_t per_layer = saved(n, k) + E * (2 * saved(inter, n) + saved(n, inter));
  EXPECT_EQ(bf16->bytes - fp8->bytes, fp8->layers.size() * per_layer)
      << "bf16 " << bf16->bytes << " bytes, block-scaled fp8 " << fp8->bytes;
}

TEST_F(CudaFp8Load, QuantizationFlagStoresTheCpuRounding) {
  auto files = gpu::open_model_files(model_dir("qwen3-hd128-bf16"));
  ASSERT_TRUE(files.ok()) << files.err().message;
  auto m = load("qwen3-hd128-bf16", true);
  ASSERT_NE(m, nullptr);
  const gpu::tensor_view& o = files->views.layers[0].o_proj;
  const size_t rows = size_t(o.shape[0]), cols = size_t(o.shape[1]);
  std::vector<float> want = gpu::weight_store::to_f32(o);
  gpu::quantize_rows_e4m3(want.data(), int64_t(rows), int64_t(cols));
  const cuda::device_weight& w = m->layers[0].o;
  ASSERT_TRUE(w.fp8());
  const auto codes = download<uint8_t>(w.data, rows * cols);
  const auto scales = download<float>(w.row_scale, rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      ASSERT_EQ(gpu::e4m3_to_f32(codes[r * cols + c]) * scales[r], want[r * cols + c]) << r << ", " << c;
  for (const cuda::device_layer& d : m->layers)
    EXPECT_TRUE(d.qkv.fp8() && d.o.fp8() && d.gate_up.fp8() && d.down.fp8());
  EXPECT_EQ(m->lm_head == m->embed, files->views.lm_head_tied);
}

// --quantization fp8 on a mixture-of-experts model: the experts' matrices as E4M3 codes with one
// scale a row, the CPU's rounding of each expert's gate_proj, up_proj and down_proj.
TEST_F(CudaFp8Load, QuantizationFlagStoresTheExpertsAsE4m3) {
  auto files = gpu::open_model_files(model_dir("mixtral-bf16"));
  ASSERT_TRUE(files.ok()) << files.err().message;
  auto m = load("mixtral-bf16", true);
  ASSERT_NE(m, nullptr);
  for (size_t l = 0; l < m->layers.size(); ++l) {
    const cuda::device_experts& d = m->layers[l].experts;
    ASSERT_TRUE(files->views.layers[l].moe.has_value());
    for (bool gate_up : {true, false}) {
      const cuda::moe_fp8_scales& f = gate_up ? d.gate_up_fp8 : d.down_fp8;
      ASSERT_NE(f.scale, nullptr) << "layer " << l;
      EXPECT_EQ(f.mode, cuda::fp8_scale_mode::per_row);
      size_t row = 0;
      for (const gpu::mlp_views& e : files->views.layers[l].moe->experts)
        for (const gpu::tensor_view* t : gate_up ? std::vector{&e.gate_proj, &e.up_proj} : std::vector{&e.down_proj}) {
          const size_t rows = size_t(t->shape[0]), cols = size_t(t->shape[1]);
          std::vector<float> want = gpu::weight_store::to_f32(*t);
          gpu::quantize_rows_e4m3(want.data(), int64_t(rows), int64_t(cols));
          const auto codes = download<uint8_t>(static_cast<const uint8_t*>(gate_up ? d.gate_up : d.down) + row * cols,
                                               rows * cols);
          const auto scales = download<float>(f.scale + row, rows);
          for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c)
              ASSERT_EQ(gpu::e4m3_to_f32(codes[r * cols + c]) * scales[r], want[r * cols + c])
                  << t->name << " " << r << ", " << c;
          row += rows;
        }
    }
  }
}

TEST_F(CudaFp8Load, QuantizationFlagRoundsGeneratedWeightsAsTheCpu) {
  // --load-format dummy with --quantization fp8: each dense weight is generated on the device,
  // then rounded per row as the CPU rounds the same generated values.
  const gpu::weight_source dummy{true, 11};
  auto files = gpu::open_model_files(model_dir("qwen3-hd128-bf16"), dummy);
  ASSERT_TRUE(files.ok()) << files.err().message;
  auto m = load("qwen3-hd128-bf16", true, dummy);
  ASSERT_NE(m, nullptr);
  for (const cuda::device_layer& d : m->layers)
    EXPECT_TRUE(d.qkv.fp8() && d.o.fp8() && d.gate_up.fp8() && d.down.fp8());
  const gpu::layer_views& v = files->views.layers[0];
  const std::vector<const gpu::tensor_view*> gate_up = {&v.gate_proj, &v.up_proj};
  size_t rows = 0;
  for (auto* t : gate_up) rows += size_t(t->shape[0]);
  const size_t cols = size_t(v.gate_proj.shape[1]);
  const cuda::device_weight& w = m->layers[0].gate_up;
  ASSERT_TRUE(w.fp8());
  const auto codes = download<uint8_t>(w.data, rows * cols);
  const auto scales = download<float>(w.row_scale, rows);
  size_t offset = 0;
  for (auto* t : gate_up) {
    ASSERT_TRUE(t->dummy.has_value()) << t->name;
    const size_t r = size_t(t->shape[0]);
    std::vector<float> want(r * cols);
    gpu::fill_dummy_f32(*t->dummy, want.size(), want.data());
    gpu::quantize_rows_e4m3(want.data(), int64_t(r), int64_t(cols));
    for (size_t i = 0; i < r; ++i) {
      ASSERT_GT(scales[offset + i], 0.0f) << t->name << " row " << i;
      for (size_t c = 0; c < cols; ++c)
        ASSERT_EQ(gpu::e4m3_to_f32(codes[(offset + i) * cols + c]) * scales[offset + i], want[i * cols + c])
            << t->name << " " << i << ", " << c;
    }
    offset += r;
  }
}

}  // namespace
}  // namespace actorserve::testing
