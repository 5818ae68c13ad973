// The mixture-of-experts kernels against the host code the CPU executor runs: the router (greedy
// and group-limited) against gpu/model/moe_router (ties included), the permutation against
// expert_permutation, the grouped GEMM and the expert GEMV against fp32 products of the same
// rounded operands (each tile shape), the combine against combine_rows; the fused one-token
// kernels bit for bit against the kernels they replace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "config/moe_config.hpp"
#include "cuda_test_util.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/model/expert_permutation.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/moe_router.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Logits with ties: some tokens repeat one logit over several experts, a few are all equal.
std::vector<float> router_logits(int n, int E, std::mt19937& rng) {
  auto logits = randn(size_t(n) * E, rng, 2.0f);
  for (int t = 0; t < n; ++t) {
    float* row = &logits[size_t(t) * E];
    if (t % 7 == 3) std::fill(row, row + E, 0.25f);
    if (t % 5 == 1)
      for (int e = 1; e < E; e += 3) row[e] = row[0];
  }
  return logits;
}

/// Each token's top_k distinct experts, in random order.
std::vector<int32_t> random_routes(int n, int E, int k, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(E));
  std::vector<int32_t> out;
  std::iota(ids.begin(), ids.end(), 0);
  for (int t = 0; t < n; ++t) {
    // Every third token lists its experts ascending, the others in random order.
    std::shuffle(ids.begin(), ids.end(), rng);
    if (t % 3 == 0) std::sort(ids.begin(), ids.begin() + k);
    out.insert(out.end(), ids.begin(), ids.begin() + k);
  }
  return out;
}

struct router_case {
  int experts, top_k;
  moe_scoring scoring;
  bool renormalize;
  double scaling;
  int num_groups = 1, topk_groups = 1;   ///< group_limited_greedy when num_groups > 1
};

TEST_F(CudaMoe, RouterMatchesTheCpuRouterTiesIncluded) {
  const router_case cases[] = {{4, 2, moe_scoring::softmax, true, 1.0},     // Mixtral-tiny
                               {8, 2, moe_scoring::softmax, true, 1.0},     // Mixtral-8x7B
                               {128, 8, moe_scoring::softmax, false, 1.0},  // Qwen3-30B-A3B
                               {60, 4, moe_scoring::softmax, true, 1.0},
                               {16, 4, moe_scoring::sigmoid, false, 2.5},
                               {1024, 32, moe_scoring::softmax, true, 1.0},
                               {8, 2, moe_scoring::softmax, false, 2.5, 4, 2},      // deepseek-v2-qlora-yarn-bf16
                               {160, 6, moe_scoring::softmax, false, 16.0, 8, 3},   // DeepSeek-V2
                               {64, 6, moe_scoring::softmax, false, 1.0, 64, 6},    // one expert per group
                               {48, 4, moe_scoring::softmax, false, 1.0, 12, 1}};       // top_k = one whole group
  std::mt19937 rng(5);
  for (const router_case& rc : cases) {
    moe_config cfg;
    cfg.num_experts = rc.experts;
    cfg.top_k = rc.top_k;
    cfg.scoring = rc.scoring;
    cfg.renormalize = rc.renormalize;
    cfg.routed_scaling_factor = rc.scaling;
    if (rc.num_groups > 1) {
      cfg.topk_method = moe_topk_method::group_limited_greedy;
      cfg.num_groups = rc.num_groups;
      cfg.topk_groups = rc.topk_groups;
    }
    const int n = 300, k = rc.top_k;
    const auto logits = router_logits(n, rc.experts, rng);
    std::vector<int32_t> want_e(size_t(n) * k);
    std::vector<float> want_w(size_t(n) * k);
    gpu::moe_router(cfg).route(logits.data(), size_t(n), want_e.data(), want_w.data());
    dev_vec<float> d_logits(logits), d_w(size_t(n) * k);
    dev_vec<int32_t> d_e(size_t(n) * k);
    d_e.poison();
    cuda::moe_route_args a;
    a.logits = d_logits.get();
    a.n = n;
    a.num_experts = rc.experts;
    a.top_k = k;
    a.num_groups = rc.num_groups;
    a.topk_groups = rc.topk_groups;
    a.sigmoid = rc.scoring == moe_scoring::sigmoid;
    a.renormalize = rc.renormalize;
    a.scaling = float(rc.scaling);
    a.experts = d_e.get();
    a.weights = d_w.get();
    ASSERT_EQ(cuda::moe_route(a, nullptr), 0);
    const auto got_e = d_e.download();
    const auto got_w = d_w.download();
    EXPECT_EQ(got_e, want_e) << rc.experts << " experts, top " << k;
    // The weights agree to rounding, not to the bit: the device's expf is within 2 ulps where
    // std::exp is within 1, the warp sums a softmax's exponentials in its shuffle-tree order where
    // the CPU sums them in index order (over 160 experts the two sums differ by several ulps), and
    // the device compiler contracts multiply-adds. 32 fp32 epsilons of the weight leave room for
    // that (seen: 10) and still catch a wrong score, order or scaling.
    for (size_t i = 0; i < got_w.size(); ++i)
      ASSERT_NEAR(got_w[i], want_w[i], 32 * FLT_EPSILON * std::max(1.0f, std::abs(want_w[i])))
          << rc.experts << " slot " << i;
  }
}

