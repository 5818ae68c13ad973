#pragma once
/// The model on the device: weights converted once to bf16/fp16 (Q/K/V and gate/up fused into
/// one matrix each), norms, biases and rope frequencies in fp32; and the cuBLAS GEMM runner.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/kernels.hpp"

namespace actorserve::gpu::cuda {

struct device_layer {
  void* qkv = nullptr;          ///< [(H + 2*KVH) * D][hidden]
  float* qkv_bias = nullptr;    ///< [(H + 2*KVH) * D] or null
  void* o = nullptr;            ///< [hidden][H * D]
  float* o_bias = nullptr;      ///< [hidden] or null
  void* gate_up = nullptr;      ///< [2 * inter][hidden], gate rows first
  void* down = nullptr;         ///< [hidden][inter]
  float* input_norm = nullptr;  ///< [hidden]
  float* post_norm = nullptr;   ///< [hidden]
};

class device_model {
 public:
  device_model() = default;
  device_model(const device_model&) = delete;
  device_model& operator=(const device_model&) = delete;
  ~device_model();

  model_config cfg;
  act_dtype dt = act_dtype::bf16;
  void* embed = nullptr;        ///< [vocab][hidden]
  void* lm_head = nullptr;      ///< [vocab][hidden]; == embed when tied
  float* final_norm = nullptr;
  float* inv_freq = nullptr;    ///< [head_dim / 2]
  std::vector<device_layer> layers;
  size_t bytes = 0;             ///< device memory held

  /// cudaMalloc tracked for release; counts `bytes`.
  status alloc(void** ptr, size_t n);

 private:
  std::vector<void*> allocations_;
};

/// Which activation dtype a --dtype choice means for a checkpoint of `torch_dtype`.
result<act_dtype> resolve_dtype(dtype_choice choice, const std::string& torch_dtype);

/// Maps the checkpoint, converts and uploads every weight (synchronously, at start-up), logging
/// progress.
result<std::unique_ptr<device_model>> load_device_model(const std::string& model_dir, dtype_choice choice,
                                                        cudaStream_t stream);

/// Y[m, n] (fp32) = X[m, k] (dt) * W[n, k]^T (dt) + beta * Y, fp32 accumulation, on one stream.
class gemm_runner {
 public:
  gemm_runner() = default;
  gemm_runner(const gemm_runner&) = delete;
  gemm_runner& operator=(const gemm_runner&) = delete;
  ~gemm_runner();
  status init(cudaStream_t stream, size_t workspace_bytes);
  status run(act_dtype dt, const void* x, int m, int k, const void* w, int n, float* y, float beta = 0.0f);

 private:
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace actorserve::gpu::cuda
