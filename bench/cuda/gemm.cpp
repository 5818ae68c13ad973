// The layer GEMMs of a Llama-3-8B-shaped step under sustained load: for each row count and
// projection, the executor's call (cublasGemmEx, CUBLAS_GEMM_DEFAULT) against every algorithm
// cublasLt's heuristic offers for the same operands, each run back to back for a warm-up and a
// timed window (long enough for the GPU's power controller to settle at its cap), on random
// normal data (weights N(0, 0.02), activations N(0, 1): zeros would draw far less power). Prints
// TFLOP/s with the SM clock and board power read through NVML (dlopen'ed; "-" without it) at the
// end of each window.
// --residual adds o and down into their output (beta = 1) as the executor does (residual_gemm).
//   bench_cuda_gemm [--out DIR] [--m 13421,187] [--algos 12] [--window-ms 250] [--residual]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"

using namespace actorserve::bench_cuda;

namespace {

#define CK(x)                                                                                  \
  do {                                                                                         \
    if (auto e_ = (x); int(e_) != 0) {                                                         \
      std::fprintf(stderr, "%s:%d %s failed: %d\n", __FILE__, __LINE__, #x, int(e_));          \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

/// SM clock (MHz) and board power (W) through NVML, when the driver's library can be opened.
class nvml_probe {
 public:
  nvml_probe() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib_) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    auto handle = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    power_ = reinterpret_cast<int (*)(void*, unsigned*)>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    if (!init || !handle || !clock_ || !power_ || init() != 0 || handle(0, &dev_) != 0) dev_ = nullptr;
  }
  /// "MHz W" now, or "- -".
  std::string sample() const {
    unsigned mhz = 0, mw = 0;
    if (!dev_ || clock_(dev_, 1 /* NVML_CLOCK_SM */, &mhz) != 0 || power_(dev_, &mw) != 0) return "- | -";
    return std::to_string(mhz) + " | " + std::to_string(mw / 1000);
  }

 private:
  void* lib_ = nullptr;
  void* dev_ = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
};

struct projection {
  const char* name;
  int n, k;
  bool out16;     ///< output in bf16 (gate_up, run_act) instead of fp32
  bool residual;  ///< adds into the fp32 residual with --residual (o, down)
};

/// Runs `f` back to back for `warm_ms`, then times it over about `window_ms`: ms per call.
template <class F>
double sustained_ms(F&& f, double warm_ms, double window_ms) {
  const auto wall = [] { return std::chrono::steady_clock::now(); };
  const auto t0 = wall();
  int calls = 0;
  while (std::chrono::duration<double, std::milli>(wall() - t0).count() < warm_ms) {
    for (int i = 0; i < 4; ++i) f();
    cudaDeviceSynchronize();
    calls += 4;
  }
  const double per = warm_ms / std::max(calls, 1);
  const int iters = std::max(3, int(window_ms / std::max(per, 1e-3)));
  return time_ms(f, iters);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  std::vector<int> ms = {13421, 187};
  int max_algos = 12;
  double window = 250;
  bool residual = false;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--residual")) residual = true;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--out")) out_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--algos")) max_algos = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--window-ms")) window = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--m")) {
      ms.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        ms.push_back(int(std::strtol(p, &end, 10)));
        p = *end ? end + 1 : end;
      }
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_cuda_gemm: no CUDA device: nothing to measure\n");
    return 0;
  }
  if (!out_dir.empty()) g_out = std::fopen((out_dir + "/bench_cuda_gemm.txt").c_str(), "w");
  const projection projs[] = {{"qkv", 6144, 4096, false, false},
                              {"o", 4096, 4096, false, true},
                              {"gate_up", 28672, 4096, true, false},
                              {"down", 4096, 14336, false, true}};
  const size_t ws_bytes = size_t(32) << 20;  // the executor's cuBLAS workspace
  void* ws = dmalloc(ws_bytes);
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetWorkspace(h, ws, ws_bytes));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  nvml_probe nvml;
  int max_m = 0;
  for (int m : ms) max_m = std::max(max_m, m);
  void* x = upload(normal_bf16(size_t(max_m) * 14336, 1.0f, 1));
  void* y = dmalloc(size_t(max_m) * 28672 * 4);
  report("# bench_cuda_gemm: sustained layer GEMMs, warm-up %.0f ms + window %.0f ms per row%s\n\n", 2 * window,
         window, residual ? "; o and down add into their fp32 output (beta 1)" : "");
  for (int m : ms) {
    report("\n## m = %d rows\n| projection | call | algo id | tile | stages | split-k | cluster | ms | TFLOP/s | "
           "SM MHz | W |\n|---|---|---|---|---|---|---|---|---|---|---|\n", m);
    for (const projection& p : projs) {
      void* w = upload(normal_bf16(size_t(p.n) * p.k, 0.02f, 2));
      const double flops = 2.0 * m * p.n * p.k;
      const cudaDataType_t out_t = p.out16 ? CUDA_R_16BF : CUDA_R_32F;
      const float alpha = 1.0f, beta = residual && p.residual ? 1.0f : 0.0f;
      const auto gemm_ex = [&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, p.n, m, p.k, &alpha, w, CUDA_R_16BF, p.k, x, CUDA_R_16BF, p.k,
                     &beta, y, out_t, p.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      const double base = sustained_ms(gemm_ex, 2 * window, window);
      report("| %s | cublasGemmEx default | | | | | | %.3f | %.1f | %s |\n", p.name, base, flops / base / 1e9,
             nvml.sample().c_str());
      cublasLtMatmulDesc_t desc;
      CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
      cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.k, p.n, p.k));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.k, m, p.k));
      CK(cublasLtMatrixLayoutCreate(&lc, out_t, p.n, m, p.n));
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                              sizeof ws_bytes));
      std::vector<cublasLtMatmulHeuristicResult_t> found(max_algos);
      int n_found = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, max_algos, found.data(), &n_found));
      for (int a = 0; a < n_found; ++a) {
        const cublasLtMatmulAlgo_t& algo = found[a].algo;
        int id = 0, tile = 0, stages = 0, splitk = 0, cluster = 0;
        size_t got = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &got);
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster,
                                             &got);
        const auto run_lt = [&] {
          cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &algo, ws, ws_bytes, nullptr);
        };
        const double t = sustained_ms(run_lt, 2 * window, window);
        report("| %s | cublasLt heuristic #%d | %d | %d | %d | %d | %d | %.3f | %.1f | %s |\n", p.name, a, id, tile,
               stages, splitk, cluster, t, flops / t / 1e9, nvml.sample().c_str());
      }
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(desc);
      cudaFree(w);
      if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
    }
  }
  cublasLtDestroy(lt);
  cublasDestroy(h);
  if (g_out) std::fclose(g_out);
  return 0;
}