TEST_F(CudaMoe, RouterGemvIsBitIdenticalToGemvThenRoute) {
  struct gemv_case {
    router_case r;
    int hidden;
  };
  const gemv_case cases[] = {{{128, 8, moe_scoring::softmax, false, 1.0}, 2048},  // Qwen3-30B-A3B
                             {{8, 2, moe_scoring::softmax, true, 1.0}, 64},
                             {{60, 4, moe_scoring::sigmoid, true, 2.5}, 264},
                             {{1024, 32, moe_scoring::softmax, true, 1.0}, 520},
                             {{160, 6, moe_scoring::softmax, false, 16.0, 8, 3}, 512},  // DeepSeek-V2's routing
                             {{8, 3, moe_scoring::softmax, false, 2.5, 4, 2}, 128},     // deepseek-v2 fixtures
                             {{64, 6, moe_scoring::sigmoid, true, 2.5, 8, 4}, 256}};
  std::mt19937 rng(23);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (const gemv_case& gc : cases) {
      const router_case& rc = gc.r;
      const std::string what = std::string(dt == act_dtype::bf16 ? "bf16, " : "fp16, ") +
                               std::to_string(rc.experts) + " experts, top " + std::to_string(rc.top_k) + " of " +
                               std::to_string(rc.topk_groups) + "/" + std::to_string(rc.num_groups) + " groups";
      const int E = rc.experts, k = rc.top_k, H = gc.hidden;
      dev_vec<uint16_t> d_x(random_act_bits(dt, size_t(H), rng())), d_w(random_act_bits(dt, size_t(E) * H, rng()));
      const size_t ne = static_cast<size_t>(E), nk = static_cast<size_t>(k);
      dev_vec<float> want_logits(ne), got_logits(ne), want_w(nk), got_w(nk);
      dev_vec<int32_t> want_e(nk), got_e(nk), counter(std::vector<int32_t>{0});
      ASSERT_EQ(cuda::gemv(dt, d_x.get(), 1, H, d_w.get(), E, want_logits.get(), 0.0f, nullptr), 0) << what;
      cuda::moe_route_args a{.logits = want_logits.get(), .n = 1, .num_experts = E, .top_k = k,
                             .num_groups = rc.num_groups, .topk_groups = rc.topk_groups,
                             .sigmoid = rc.scoring == moe_scoring::sigmoid, .renormalize = rc.renormalize,
                             .scaling = float(rc.scaling), .experts = want_e.get(), .weights = want_w.get()};
      ASSERT_EQ(cuda::moe_route(a, nullptr), 0) << what;
      a.experts = got_e.get();
      a.weights = got_w.get();
      const cuda::moe_router_gemv_args g{.x = d_x.get(), .w = d_w.get(), .hidden = H, .logits = got_logits.get(),
                                         .counter = counter.get()};
      for (int launch = 0; launch < 2; ++launch) {  // the second finds the counter back at 0
        got_e.poison();
        got_logits.poison();
        ASSERT_EQ(cuda::moe_route_gemv(dt, g, a, nullptr), 0) << what;
        EXPECT_EQ(got_logits.download(), want_logits.download()) << what;
        EXPECT_EQ(got_e.download(), want_e.download()) << what;
        EXPECT_EQ(got_w.download(), want_w.download()) << what;
        EXPECT_EQ(counter.download(), std::vector<int32_t>{0}) << what;
      }
    }
  }
}

TEST_F(CudaMoe, NormInTheRouterIsBitIdenticalToAddRmsnormThenRouterGemv) {
  struct norm_case {
    router_case r;
    int hidden;
    bool delta, bias;
  };
  const norm_case cases[] = {{{8, 2, moe_scoring::softmax, true, 1.0}, 4096, true, false},  // Mixtral-8x7B
                             {{8, 2, moe_scoring::softmax, true, 1.0}, 4096, false, false},
                             {{4, 2, moe_scoring::sigmoid, false, 2.5}, 1024, true, true},
                             {{6, 3, moe_scoring::softmax, true, 1.0, 3, 2}, 2056, true, true},
                             {{8, 8, moe_scoring::softmax, true, 1.0}, 3000, true, false}};
  EXPECT_TRUE(cuda::moe_norm_route_supported(4096, 8));
  EXPECT_FALSE(cuda::moe_norm_route_supported(4096, 16));  // Qwen3's and DeepSeek's routers take more than one block
  EXPECT_FALSE(cuda::moe_norm_route_supported(1016, 8));   // add_rmsnorm's block is not 1,024 threads there
  EXPECT_FALSE(cuda::moe_norm_route_supported(6144, 8));
  std::mt19937 rng(29);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (const norm_case& nc : cases) {
      const router_case& rc = nc.r;
      const int E = rc.experts, k = rc.top_k, H = nc.hidden;
      const std::string what = std::string(dt == act_dtype::bf16 ? "bf16, " : "fp16, ") + std::to_string(E) +
                               " experts, top " + std::to_string(k) + ", hidden " + std::to_string(H) +
                               (nc.delta ? ", delta" : "") + (nc.bias ? ", bias" : "");
      const size_t h = static_cast<size_t>(H), ne = static_cast<size_t>(E), nk = static_cast<size_t>(k);
      const auto residual = randn(h, rng, 4.0f), delta = randn(h, rng), bias = randn(h, rng, 0.5f);
      dev_vec<float> d_delta(delta), d_bias(bias), d_norm_w(randn(h, rng, 0.3f));
      dev_vec<uint16_t> d_w(random_act_bits(dt, ne * h, rng()));
      // What runs today: add_rmsnorm, then the router GEMV with the routing.
      dev_vec<float> want_res(residual), want_logits(ne), want_w(nk);
      dev_vec<uint16_t> want_x(h);
      dev_vec<int32_t> want_e(nk), counter(std::vector<int32_t>{0});
      const float* del = nc.delta ? d_delta.get() : nullptr;
      const float* b = nc.bias ? d_bias.get() : nullptr;
      ASSERT_EQ(cuda::add_rmsnorm(dt, want_res.get(), del, b, d_norm_w.get(), 1e-5f, nullptr, 1, H, want_x.get(),
                                  nullptr),
                0)
          << what;
      cuda::moe_route_args a{.logits = nullptr, .n = 1, .num_experts = E, .top_k = k, .num_groups = rc.num_groups,
                             .topk_groups = rc.topk_groups, .sigmoid = rc.scoring == moe_scoring::sigmoid,
                             .renormalize = rc.renormalize, .scaling = float(rc.scaling), .experts = want_e.get(),
                             .weights = want_w.get()};
      ASSERT_EQ(cuda::moe_route_gemv(dt, {.x = want_x.get(), .w = d_w.get(), .hidden = H, .logits = want_logits.get(),
                                          .counter = counter.get()},
                                     a, nullptr),
                0)
          << what;
      // The same in one launch.
      dev_vec<float> got_res(residual), got_logits(ne), got_w(nk);
      dev_vec<uint16_t> got_x(h);
      dev_vec<int32_t> got_e(nk);
      got_x.poison();
      got_logits.poison();
      got_e.poison();
      a.experts = got_e.get();
      a.weights = got_w.get();
      const cuda::moe_norm_args n{.residual = got_res.get(), .delta = del, .bias = b, .weight = d_norm_w.get(),
                                  .eps = 1e-5f, .out = got_x.get()};
      ASSERT_EQ(cuda::moe_norm_route_gemv(dt, n, {.x = got_x.get(), .w = d_w.get(), .hidden = H,
                                                  .logits = got_logits.get()},
                                          a, nullptr),
                0)
          << what;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      EXPECT_EQ(got_res.download(), want_res.download()) << what;
      EXPECT_EQ(got_x.download(), want_x.download()) << what;
      EXPECT_EQ(got_logits.download(), want_logits.download()) << what;
      EXPECT_EQ(got_e.download(), want_e.download()) << what;
      EXPECT_EQ(got_w.download(), want_w.download()) << what;
    }
  }
  // A shape it does not take is refused, not computed another way.
  dev_vec<float> res(std::vector<float>(2048, 1.0f)), w(std::vector<float>(2048, 1.0f)), logits(16), weights(2);
  dev_vec<uint16_t> x(2048), router(std::vector<uint16_t>(16 * 2048, 0));
  dev_vec<int32_t> experts(2);
  const cuda::moe_route_args a{.n = 1, .num_experts = 16, .top_k = 2, .experts = experts.get(),
                               .weights = weights.get()};
  EXPECT_EQ(cuda::moe_norm_route_gemv(act_dtype::bf16, {.residual = res.get(), .weight = w.get(), .out = x.get()},
                                      {.w = router.get(), .hidden = 2048, .logits = logits.get()}, a, nullptr),
            int(cudaErrorInvalidValue));
}

