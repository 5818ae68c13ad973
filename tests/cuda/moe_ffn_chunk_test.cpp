// The sparse layer's FFN on the device with the experts run in chunks of tokens: the same bits
// as in one piece, across chunk boundaries, on the fixtures' real routers and experts (greedy and
// group-limited routing), on the batched path (chunks taking other tiles than the whole step)
// and on the one-token kernels' path. The per-expert cuBLAS path against the grouped GEMM, on the
// fixtures and at Mixtral-8x7B's and Qwen3-30B-A3B's expert shapes with uneven routing and empty
// experts, around its threshold, on its lanes and on one, the lanes' bits the same run after
// run; and never while the stream captures a graph.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "stream_gemm_fixture.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/model/dummy_fill.hpp"
#include "gpu/cuda/moe/moe_ffn.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

/// The sparse fixtures: greedy softmax routing (Mixtral, Qwen3-MoE) and group-limited (DeepSeek-V2).
const char* const moe_fixtures[] = {"mixtral-bf16", "qwen3-moe-bf16", "deepseek-v2-qlora-yarn-bf16"};

/// The model's first sparse layer; null when it has none.
const cuda::device_layer* first_sparse_layer(const cuda::device_model& m) {
  for (const cuda::device_layer& l : m.layers)
    if (l.experts.router) return &l;
  return nullptr;
}

class CudaMoeFfn : public stream_gemm_fixture<> {
 protected:
  void TearDown() override {
    for (void* p : buffers_) cudaFree(p);
    stream_gemm_fixture::TearDown();
  }
  /// An FFN of the layer's experts for up to `max_tokens` tokens, in chunks of `chunk_tokens`.
  void init(cuda::moe_ffn& ffn, const cuda::device_model& m, int max_tokens, int chunk_tokens) {
    init(ffn, *m.cfg.moe, int(m.cfg.hidden_size), m.dt, max_tokens, chunk_tokens);
  }
  void init(cuda::moe_ffn& ffn, const moe_config& cfg, int hidden, cuda::act_dtype dt, int max_tokens,
            int chunk_tokens) {
    const cuda::moe_ffn::alloc_fn alloc = [&](size_t bytes, void** out) -> status {
      if (cudaMalloc(out, bytes) != cudaSuccess) return make_error(error_code::out_of_memory, "moe_ffn buffers");
      buffers_.push_back(*out);
      return {};
    };
    const auto st = ffn.init(cfg, hidden, dt, max_tokens, alloc, chunk_tokens);
    ASSERT_TRUE(st.ok()) << st.err().message;
  }
  /// The layer's output for `rows` tokens of x, written or added into a copy of `residual`.
  std::vector<float> run(cuda::moe_ffn& ffn, const cuda::device_experts& w, const dev_vec<uint16_t>& x, int rows,
                         const std::vector<float>& residual, bool accumulate) {
    dev_vec<float> out(residual);
    if (!accumulate) out.poison();
    const auto st = ffn.run(gemm_, w, x.get(), rows, out.get(), accumulate, s_);
    EXPECT_TRUE(st.ok()) << st.err().message;
    return out.download();
  }
  std::vector<void*> buffers_;
};

TEST_F(CudaMoeFfn, ChunkedExpertsGiveTheBitsOfOnePiece) {
  std::mt19937 rng(43);
  for (const char* model : moe_fixtures) {
    SCOPED_TRACE(model);
    auto loaded = cuda::load_device_model(model_dir(model), dtype_choice::auto_detect, false, s_);
    ASSERT_TRUE(loaded.ok()) << loaded.err().message;
    const cuda::device_model& m = *loaded.value();
    ASSERT_TRUE(m.cfg.moe.has_value());
    const int hidden = int(m.cfg.hidden_size);
    const cuda::device_layer* sparse = first_sparse_layer(m);
    ASSERT_NE(sparse, nullptr);
    // (tokens, chunk, GEMV rows): 1,100 tokens give these fixtures 275 to 412 rows an expert (the
    // 128-row tile) in one piece; chunks of 300 give 75 to 112 (64 rows) and the last chunk of
    // 200 tokens 50 to 75. Seven tokens with the one-token kernels forced: chunks of 3, 3 and 1.
    struct chunk_case {
      int rows, chunk, gemv_rows;
    };
    for (const chunk_case c : {chunk_case{1100, 300, 1}, chunk_case{7, 3, 8}}) {
      const std::string what = std::to_string(c.rows) + " tokens in chunks of " + std::to_string(c.chunk) +
                               (c.gemv_rows > 1 ? ", one-token kernels" : "");
      SCOPED_TRACE(what);
      gemm_.set_gemv_max_rows(c.gemv_rows);
      cuda::moe_ffn whole, chunked;
      init(whole, m, c.rows, cuda::moe_ffn_chunk_tokens);
      init(chunked, m, c.rows, c.chunk);
      const dev_vec<uint16_t> x(random_act_bits(m.dt, size_t(c.rows) * hidden, rng()));
      std::vector<float> residual(size_t(c.rows) * hidden);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : residual) v = nd(rng);
      for (bool accumulate : {false, true}) {
        const auto want = run(whole, sparse->experts, x, c.rows, residual, accumulate);
        const auto got = run(chunked, sparse->experts, x, c.rows, residual, accumulate);
        for (float v : want) ASSERT_TRUE(std::isfinite(v)) << (accumulate ? "accumulated" : "written");
        EXPECT_EQ(count_unequal(got, want), 0) << (accumulate ? "accumulated" : "written");
        if (accumulate) {
          EXPECT_GT(count_unequal(want, residual), 0) << "the experts added nothing";
        }
      }
      gemm_.set_gemv_max_rows(cuda::default_gemv_max_rows);
    }
  }
}

