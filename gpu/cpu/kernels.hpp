#pragma once
/// fp32 building blocks of the CPU forward pass. Matrices are row-major; weights are [out][in]
/// (nn.Linear layout) so every output element is a dot product of two contiguous rows.
#include <cstddef>
#include <cstdint>

#include "gpu/cpu/thread_pool.hpp"

namespace actorserve::gpu::cpu {

/// Dot product of two contiguous fp32 vectors of length n.
float dot(const float* a, const float* b, size_t n);

/// y[t][o] = sum_i x[t][i] * w[o][i] (+ bias[o]) for t < rows, o < out. x is [rows][in],
/// w is [out][in], y is [rows][out]; bias may be null. Parallel over output rows.
void matmul(thread_pool& pool, const float* x, size_t rows, size_t in, const float* w, size_t out,
            const float* bias, float* y);

/// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, rows of length n (HF LlamaRMSNorm).
void rms_norm(const float* x, const float* weight, size_t rows, size_t n, float eps, float* out);

/// gate[i] = silu(gate[i]) * up[i].
void silu_mul(float* gate, const float* up, size_t n);

/// y[t] = down(silu(gate(x[t])) * up(x[t])) for `rows` rows of x ([rows][in]): a SwiGLU MLP with
/// weights [inter][in], [inter][in] and [in][inter]; `gate` and `up` are scratch of rows * inter.
void swiglu_mlp(thread_pool& pool, const float* x, size_t rows, size_t in, const float* gate_w, const float* up_w,
                const float* down_w, size_t inter, float* gate, float* up, float* y);

/// y[i] += x[i].
void add_inplace(float* y, const float* x, size_t n);

/// y[i] += a * x[i].
void axpy(float* y, float a, const float* x, size_t n);

}  // namespace actorserve::gpu::cpu