/// The device permutation of `routes`, checked against permute_by_expert; returns its arrays.
struct device_permutation {
  dev_vec<int32_t> offsets, tiles, sorted, pair_rows;
};

/// Every tile shape of the grouped GEMM the device runs (all five on compute capability 9.x).
std::vector<cuda::moe_gemm_tile> device_tiles() {
  std::vector<cuda::moe_gemm_tile> out;
  for (cuda::moe_gemm_tile t : cuda::moe_gemm_tiles)
    if (cuda::moe_gemm_tile_runs(t, cuda::largest_moe_gemm_tile())) out.push_back(t);
  return out;
}

std::string tile_name(cuda::moe_gemm_tile t) { return "m" + std::to_string(cuda::moe_tile_rows(t)); }

void permute_and_check(const std::vector<int32_t>& routes, int k, int E, device_permutation& d,
                       cuda::moe_gemm_tile tile = cuda::moe_gemm_tile::m32) {
  const int P = int(routes.size());
  gpu::expert_permutation want;
  gpu::permute_by_expert(routes, size_t(k), size_t(E), want);
  dev_vec<int32_t> d_routes(routes);
  d.offsets.resize(size_t(E) + 1);
  d.tiles.resize(size_t(E) + 1);
  d.sorted.resize(size_t(std::max(P, 1)));
  d.pair_rows.resize(size_t(std::max(P, 1)));
  d.sorted.poison();
  d.pair_rows.poison();
  cuda::moe_permute_args a;
  a.experts = d_routes.get();
  a.num_pairs = P;
  a.num_experts = E;
  a.offsets = d.offsets.get();
  a.tile = tile;
  a.tile_offsets = d.tiles.get();
  a.sorted_pairs = d.sorted.get();
  a.pair_rows = d.pair_rows.get();
  ASSERT_EQ(cuda::moe_permute(a, nullptr), 0);
  EXPECT_EQ(d.offsets.download(), want.offsets);
  std::vector<int32_t> tiles(size_t(E) + 1, 0);
  const int rows = cuda::moe_tile_rows(tile);
  for (int e = 0; e < E; ++e) tiles[e + 1] = tiles[e] + (want.count(e) + rows - 1) / rows;
  EXPECT_EQ(d.tiles.download(), tiles) << tile_name(tile);
  EXPECT_LE(tiles[E], cuda::moe_max_tiles(P, E, tile)) << tile_name(tile);
  if (P == 0) return;
  auto sorted = d.sorted.download();
  std::vector<int32_t> tokens(sorted.size());
  for (size_t r = 0; r < sorted.size(); ++r) tokens[r] = sorted[r] / k;
  EXPECT_EQ(tokens, want.source_token);
  EXPECT_EQ(d.pair_rows.download(), want.slot_row);
}

TEST_F(CudaMoe, PermutationMatchesExpertPermutation) {
  std::mt19937 rng(11);
  const std::vector<std::tuple<int, int, int>> shapes = {{1, 4, 2},     {3, 8, 2},     {37, 8, 2},
                                                         {300, 128, 8}, {2000, 16, 4}, {4096, 8, 2}};
  for (auto [n, E, k] : shapes) {
    const auto routes = random_routes(n, E, k, rng);
    for (cuda::moe_gemm_tile tile : device_tiles()) {
      device_permutation d;
      permute_and_check(routes, k, E, d, tile);
    }
  }
}