/// Bound on max |cuBLAS path - grouped GEMM| / max |grouped GEMM| over a layer's outputs: one ulp
/// of the activation dtype (2^-8 bf16, 2^-11 fp16). Both paths multiply the same 16-bit operands
/// with fp32 accumulation and round gate, up and SiLU(gate) * up to the activation dtype the same
/// way; only the order of the fp32 sums differs (by about 2^-24 x sqrt(K) of the terms), which
/// moves a rounded gate or up by one ulp only where the two sums straddle a rounding boundary: a
/// small fraction f of the activations, each then off by a few ulps of itself. Down sums K = inter
/// such products with random signs, so an output moves by about ulp x sqrt(f) of its own size, far
/// below one ulp of the largest output; an expert's wrong rows, weights or offsets move outputs
/// by their whole size.
double cublas_path_bound(cuda::act_dtype dt) { return dt == cuda::act_dtype::bf16 ? 0x1p-8 : 0x1p-11; }

/// Never the cuBLAS path, whatever the rows.
constexpr int kNeverCublas = INT_MAX;

std::string dt_name(cuda::act_dtype dt) { return dt == cuda::act_dtype::bf16 ? "bf16" : "fp16"; }

TEST_F(CudaMoeFfn, CublasPathMatchesTheGroupedGemmOnTheFixtures) {
  std::mt19937 rng(47);
  for (const char* model : moe_fixtures) {
    SCOPED_TRACE(model);
    auto loaded = cuda::load_device_model(model_dir(model), dtype_choice::auto_detect, false, s_);
    ASSERT_TRUE(loaded.ok()) << loaded.err().message;
    const cuda::device_model& m = *loaded.value();
    const int hidden = int(m.cfg.hidden_size);
    const cuda::device_layer* sparse = first_sparse_layer(m);
    ASSERT_NE(sparse, nullptr);
    // 1,100 tokens in one chunk and in chunks of 300 (the last of 200): with the threshold at 0
    // every chunk takes cuBLAS, 1 and 4 chunks.
    for (const int chunk : {cuda::moe_ffn_chunk_tokens, 300}) {
      constexpr int rows = 1100;
      SCOPED_TRACE("chunks of " + std::to_string(chunk));
      cuda::moe_ffn grouped, cublas;
      init(grouped, m, rows, chunk);
      init(cublas, m, rows, chunk);
      grouped.set_cublas_min_rows_per_expert(kNeverCublas);
      cublas.set_cublas_min_rows_per_expert(0);
      const dev_vec<uint16_t> x(random_act_bits(m.dt, size_t(rows) * hidden, rng()));
      std::vector<float> residual(size_t(rows) * hidden);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : residual) v = nd(rng);
      const auto want = run(grouped, sparse->experts, x, rows, residual, false);
      const auto got = run(cublas, sparse->experts, x, rows, residual, false);
      EXPECT_EQ(grouped.cublas_chunks(), 0);
      EXPECT_EQ(cublas.cublas_chunks(), (rows + chunk - 1) / chunk);
      for (float v : want) ASSERT_TRUE(std::isfinite(v));
      EXPECT_GT(count_unequal(want, std::vector<float>(want.size(), 0.0f)), 0) << "the experts gave nothing";
      EXPECT_LE(rel_max_err(got, want), cublas_path_bound(m.dt));
      // Added into the residual: the residual plus the written outputs, within the rounding of
      // that fp32 sum.
      const auto got_acc = run(cublas, sparse->experts, x, rows, residual, true);
      int off = 0;
      for (size_t i = 0; i < got_acc.size(); ++i) {
        const float sum = residual[i] + got[i];
        off += !(std::abs(got_acc[i] - sum) <= 0x1p-23f * std::abs(sum));
      }
      EXPECT_EQ(off, 0) << "accumulated outputs that are not the residual plus the written ones";
    }
  }
}

