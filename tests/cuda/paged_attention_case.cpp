#include "paged_attention_case.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <thread>

namespace actorserve::testing {

paged_inputs make_paged_inputs(cuda::act_dtype dt, int num_heads, int num_kv_heads, int head_dim, int block_size,
                               const std::vector<seq_spec>& specs, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  paged_inputs in;
  in.num_heads = num_heads;
  in.num_kv_heads = num_kv_heads;
  in.head_dim = head_dim;
  in.block_size = block_size;
  const int bs = block_size;
  int total_blocks = 3;  // unused blocks in the pool
  for (const auto& s : specs) {
    total_blocks += (s.context_len + bs - 1) / bs;
    in.n_tokens += s.q_len;
  }
  std::vector<int32_t> perm(total_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const size_t row = size_t(num_kv_heads) * head_dim;
  in.k_cache.resize(size_t(total_blocks) * bs * row);
  in.v_cache.resize(in.k_cache.size());
  for (size_t i = 0; i < in.k_cache.size(); ++i) {
    in.k_cache[i] = to_act_bits(dt, nd(rng));
    in.v_cache[i] = to_act_bits(dt, nd(rng));
  }
  in.q_stride = (num_heads + 2 * num_kv_heads) * head_dim;
  in.q.resize(size_t(in.n_tokens) * in.q_stride);
  for (auto& x : in.q) x = nd(rng);
  int next_block = 0, q_start = 0;
  for (const auto& s : specs) {
    cuda::attn_seq a;
    a.q_start = q_start;
    a.q_len = s.q_len;
    a.context_len = s.context_len;
    a.bt_offset = int32_t(in.block_tables.size());
    for (int b = 0; b < (s.context_len + bs - 1) / bs; ++b) in.block_tables.push_back(perm[next_block++]);
    in.seqs.push_back(a);
    q_start += s.q_len;
  }
  return in;
}

std::vector<float> reference_attention(cuda::act_dtype dt, const paged_inputs& in) {
  std::vector<float> k(in.k_cache.size()), v(in.v_cache.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = from_act_bits(dt, in.k_cache[i]);
    v[i] = from_act_bits(dt, in.v_cache[i]);
  }
  return reference_attention(in, k, v);
}

std::vector<float> reference_attention(const paged_inputs& in, const std::vector<float>& k_cache,
                                       const std::vector<float>& v_cache) {
  const int H = in.num_heads, D = in.head_dim, bs = in.block_size, G = H / in.num_kv_heads;
  const size_t row = size_t(in.num_kv_heads) * D;
  std::vector<float> ref(size_t(in.n_tokens) * H * D);
  // One head of one query row of one sequence, written to its own slice of `ref`.
  auto query_head = [&](const cuda::attn_seq& s, int i, int h, std::vector<double>& sc, std::vector<double>& acc) {
    const int t = s.q_start + i, qpos = s.context_len - s.q_len + i;
    const int first = in.window > 0 ? std::max(0, qpos - in.window + 1) : 0;  // the window's first key
    sc.assign(size_t(qpos) + 1, 0.0);
    acc.assign(size_t(D), 0.0);
    auto base = [&](int k) {
      return (size_t(in.block_tables[s.bt_offset + k / bs]) * bs + k % bs) * row + size_t(h / G) * D;
    };
    double mx = -1e300;
    for (int k = first; k <= qpos; ++k) {
      double dot = 0;
      for (int d = 0; d < D; ++d)
        dot += double(in.q[size_t(t) * in.q_stride + h * D + d]) * double(k_cache[base(k) + d]);
      sc[k] = dot / std::sqrt(double(D));
      mx = std::max(mx, sc[k]);
    }
    double l = 0;
    for (int k = first; k <= qpos; ++k) l += (sc[k] = std::exp(sc[k] - mx));
    for (int k = first; k <= qpos; ++k)
      for (int d = 0; d < D; ++d) acc[d] += sc[k] * double(v_cache[base(k) + d]);
    for (int d = 0; d < D; ++d) ref[size_t(t) * H * D + h * D + d] = float(acc[d] / l);
  };
  // The (row, head) items are independent and each is summed in the same order as on one thread,
  // so the result does not depend on the thread count; the threads only shorten the long-context
  // cases (a single 32k-key decode row has as many items as heads).
  struct item { size_t seq; int row, head; };
  std::vector<item> items;
  for (size_t si = 0; si < in.seqs.size(); ++si)
    for (int i = 0; i < in.seqs[si].q_len; ++i)
      for (int h = 0; h < H; ++h) items.push_back({si, i, h});
  std::atomic<size_t> next{0};
  auto worker = [&] {
    std::vector<double> sc, acc;
    for (size_t r; (r = next.fetch_add(1)) < items.size();)
      query_head(in.seqs[items[r].seq], items[r].row, items[r].head, sc, acc);
  };
  const size_t n_threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 32);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < std::min(n_threads, items.size()); ++i) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();
  return ref;
}

}  // namespace actorserve::testing