/// Output row r's fp32 product over the rounded operands: x[token] . W_expert[c] for c < N, with
/// (token, expert) = of_row(r).
template <class OfRow>
std::vector<float> expert_product(act_dtype dt, const std::vector<uint16_t>& xb, const std::vector<uint16_t>& wb,
                                  int rows, int N, int K, OfRow of_row) {
  std::vector<float> want(size_t(rows) * N);
  for (int r = 0; r < rows; ++r) {
    const auto [token, expert] = of_row(r);
    for (int c = 0; c < N; ++c) {
      double acc = 0;
      for (int i = 0; i < K; ++i)
        acc += double(from_act_bits(dt, xb[size_t(token) * K + i])) *
               from_act_bits(dt, wb[(size_t(expert) * N + c) * K + i]);
      want[size_t(r) * N + c] = float(acc);
    }
  }
  return want;
}

/// Runs `launch(dt, g, stream)` into an fp32 and a dt output and checks both against `want`.
template <class Args, class Launch>
void expect_both_outputs(act_dtype dt, Args g, Launch launch, const std::vector<float>& want, const std::string& what) {
  dev_vec<float> y(want.size());
  dev_vec<uint16_t> y_act(want.size());
  y.poison();
  g.y = y.get();
  g.y_act = false;
  ASSERT_EQ(launch(dt, g, nullptr), 0) << what;
  g.y = y_act.get();
  g.y_act = true;
  ASSERT_EQ(launch(dt, g, nullptr), 0) << what;
  EXPECT_LT(rel_max_err(y.download(), want), 1e-4) << what;
  EXPECT_LT(rel_max_err(download_act(dt, y_act), want), dt == act_dtype::bf16 ? 8e-3 : 1e-3) << what;
}

std::string shape_name(act_dtype dt, int n, int E, int k, int N, int K) {
  return std::string(dt == act_dtype::bf16 ? "bf16" : "fp16") + ": " + std::to_string(n) + " tokens, " +
         std::to_string(E) + " experts, top " + std::to_string(k) + ", N " + std::to_string(N) + ", K " +
         std::to_string(K);
}

/// Runs `launch(dt, g, stream)` unfused, g's 2 * inter gate/up columns into a 16-bit gate_up then
/// silu_and_mul_act, and fused (silu_and_mul, inter columns), and checks that both give the same
/// bits. g holds the operands of P pairs; its output fields are set here.
template <class Args, class Launch>
void expect_silu_fused_bit_identical(act_dtype dt, Args g, int P, int inter, Launch launch, const std::string& what) {
  dev_vec<uint16_t> gate_up(size_t(P) * 2 * inter), want(size_t(P) * inter), got(size_t(P) * inter);
  g.n = 2 * inter;
  g.y = gate_up.get();
  g.y_act = true;
  ASSERT_EQ(launch(dt, g, nullptr), 0) << what;
  ASSERT_EQ(cuda::silu_and_mul_act(dt, gate_up.get(), P, inter, want.get(), nullptr), 0) << what;
  got.poison();
  g.n = inter;
  g.y = got.get();
  g.y_act = false;
  g.silu_and_mul = true;
  ASSERT_EQ(launch(dt, g, nullptr), 0) << what;
  EXPECT_EQ(got.download(), want.download()) << what;
}

TEST_F(CudaMoe, GroupedGemmMatchesTheProductOfItsRoundedOperands) {
  std::mt19937 rng(3);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    // One row; partial column blocks and K past a whole slice (a multiple of 8, not of the 64 of
    // a slice; shorter than one slice); several tiles per expert with a partial last one; many
    // experts, some empty; ragged sizes around one tile; more slices than pipeline stages.
    const std::vector<std::tuple<int, int, int, int, int>> shapes = {
        {1, 8, 2, 64, 64},     {70, 8, 2, 96, 72},    {500, 4, 2, 200, 136}, {33, 16, 4, 128, 256},
        {3, 16, 2, 136, 40},   {5, 64, 8, 130, 8},    {200, 64, 4, 256, 520}, {97, 24, 6, 384, 328}};
    for (auto [n, E, k, N, K] : shapes) {
      const auto routes = random_routes(n, E, k, rng);
      gpu::expert_permutation host;
      gpu::permute_by_expert(routes, size_t(k), size_t(E), host);
      const auto xb = random_act_bits(dt, size_t(n) * K, rng());
      const auto wb = random_act_bits(dt, size_t(E) * N * K, rng(), 0.25f);
      dev_vec<uint16_t> d_x(xb), d_w(wb);
      const auto want = expert_product(dt, xb, wb, n * k, N, K, [&](int r) {
        const auto e = std::upper_bound(host.offsets.begin(), host.offsets.end(), r) - host.offsets.begin() - 1;
        return std::pair{host.source_token[size_t(r)], int(e)};
      });
      for (cuda::moe_gemm_tile tile : device_tiles()) {
        device_permutation perm;
        permute_and_check(routes, k, E, perm, tile);
        const cuda::grouped_gemm_args g{.a = d_x.get(), .a_rows = perm.sorted.get(), .a_rows_div = k,
                                        .w = d_w.get(), .offsets = perm.offsets.get(),
                                        .tile_offsets = perm.tiles.get(), .tile = tile, .num_pairs = n * k,
                                        .num_experts = E, .n = N, .k = K};
        expect_both_outputs(dt, g, cuda::grouped_gemm, want, shape_name(dt, n, E, k, N, K) + ", " + tile_name(tile));
      }
    }
  }
}

