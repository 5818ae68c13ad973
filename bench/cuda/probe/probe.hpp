#pragma once
/// Measurement and test kernels of the attention backends, linked only by bench_cuda_attention
/// and test_cuda, never by the server (plain C++: no CUDA device code here): a
/// streaming read, the memory ceiling the decode kernels are compared with; a kernel that holds
/// the stream until the host releases it, so later launches are queued before they are timed
/// (kernel time without host launch latency, the way nvbench measures); a short PDL predecessor
/// that stands in for the step's rope_kv_write before an attention launch; late copies that
/// test the decode kernels' wait for that kernel.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace actorserve::gpu::cuda {

/// Reads `bytes` (a multiple of 16) at `src` with 16-byte loads, `ctas` CTAs of 512 threads
/// grid-striding with 8 loads in flight per thread; writes to `sink` only for an impossible sum.
int launch_stream_read(const void* src, size_t bytes, unsigned* sink, int ctas, cudaStream_t s);

/// Spins one thread until `*flag` (host-mapped memory) is non-zero.
int launch_hold_stream(const volatile int* flag, cudaStream_t s);

/// One device-to-device copy of launch_late_copies (bytes: a multiple of 16).
struct late_copy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

/// Up to three copies done late, by one CTA launched as a programmatic dependent when
/// programmatic_launch() is on: it lets its dependents launch at once, spins `ns` nanoseconds,
/// then copies (the tests' stand-in for rope_kv_write writing Q and the newest K/V rows).
int launch_late_copies(const late_copy (&jobs)[3], int ns, cudaStream_t s);

/// One CTA that lets its dependents launch at once (griddepcontrol.launch_dependents), then
/// spins `ns` nanoseconds; launched as a programmatic dependent when programmatic_launch() is on.
int launch_pdl_predecessor(int ns, cudaStream_t s);

}  // namespace actorserve::gpu::cuda

namespace actorserve::gpu::cuda {

struct latent_attention_args;

/// A ring of latent_stream_probe: `stages` tiles of `keys` key rows, filled by cp.async from
/// four warps or by one bulk copy a row from one warp.
struct latent_probe_ring {
  int keys, stages;
  bool bulk;
};
inline constexpr int latent_probe_ring_count = 8;
extern const latent_probe_ring latent_probe_rings[latent_probe_ring_count];

/// latent_attention's grid and pieces (576-wide bf16 latents, no math): each CTA streams its piece
/// through ring `ring` (an index into latent_probe_rings), spinning `spin_ns` a tile.
int launch_latent_stream_probe(int ring, const latent_attention_args& a, int spin_ns, unsigned* sink,
                               cudaStream_t s);
/// CTAs of ring `ring` an SM holds by shared memory (sm_90's 228 KiB).
int latent_probe_ctas_per_sm(int ring);

}  // namespace actorserve::gpu::cuda
