#include "gpu/cuda/attention/split_heuristic.hpp"

#include <algorithm>

namespace actorserve::gpu::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Partial slots used with `chunk`: every piece of a sequence longer than one chunk.
int64_t partials(std::span<const int32_t> kv_lens, int num_kv_heads, int32_t chunk) {
  int64_t n = 0;
  for (int32_t len : kv_lens)
    if (len > chunk) n += ceil_div(len, chunk) * num_kv_heads;
  return n;
}

}  // namespace

int64_t decode_ctas(std::span<const int32_t> kv_lens, int num_kv_heads, int32_t chunk) {
  int64_t n = 0;
  for (int32_t len : kv_lens) n += chunk > 0 ? std::max<int64_t>(1, ceil_div(len, chunk)) : 1;
  return n * num_kv_heads;
}

int32_t choose_kv_chunk(std::span<const int32_t> kv_lens, const split_inputs& in) {
  if (kv_lens.empty() || in.tile <= 0) return 0;
  if (in.long_piece_tokens > 0 && in.ctas_per_sm > 1) {
    split_inputs one = in;
    one.ctas_per_sm = 1;
    one.long_piece_tokens = 0;
    const int32_t chunk = choose_kv_chunk(kv_lens, one);
    if (chunk >= in.long_piece_tokens) return chunk;
  }
  const int64_t slots = int64_t(std::max(1, in.num_sms)) * std::max(1, in.ctas_per_sm);
  const int64_t base = int64_t(kv_lens.size()) * in.num_kv_heads;
  if (base >= slots) return 0;  // a full wave without splitting: splits would only add merges
  const int32_t longest = *std::max_element(kv_lens.begin(), kv_lens.end());
  if (longest <= std::max(in.min_chunk, in.tile)) return 0;
  // Short contexts (batch-1 decode at a few hundred tokens) are latency-bound: up to
  // short_pieces pieces of at least one tile each (1 x 256 -> 4 x 64, 1 x 512 -> 8 x 64).
  const int64_t floor_tokens = std::min<int64_t>(in.min_chunk, ceil_div(longest, std::max(1, in.short_pieces)));
  const int32_t lo_chunk = int32_t(std::max<int64_t>(1, ceil_div(floor_tokens, in.tile)) * in.tile);
  // ctas(chunk) falls as chunk grows: binary search the smallest chunk (in tiles) that fits.
  int64_t lo = lo_chunk / in.tile, hi = ceil_div(longest, in.tile);
  auto fits = [&](int64_t tiles) {
    const auto chunk = int32_t(tiles * in.tile);
    return decode_ctas(kv_lens, in.num_kv_heads, chunk) <= slots &&
           partials(kv_lens, in.num_kv_heads, chunk) <= in.max_partials;
  };
  if (!fits(hi - 1 >= lo ? hi - 1 : lo)) return 0;  // not even two pieces for the longest fit
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (fits(mid)) hi = mid; else lo = mid + 1;
  }
  const auto chunk = int32_t(lo * in.tile);
  return chunk >= longest ? 0 : chunk;
}

}  // namespace actorserve::gpu::cuda