TEST_F(CudaMoe, GroupedGemmWithSiluIsBitIdenticalToGemmThenSiluAndMul) {
  std::mt19937 rng(29);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    // (tokens, experts, top_k, inter, K): inter a multiple of a block's 64 outputs and not, below
    // one block; K a multiple of 8 only; empty experts; several tiles per expert.
    const std::vector<std::tuple<int, int, int, int, int>> shapes = {
        {1, 8, 2, 64, 64}, {70, 8, 2, 96, 72}, {5, 64, 8, 40, 136}, {300, 4, 2, 200, 264}, {97, 24, 6, 128, 520}};
    for (auto [n, E, k, inter, K] : shapes) {
      const int P = n * k;
      const auto routes = random_routes(n, E, k, rng);
      dev_vec<uint16_t> d_x(random_act_bits(dt, size_t(n) * K, rng()));
      dev_vec<uint16_t> d_w(random_act_bits(dt, size_t(E) * 2 * inter * K, rng(), 0.25f));
      for (cuda::moe_gemm_tile tile : device_tiles()) {
        device_permutation perm;
        permute_and_check(routes, k, E, perm, tile);
        const cuda::grouped_gemm_args g{.a = d_x.get(), .a_rows = perm.sorted.get(), .a_rows_div = k,
                                        .w = d_w.get(), .offsets = perm.offsets.get(),
                                        .tile_offsets = perm.tiles.get(), .tile = tile, .num_pairs = P,
                                        .num_experts = E, .k = K};
        expect_silu_fused_bit_identical(dt, g, P, inter, cuda::grouped_gemm,
                                        shape_name(dt, n, E, k, inter, K) + ", " + tile_name(tile));
      }
    }
  }
}

TEST_F(CudaMoe, ExpertGemvMatchesTheProductOfItsRoundedOperandsInPairOrder) {
  std::mt19937 rng(13);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    const std::vector<std::tuple<int, int, int, int, int>> shapes = {{1, 8, 2, 256, 64}, {1, 128, 8, 1536, 2048},
                                                                     {3, 4, 2, 100, 264}};
    for (auto [n, E, k, N, K] : shapes) {
      const auto routes = random_routes(n, E, k, rng);
      const auto xb = random_act_bits(dt, size_t(n) * K, rng());
      const auto wb = random_act_bits(dt, size_t(E) * N * K, rng(), 0.25f);
      dev_vec<uint16_t> d_x(xb), d_w(wb);
      dev_vec<int32_t> d_e(routes);
      const cuda::expert_gemv_args g{.a = d_x.get(), .a_rows_div = k, .experts = d_e.get(), .w = d_w.get(),
                                     .num_pairs = n * k, .n = N, .k = K};
      const int kk = k;
      const auto want = expert_product(dt, xb, wb, n * k, N, K,
                                       [&](int p) { return std::pair{p / kk, int(routes[size_t(p)])}; });
      expect_both_outputs(dt, g, cuda::expert_gemv, want, shape_name(dt, n, E, k, N, K));
    }
  }
}

/// One-token shapes (tokens, experts, top_k, hidden, inter): Qwen3-30B-A3B's sizes over 16
/// experts; a few tokens with inter a multiple of 8 but not of 256; an odd hidden (the down
/// kernel's last warp has one column; the gate/up GEMV, whose K it is, takes it rounded up to 8);
/// inter 8.
const std::vector<std::tuple<int, int, int, int, int>> one_token_shapes = {
    {1, 16, 8, 2048, 768}, {3, 8, 2, 200, 264}, {2, 16, 4, 101, 72}, {4, 4, 2, 64, 8},
    {1, 64, 6, 2048, 1408},  // DeepSeek-V2-Lite's experts
    {2, 8, 2, 256, 4096},    // rows long enough for a warp a slot (moe_down_slot_warps_min_k)
    {1, 32, 12, 96, 4096}};  // and more slots than that kernel's warps a block

TEST_F(CudaMoe, ExpertGemvWithSiluIsBitIdenticalToGemvThenSiluAndMul) {
  std::mt19937 rng(17);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (auto [n, E, k, h, inter] : one_token_shapes) {
      const int hidden = (h + 7) / 8 * 8;
      const std::string what = shape_name(dt, n, E, k, inter, hidden);
      const int P = n * k;
      const auto routes = random_routes(n, E, k, rng);
      dev_vec<uint16_t> d_x(random_act_bits(dt, size_t(n) * hidden, rng()));
      dev_vec<uint16_t> d_w(random_act_bits(dt, size_t(E) * 2 * inter * hidden, rng(), 0.25f));
      dev_vec<int32_t> d_e(routes);
      const cuda::expert_gemv_args g{.a = d_x.get(), .a_rows_div = k, .experts = d_e.get(), .w = d_w.get(),
                                     .num_pairs = P, .k = hidden};
      expect_silu_fused_bit_identical(dt, g, P, inter, cuda::expert_gemv, what);
    }
  }
}

