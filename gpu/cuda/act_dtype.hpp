#pragma once
/// Element types of the CUDA executor. Activations that feed a GEMM are bf16 or fp16
/// (`act_dtype`); everything that accumulates (residual stream, GEMM outputs, logits, query
/// vectors) is fp32.
#include <cstddef>

namespace actorserve::gpu::cuda {

/// Element type of weights, GEMM inputs and the KV cache.
enum class act_dtype { bf16, fp16 };

/// Storage dtype of host data to convert on the device.
enum class src_dtype { f32, bf16, f16 };

/// Bytes of one act_dtype element.
inline constexpr size_t act_size(act_dtype) { return 2; }

}  // namespace actorserve::gpu::cuda