/// A sparse layer of `E` experts of the given sizes, top-k routing by softmax, with generated
/// weights and a router that routes unevenly and never to the experts of `empty`: token rows
/// carry `kPin` in column 0, and expert e's router row `bias[e] / kPin` there and small values
/// elsewhere, so that its logit is bias[e] plus noise of about unit size.
struct synthetic_layer {
  static constexpr float kXScale = 16.0f, kPin = 16.0f;
  moe_config cfg;
  int hidden = 0;
  dev_vec<uint16_t> router, gate_up, down;
  cuda::device_experts experts() const {
    return {.router = router.get(), .gate_up = gate_up.get(), .down = down.get()};
  }
};

void make_layer(synthetic_layer& l, cuda::act_dtype dt, int E, int top_k, int hidden, int inter,
                const std::vector<float>& bias, std::mt19937& rng) {
  l.cfg.num_experts = E;
  l.cfg.top_k = top_k;
  l.cfg.expert_intermediate_size = inter;
  l.cfg.renormalize = true;
  l.hidden = hidden;
  // x's columns past 0 are uniform in [-kXScale, kXScale] (sd kXScale / sqrt(3)): noise of sd 1.
  const float noise = std::sqrt(3.0f) / (synthetic_layer::kXScale * std::sqrt(float(hidden)));
  std::normal_distribution<float> nd(0.0f, noise);
  std::vector<uint16_t> router(size_t(E) * hidden);
  for (int e = 0; e < E; ++e)
    for (int c = 0; c < hidden; ++c)
      router[size_t(e) * hidden + c] = to_act_bits(dt, c == 0 ? bias[size_t(e)] / synthetic_layer::kPin : nd(rng));
  l.router.upload(router);
  // The experts' weights in [-1e-3, 1e-3] (generated on the device: Mixtral's take 2.8 GB); with
  // x of sd ~9 the gate and up products are ~0.3 and the activations well inside fp16's normal range.
  const size_t gate_up_elems = size_t(E) * 2 * inter * hidden, down_elems = size_t(E) * hidden * inter;
  l.gate_up.resize(gate_up_elems);
  l.down.resize(down_elems);
  ASSERT_EQ(cuda::fill_dummy_act(gpu::dummy_fill{.seed = rng(), .tensor_id = 1}, dt, l.gate_up.get(), gate_up_elems,
                                 nullptr),
            0);
  ASSERT_EQ(cuda::fill_dummy_act(gpu::dummy_fill{.seed = rng(), .tensor_id = 2}, dt, l.down.get(), down_elems, nullptr),
            0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

/// `tokens` rows of x for a synthetic_layer: uniform in [-kXScale, kXScale], column 0 kPin.
dev_vec<uint16_t> layer_input(cuda::act_dtype dt, int tokens, int hidden, std::mt19937& rng) {
  std::vector<uint16_t> x = random_act_bits(dt, size_t(tokens) * hidden, rng(), synthetic_layer::kXScale);
  for (int t = 0; t < tokens; ++t) x[size_t(t) * hidden] = to_act_bits(dt, synthetic_layer::kPin);
  return dev_vec<uint16_t>(x);
}

/// An expert shape with its uneven routing and the threshold its test sets.
struct cublas_case {
  const char* name;
  int experts, top_k, hidden, inter;
  int min_rows;                      ///< the cuBLAS path's threshold (rows an expert; -1: by the experts' size)
  std::vector<int> token_counts;     ///< just below, at and above it
  int chunk;                         ///< tokens a chunk
  bool (*empty)(int e);              ///< experts routed nothing
  int lanes;                         ///< the cuBLAS path's lanes at this chunk (moe_ffn::init)
};

// Mixtral-8x7B at its default threshold, 256 rows an expert by its experts' size (1,024 tokens x
// top-2 over 8 experts), two experts of eight empty, in chunks of 4,000 tokens: 1,023 tokens are
// just below it, 1,024 at it, 1,536 at 1.5 times it, 9,000 two chunks above it and one of 1,000
// below. Qwen3-30B-A3B's 128 experts at 256 (4,096 tokens x top-8), one in seven empty, in
// chunks of 6,000 tokens: 4,095 just below, 4,096 at it, 6,000 at 1.5 times it, 9,000 one above,
// one below. Mixtral's scratch holds one piece of 1,088 rows at 4,000 tokens, Qwen3's four lanes
// of full pieces (whose rounded rows cross into the next lane's unless the plan moves them).
static_assert(cuda::moe_cublas_min_rows_for(14336, 4096) == 256, "the Mixtral case's token counts");
const cublas_case cublas_cases[] = {
    {"Mixtral-8x7B", 8, 2, 4096, 14336, cuda::moe_cublas_rows_by_expert_size, {1023, 1024, 1536, 9000}, 4000,
     [](int e) { return e == 2 || e == 5; }, 1},
    {"Qwen3-30B-A3B", 128, 8, 2048, 768, 256, {4095, 4096, 6000, 9000}, 6000, [](int e) { return e % 7 == 3; },
     cuda::moe_cublas_lanes},
};

TEST_F(CudaMoeFfn, CublasPathMatchesTheGroupedGemmAtModelShapesWithUnevenRouting) {
  std::mt19937 rng(53);
  for (cuda::act_dtype dt : {cuda::act_dtype::bf16, cuda::act_dtype::fp16}) {
    for (const cublas_case& c : cublas_cases) {
      SCOPED_TRACE(dt_name(dt) + ", " + c.name);
      // Uneven: biases from 0 to 3 (the best expert takes most tokens), -30 for the empty ones.
      std::vector<float> bias(static_cast<size_t>(c.experts));
      for (int e = 0; e < c.experts; ++e) bias[size_t(e)] = c.empty(e) ? -30.0f : 0.25f * float((e * 5) % 13);
      synthetic_layer layer;
      ASSERT_NO_FATAL_FAILURE(make_layer(layer, dt, c.experts, c.top_k, c.hidden, c.inter, bias, rng));
      const int max_tokens = *std::max_element(c.token_counts.begin(), c.token_counts.end());
      cuda::moe_ffn grouped, cublas, one_lane;
      init(grouped, layer.cfg, c.hidden, dt, max_tokens, c.chunk);
      init(cublas, layer.cfg, c.hidden, dt, max_tokens, c.chunk);
      init(one_lane, layer.cfg, c.hidden, dt, max_tokens, c.chunk);
      grouped.set_cublas_min_rows_per_expert(kNeverCublas);
      cublas.set_cublas_min_rows_per_expert(c.min_rows);
      one_lane.set_cublas_min_rows_per_expert(c.min_rows);
      one_lane.set_cublas_lanes_in_use(1);
      EXPECT_EQ(cublas.cublas_lanes(), c.lanes);
      const int min_rows = cublas.cublas_min_rows_per_expert();
      EXPECT_EQ(min_rows, c.min_rows >= 0 ? c.min_rows : cuda::moe_cublas_min_rows_for(c.inter, c.hidden));
      for (int tokens : c.token_counts) {
        SCOPED_TRACE(std::to_string(tokens) + " tokens");
        const dev_vec<uint16_t> x = layer_input(dt, tokens, c.hidden, rng);
        const std::vector<float> residual(size_t(tokens) * c.hidden, 0.0f);
        // The chunks at or past the threshold take cuBLAS; the rest the grouped GEMM.
        int64_t cublas_chunks = 0;
        for (int first = 0; first < tokens; first += c.chunk)
          cublas_chunks += cuda::reaches_moe_cublas_rows(std::min(c.chunk, tokens - first) * c.top_k, c.experts,
                                                         min_rows);
        const int64_t before = cublas.cublas_chunks();
        const auto want = run(grouped, layer.experts(), x, tokens, residual, false);
        const auto got = run(cublas, layer.experts(), x, tokens, residual, false);
        const auto serial = run(one_lane, layer.experts(), x, tokens, residual, false);
        EXPECT_EQ(cublas.cublas_chunks() - before, cublas_chunks);
        for (float v : want) ASSERT_TRUE(std::isfinite(v));
        EXPECT_GT(count_unequal(want, residual), 0) << "the experts gave nothing";
        if (cublas_chunks == 0) {
          EXPECT_EQ(count_unequal(got, want), 0) << "below the threshold: the grouped GEMM's bits";
        } else {
          EXPECT_LE(rel_max_err(got, want), cublas_path_bound(dt));
          EXPECT_LE(rel_max_err(serial, want), cublas_path_bound(dt)) << "one lane";
          // The lanes race only where the plan lets two write one row: the bits would vary.
          for (int again = 0; again < 4; ++again)
            EXPECT_EQ(count_unequal(run(cublas, layer.experts(), x, tokens, residual, false), got), 0)
                << "run " << again + 2 << " gave other bits";
        }
      }
      EXPECT_EQ(grouped.cublas_chunks(), 0);
      EXPECT_GT(cublas.cublas_chunks(), 0);
      EXPECT_EQ(one_lane.cublas_multi_lane_chunks(), 0);
      if (c.lanes > 1) {
        EXPECT_GT(cublas.cublas_multi_lane_chunks(), 0) << "the chunks ran on one lane";
      }
    }
  }
}

// A decode step is captured into a CUDA graph: the cuBLAS path's host wait would break the
// capture, so a capturing stream takes the grouped GEMM at any threshold, and the graph replays
// the grouped GEMM's bits.
TEST_F(CudaMoeFfn, GraphCaptureNeverTakesTheCublasPath) {
  std::mt19937 rng(59);
  auto loaded = cuda::load_device_model(model_dir("mixtral-bf16"), dtype_choice::auto_detect, false, s_);
  ASSERT_TRUE(loaded.ok()) << loaded.err().message;
  const cuda::device_model& m = *loaded.value();
  const cuda::device_layer* sparse = first_sparse_layer(m);
  ASSERT_NE(sparse, nullptr);
  const int hidden = int(m.cfg.hidden_size), rows = 64;
  cuda::moe_ffn grouped, forced;
  init(grouped, m, rows, cuda::moe_ffn_chunk_tokens);
  init(forced, m, rows, cuda::moe_ffn_chunk_tokens);
  grouped.set_cublas_min_rows_per_expert(kNeverCublas);
  forced.set_cublas_min_rows_per_expert(0);
  const dev_vec<uint16_t> x(random_act_bits(m.dt, size_t(rows) * hidden, rng()));
  const std::vector<float> residual(size_t(rows) * hidden, 0.0f);
  const auto want = run(grouped, sparse->experts, x, rows, residual, false);
  // Eager, the forced FFN takes cuBLAS (and sets up every kernel before the capture).
  (void)run(forced, sparse->experts, x, rows, residual, false);
  ASSERT_EQ(forced.cublas_chunks(), 1);
  dev_vec<float> out(residual);
  out.poison();
  ASSERT_EQ(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const auto st = forced.run(gemm_, sparse->experts, x.get(), rows, out.get(), false, s_);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s_, &graph), cudaSuccess) << "the capture broke";
  ASSERT_TRUE(st.ok()) << st.err().message;
  EXPECT_EQ(forced.cublas_chunks(), 1) << "captured with the cuBLAS path";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
  EXPECT_EQ(count_unequal(out.download(), want), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The chunk size is host arithmetic: no device needed.
TEST(MoeChunkTokens, GrowsToTheRowsAnExpertWithinTheBufferBudget) {
  struct model {
    const char* name;
    int experts, top_k, hidden, inter, want;
  };
  const auto buffer_bytes = [](const model& m, long long tokens) {
    return tokens * m.top_k * (static_cast<long long>(m.inter) * 2 + static_cast<long long>(m.hidden) * 4);
  };
  for (const model& m : {model{"Mixtral-8x7B", 8, 2, 4096, 14336, 8192},
                         model{"Qwen3-30B-A3B", 128, 8, 2048, 768, 32768},
                         model{"DeepSeek-V2-Lite", 64, 6, 2048, 1408, 22528},
                         model{"DeepSeek-V3 (the byte cap)", 256, 8, 7168, 2048, 12288},
                         model{"one expert (the floor)", 1, 1, 64, 128, cuda::moe_ffn_chunk_tokens}}) {
    SCOPED_TRACE(m.name);
    const int tokens = cuda::moe_chunk_tokens_for(m.experts, m.top_k, m.hidden, m.inter, 2);
    EXPECT_EQ(tokens, m.want);
    EXPECT_EQ(tokens % 1024, 0);
    EXPECT_GE(tokens, cuda::moe_ffn_chunk_tokens);
    const bool floor = tokens == cuda::moe_ffn_chunk_tokens;
    const bool enough_rows = static_cast<long long>(tokens) * m.top_k >=
                             static_cast<long long>(cuda::moe_chunk_rows_per_expert) * m.experts;
    // Either every expert gets its rows on average or the buffers reach the budget (or the floor).
    EXPECT_TRUE(floor || enough_rows || buffer_bytes(m, tokens + 1024) > cuda::moe_chunk_max_bytes);
    EXPECT_TRUE(floor || buffer_bytes(m, tokens) <= cuda::moe_chunk_max_bytes);
  }
}

}  // namespace
}  // namespace actorserve::testing