TEST_F(CudaMoe, DownCombineIsBitIdenticalToGemvThenCombine) {
  std::mt19937 rng(19);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (auto [n, E, k, hidden, inter] : one_token_shapes) {
      const std::string what = shape_name(dt, n, E, k, hidden, inter);
      const int P = n * k;
      const auto routes = random_routes(n, E, k, rng);
      const auto ab = random_act_bits(dt, size_t(P) * inter, rng());
      const auto wb = random_act_bits(dt, size_t(E) * hidden * inter, rng(), 0.25f);
      const auto weights = randn(size_t(P), rng);
      const auto residual = randn(size_t(n) * hidden, rng);
      dev_vec<uint16_t> d_a(ab), d_w(wb);
      dev_vec<int32_t> d_e(routes);
      dev_vec<float> d_weights(weights), y(size_t(P) * hidden), want(size_t(n) * hidden), got(size_t(n) * hidden);
      const cuda::expert_gemv_args g{.a = d_a.get(), .experts = d_e.get(), .w = d_w.get(), .num_pairs = P,
                                     .n = hidden, .k = inter, .y = y.get()};
      ASSERT_EQ(cuda::expert_gemv(dt, g, nullptr), 0) << what;
      cuda::moe_combine_args c{.y = y.get(), .experts = d_e.get(), .weights = d_weights.get(), .n = n, .top_k = k,
                               .hidden = hidden, .out = want.get()};
      cuda::moe_down_combine_args d{.act = d_a.get(), .experts = d_e.get(), .weights = d_weights.get(),
                                    .w = d_w.get(), .n = n, .top_k = k, .hidden = hidden, .k = inter,
                                    .out = got.get()};
      for (bool accumulate : {false, true}) {
        want.upload(residual);
        got.upload(residual);
        if (!accumulate) got.poison();
        c.accumulate = d.accumulate = accumulate;
        ASSERT_EQ(cuda::moe_combine(c, nullptr), 0) << what;
        ASSERT_EQ(cuda::moe_down_combine(dt, d, nullptr), 0) << what;
        EXPECT_EQ(got.download(), want.download()) << what << (accumulate ? ", accumulated" : "");
      }
      // And against the host: the fp32 products of the rounded operands, combined as combine_rows.
      gpu::expert_permutation host;
      gpu::permute_by_expert(routes, size_t(k), size_t(E), host);
      const int kk = k;
      const auto prod = expert_product(dt, ab, wb, P, hidden, inter,
                                       [&](int p) { return std::pair{p, int(routes[size_t(p)])}; });
      std::vector<float> permuted(prod.size()), ref(size_t(n) * hidden);
      for (int p = 0; p < P; ++p)
        std::copy_n(&prod[size_t(p) * hidden], hidden, &permuted[size_t(host.slot_row[size_t(p)]) * hidden]);
      gpu::combine_rows(permuted.data(), size_t(hidden), host, weights.data(), size_t(kk), 0, size_t(n), ref.data());
      d.accumulate = false;
      ASSERT_EQ(cuda::moe_down_combine(dt, d, nullptr), 0) << what;
      EXPECT_LT(rel_max_err(got.download(), ref), 1e-4) << what << " against the host";
    }
  }
}

/// Random E4M3 experts: codes (no NaN) and the scales `s` describes (per_row: one a row;
/// block128: `parts` parts of rows / parts rows with their own block grids), and the values
/// e4m3 x scale that they stand for, [E][rows][K].
struct fp8_experts {
  std::vector<uint8_t> codes;
  std::vector<float> scales, values;
};
fp8_experts random_fp8_experts(int E, int rows, int K, cuda::fp8_scale_mode mode, int parts, std::mt19937& rng) {
  fp8_experts f;
  f.codes.resize(size_t(E) * rows * K);
  for (auto& c : f.codes) {
    c = uint8_t(rng());
    if (gpu::e4m3_is_nan(c)) c = 0x3c;
  }
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  const size_t part_rows = size_t(rows / parts), kb = cuda::fp8_blocks(size_t(K));
  const size_t per_expert = mode == cuda::fp8_scale_mode::per_row ? size_t(rows) : parts * cuda::fp8_blocks(part_rows) * kb;
  f.scales.resize(size_t(E) * per_expert);
  for (auto& s : f.scales) s = scale(rng);
  f.values.resize(f.codes.size());
  for (int e = 0; e < E; ++e)
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < K; ++i) {
        const size_t at = (size_t(e) * rows + r) * K + i;
        const size_t part = size_t(r) / part_rows, in_part = size_t(r) % part_rows;
        const float s = mode == cuda::fp8_scale_mode::per_row
                            ? f.scales[size_t(e) * rows + r]
                            : f.scales[size_t(e) * per_expert + (part * cuda::fp8_blocks(part_rows) + in_part / 128) * kb +
                                       size_t(i) / 128];
        f.values[at] = gpu::e4m3_to_f32(f.codes[at]) * s;
      }
  return f;
}

/// The one-token kernels over E4M3 experts (per-row and block scales, gate/up as two parts
/// whose rows need not end on a block): gate/up with SiLU and down + combine against the host's
/// products of the same activations and the values the codes and scales stand for.
TEST_F(CudaMoe, E4m3ExpertsMatchTheProductsOfTheirValues) {
  std::mt19937 rng(41);
  // (tokens, experts, top_k, hidden, inter): Mixtral's 8 x top 2 at a warp a slot's K; Qwen3's
  // top 8 of 768-wide rows; DeepSeek-V2-Lite's top 6 of 1,408 (11 blocks); parts ending mid-block.
  const std::vector<std::tuple<int, int, int, int, int>> shapes = {
      {1, 8, 2, 512, 4096}, {1, 16, 8, 2048, 768}, {1, 8, 6, 2048, 1408}, {2, 8, 3, 208, 144}, {3, 4, 2, 64, 16}};
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16})
    for (auto mode : {cuda::fp8_scale_mode::per_row, cuda::fp8_scale_mode::block128})
      for (auto [n, E, k, hidden, inter] : shapes) {
        const std::string what = shape_name(dt, n, E, k, inter, hidden) +
                                 (mode == cuda::fp8_scale_mode::per_row ? ", per-row scales" : ", block scales");
        const int P = n * k;
        const auto routes = random_routes(n, E, k, rng);
        const auto xb = random_act_bits(dt, size_t(n) * hidden, rng());
        const fp8_experts gu = random_fp8_experts(E, 2 * inter, hidden, mode, 2, rng);
        const fp8_experts dn = random_fp8_experts(E, hidden, inter, mode, 1, rng);
        dev_vec<uint16_t> d_x(xb), d_act(size_t(P) * inter);
        dev_vec<uint8_t> d_gu(gu.codes), d_dn(dn.codes);
        dev_vec<float> d_gus(gu.scales), d_dns(dn.scales);
        dev_vec<int32_t> d_e(routes);
        d_act.poison();
        const cuda::expert_gemv_args g{.a = d_x.get(), .a_rows_div = k, .experts = d_e.get(), .w = d_gu.get(),
                                       .num_pairs = P, .n = inter, .k = hidden, .y = d_act.get(),
                                       .silu_and_mul = true,
                                       .fp8 = {.scale = d_gus.get(), .mode = mode, .parts = 2}};
        ASSERT_EQ(cuda::expert_gemv(dt, g, nullptr), 0) << what;
        // Host: gate and up in double, each rounded to dt, SiLU(gate) * up.
        std::vector<float> want_act(size_t(P) * inter);
        for (int p = 0; p < P; ++p) {
          const int t = p / k, e = routes[size_t(p)];
          for (int c = 0; c < inter; ++c) {
            double dg = 0, du = 0;
            for (int i = 0; i < hidden; ++i) {
              const double x = from_act_bits(dt, xb[size_t(t) * hidden + i]);
              dg += x * gu.values[(size_t(e) * 2 * inter + c) * hidden + i];
              du += x * gu.values[(size_t(e) * 2 * inter + inter + c) * hidden + i];
            }
            const float gate = round_act(dt, float(dg)), up = round_act(dt, float(du));
            want_act[size_t(p) * inter + c] = gate / (1.0f + std::exp(-gate)) * up;
          }
        }
        const std::vector<float> got_act = download_act(dt, d_act);
        EXPECT_LT(rel_max_err(got_act, want_act), dt == act_dtype::bf16 ? 2e-2 : 4e-3) << what << ", gate/up";
        // Down + combine on the device's activations, both accumulating and not.
        const auto weights = randn(size_t(P), rng);
        const auto residual = randn(size_t(n) * hidden, rng);
        dev_vec<float> d_weights(weights), out(size_t(n) * hidden);
        const std::vector<uint16_t> act_bits = d_act.download();
        std::vector<float> want(size_t(n) * hidden);
        for (int t = 0; t < n; ++t)
          for (int c = 0; c < hidden; ++c) {
            double sum = 0;
            for (int j = 0; j < k; ++j) {
              const int p = t * k + j, e = routes[size_t(p)];
              double d = 0;
              for (int i = 0; i < inter; ++i)
                d += double(from_act_bits(dt, act_bits[size_t(p) * inter + i])) *
                     dn.values[(size_t(e) * hidden + c) * inter + i];
              sum += weights[size_t(p)] * d;
            }
            want[size_t(t) * hidden + c] = float(sum);
          }
        cuda::moe_down_combine_args d{.act = d_act.get(), .experts = d_e.get(), .weights = d_weights.get(),
                                      .w = d_dn.get(), .n = n, .top_k = k, .hidden = hidden, .k = inter,
                                      .out = out.get(), .fp8 = {.scale = d_dns.get(), .mode = mode, .parts = 1}};
        out.poison();
        ASSERT_EQ(cuda::moe_down_combine(dt, d, nullptr), 0) << what;
        EXPECT_LT(rel_max_err(out.download(), want), 1e-4) << what << ", down + combine";
        out.upload(residual);
        d.accumulate = true;
        ASSERT_EQ(cuda::moe_down_combine(dt, d, nullptr), 0) << what;
        std::vector<float> want_acc(want.size());
        for (size_t i = 0; i < want.size(); ++i) want_acc[i] = residual[i] + want[i];
        EXPECT_LT(rel_max_err(out.download(), want_acc), 1e-4) << what << ", down + combine accumulated";
      }
  // What the E4M3 path refuses: K not a multiple of 16, no SiLU, shared slots, a down of parts 2.
  dev_vec<uint16_t> x(64), y(64);
  dev_vec<uint8_t> w(64 * 64);
  dev_vec<float> s(64);
  dev_vec<int32_t> e(std::vector<int32_t>{0});
  const cuda::moe_fp8_scales fp8{.scale = s.get()};
  cuda::expert_gemv_args g{.a = x.get(), .experts = e.get(), .w = w.get(), .num_pairs = 1, .n = 8, .k = 24,
                           .y = y.get(), .silu_and_mul = true, .fp8 = fp8};
  EXPECT_EQ(cuda::expert_gemv(act_dtype::bf16, g, nullptr), int(cudaErrorInvalidValue));
  g.k = 32;
  g.silu_and_mul = false;
  EXPECT_EQ(cuda::expert_gemv(act_dtype::bf16, g, nullptr), int(cudaErrorInvalidValue));
  cuda::moe_down_combine_args d{.act = x.get(), .experts = e.get(), .weights = s.get(), .w = w.get(), .n = 1,
                                .top_k = 1, .hidden = 8, .k = 24, .out = s.get(), .fp8 = fp8};
  EXPECT_EQ(cuda::moe_down_combine(act_dtype::bf16, d, nullptr), int(cudaErrorInvalidValue));
  d.k = 32;
  d.fp8.parts = 2;
  EXPECT_EQ(cuda::moe_down_combine(act_dtype::bf16, d, nullptr), int(cudaErrorInvalidValue));
}

/// The grouped GEMM over E4M3 experts (every tile; per-row and block scales; gate/up with SiLU in
/// two parts, and a plain product in fp32 and dt) gives the bits of the 16-bit GEMM over the
/// weights fp8_dequantize makes of the same codes and scales.
TEST_F(CudaMoe, GroupedGemmOverE4m3IsBitIdenticalToItOverTheDequantizedWeights) {
  std::mt19937 rng(43);
  // (tokens, experts, top_k, N, K): partial column blocks; K a multiple of 16 not of a slice's 64
  // or of a 128-wide block; parts ending mid-block (N 200); several tiles an expert.
  const std::vector<std::tuple<int, int, int, int, int>> shapes = {
      {1, 8, 2, 64, 64}, {70, 8, 2, 200, 144}, {5, 16, 8, 128, 272}, {300, 4, 2, 256, 528}};
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16})
    for (auto mode : {cuda::fp8_scale_mode::per_row, cuda::fp8_scale_mode::block128})
      for (auto [n, E, k, N, K] : shapes)
        for (bool silu : {true, false}) {
          const std::string what = shape_name(dt, n, E, k, N, K) + (silu ? ", gate/up + SiLU" : ", plain") +
                                   (mode == cuda::fp8_scale_mode::per_row ? ", per-row" : ", blocks");
          const int P = n * k, rows = silu ? 2 * N : N, parts = silu ? 2 : 1;
          const auto routes = random_routes(n, E, k, rng);
          const fp8_experts f = random_fp8_experts(E, rows, K, mode, parts, rng);
          dev_vec<uint16_t> d_x(random_act_bits(dt, size_t(n) * K, rng())), d_deq(size_t(E) * rows * K);
          dev_vec<uint8_t> d_q(f.codes);
          dev_vec<float> d_s(f.scales);
          // The dequantized weights, expert by expert and part by part, as the cuBLAS path makes them.
          const size_t part_rows = size_t(rows / parts), kb = cuda::fp8_blocks(size_t(K));
          for (int e = 0; e < E; ++e)
            for (int p = 0; p < (mode == cuda::fp8_scale_mode::per_row ? 1 : parts); ++p) {
              const size_t r0 = mode == cuda::fp8_scale_mode::per_row ? 0 : p * part_rows;
              const size_t nr = mode == cuda::fp8_scale_mode::per_row ? size_t(rows) : part_rows;
              const float* s = mode == cuda::fp8_scale_mode::per_row
                                   ? d_s.get() + size_t(e) * rows
                                   : d_s.get() + (size_t(e) * parts + p) * cuda::fp8_blocks(part_rows) * kb;
              ASSERT_EQ(cuda::fp8_dequantize(dt, d_q.get() + (size_t(e) * rows + r0) * K, s, int(nr), K,
                                             d_deq.get() + (size_t(e) * rows + r0) * K, nullptr, mode),
                        0)
                  << what;
            }
          for (cuda::moe_gemm_tile tile : device_tiles()) {
            device_permutation perm;
            permute_and_check(routes, k, E, perm, tile);
            cuda::grouped_gemm_args g{.a = d_x.get(), .a_rows = perm.sorted.get(), .a_rows_div = k, .w = d_deq.get(),
                                      .offsets = perm.offsets.get(), .tile_offsets = perm.tiles.get(), .tile = tile,
                                      .num_pairs = P, .num_experts = E, .n = N, .k = K, .silu_and_mul = silu};
            for (bool y_act : silu ? std::vector{true} : std::vector{false, true}) {
              const size_t out = size_t(P) * N * (y_act ? 1 : 2);  // 16-bit words: dt, or fp32 as two
              dev_vec<uint16_t> want(out), got(out);
              got.poison();
              g.y_act = y_act && !silu;
              g.w = d_deq.get();
              g.fp8 = {};
              g.y = want.get();
              ASSERT_EQ(cuda::grouped_gemm(dt, g, nullptr), 0) << what;
              g.w = d_q.get();
              g.fp8 = {.scale = d_s.get(), .mode = mode, .parts = parts};
              g.y = got.get();
              ASSERT_EQ(cuda::grouped_gemm(dt, g, nullptr), 0) << what;
              EXPECT_EQ(got.download(), want.download()) << what << ", " << tile_name(tile) << (y_act ? ", dt out" : "");
            }
          }
        }
}

TEST_F(CudaMoe, CombineMatchesCombineRows) {
  std::mt19937 rng(9);
  const std::vector<std::tuple<int, int, int, int>> shapes = {{1, 4, 2, 64}, {300, 128, 8, 520}, {64, 8, 2, 4096}};
  for (auto [n, E, k, hidden] : shapes) {
    const auto routes = random_routes(n, E, k, rng);
    gpu::expert_permutation host;
    gpu::permute_by_expert(routes, size_t(k), size_t(E), host);
    const auto y = randn(size_t(n) * k * hidden, rng);
    const auto weights = randn(size_t(n) * k, rng);
    const auto residual = randn(size_t(n) * hidden, rng);
    std::vector<float> want(size_t(n) * hidden);
    gpu::combine_rows(y.data(), size_t(hidden), host, weights.data(), size_t(k), 0, size_t(n), want.data());
    dev_vec<float> d_y(y), d_w(weights), d_out(size_t(n) * hidden);
    dev_vec<int32_t> d_e(routes), d_rows(host.slot_row);
    d_out.poison();
    cuda::moe_combine_args a;
    a.y = d_y.get();
    a.pair_rows = d_rows.get();
    a.experts = d_e.get();
    a.weights = d_w.get();
    a.n = n;
    a.top_k = k;
    a.hidden = hidden;
    a.out = d_out.get();
    ASSERT_EQ(cuda::moe_combine(a, nullptr), 0);
    EXPECT_LT(rel_max_err(d_out.download(), want), 1e-5) << n << " tokens, top " << k;
    d_out.upload(residual);
    a.accumulate = true;
    ASSERT_EQ(cuda::moe_combine(a, nullptr), 0);
    std::vector<float> sum(want.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = residual[i] + want[i];
    EXPECT_LT(rel_max_err(d_out.download(), sum), 1e-5) << n << " tokens, accumulated";
    // Pair order (expert_gemv's output): the same sum without the permutation.
    std::vector<float> y_pairs(y.size());
    for (size_t p = 0; p < size_t(n) * k; ++p)
      std::copy_n(&y[size_t(host.slot_row[p]) * hidden], hidden, &y_pairs[p * hidden]);
    d_y.upload(y_pairs);
    a.pair_rows = nullptr;
    a.accumulate = false;
    ASSERT_EQ(cuda::moe_combine(a, nullptr), 0);
    EXPECT_LT(rel_max_err(d_out.download(), want), 1e-5) << n << " tokens, pair order";
  }
}

}  // namespace
}  // namespace actorserve::testing
