#include "gpu/sampling/logits_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace actorserve::gpu {
namespace {

bool in_vocab(int32_t id, size_t vocab) { return id >= 0 && static_cast<size_t>(id) < vocab; }

/// A sorted copy of the in-vocab ids of `ids`.
std::vector<int32_t> sorted_ids(std::span<const int32_t> ids, size_t vocab) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int32_t id : ids)
    if (in_vocab(id, vocab)) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

/// `operator()(a, b)`: id a ranks before id b (larger value, then lower id; NaN last).
struct rank_before {
  std::span<const float> values;
  bool operator()(int32_t a, int32_t b) const {
    const float va = values[static_cast<size_t>(a)];
    const float vb = values[static_cast<size_t>(b)];
    if (va > vb) return true;
    if (va < vb) return false;
    if (va == vb) return a < b;
    const bool nan_a = std::isnan(va);  // unordered: at least one NaN, which ranks last
    const bool nan_b = std::isnan(vb);
    return nan_a == nan_b ? a < b : nan_b;
  }
};

}  // namespace

void apply_penalties(std::span<float> logits, const sampling_params& params,
                     std::span<const int32_t> history, int32_t prompt_len) {
  const size_t vocab = logits.size();
  const size_t split = std::min(history.size(), static_cast<size_t>(std::max(prompt_len, 0)));
  if (params.repetition_penalty != 1.0f) {
    const float rp = params.repetition_penalty;
    std::vector<int32_t> seen = sorted_ids(history, vocab);
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
      float& l = logits[static_cast<size_t>(id)];
      l = l > 0.0f ? l / rp : l * rp;
    }
  }
  if (params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f) return;
  const std::vector<int32_t> output = sorted_ids(history.subspan(split), vocab);
  for (size_t i = 0; i < output.size();) {
    size_t j = i;
    while (j < output.size() && output[j] == output[i]) ++j;
    logits[static_cast<size_t>(output[i])] -=
        params.frequency_penalty * static_cast<float>(j - i) + params.presence_penalty;
    i = j;
  }
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> words) {
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const size_t w = i >> 5;
    if (w >= words.size() || !((words[w] >> (i & 31)) & 1u)) logits[i] = minus_inf;
  }
}

void add_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias) {
  for (const auto& [id, b] : bias)
    if (in_vocab(id, logits.size())) logits[static_cast<size_t>(id)] += b;
}

void mask_tokens(std::span<float> logits, std::span<const int32_t> ids) {
  for (int32_t id : ids)
    if (in_vocab(id, logits.size()))
      logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
}

int32_t argmax(std::span<const float> logits) {
  size_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_value || (!found && !std::isnan(logits[i]))) {
      best_value = logits[i];
      best = i;
      found = true;
    }
  }
  return static_cast<int32_t>(best);
}

double log_sum_exp(std::span<const float> logits) {
  float max_value = -std::numeric_limits<float>::infinity();
  for (float l : logits)
    if (l > max_value) max_value = l;
  if (std::isinf(max_value)) return max_value;
  double sum = 0.0;
  for (float l : logits)
    if (l > -std::numeric_limits<float>::infinity())  // skips NaN and -inf
      sum += std::exp(l - max_value);  // float exp: several times faster than double
  return static_cast<double>(max_value) + std::log(sum);
}

void sort_ids(std::span<const float> values, std::span<int32_t> ids) {
  std::sort(ids.begin(), ids.end(), rank_before{values});
}

void select_ids(std::span<const float> values, std::span<int32_t> ids, size_t n) {
  std::nth_element(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), ids.end(),
                   rank_before{values});
}

int32_t best_of(std::span<const float> values, std::span<const int32_t> ids) {
  return *std::min_element(ids.begin(), ids.end(), rank_before{values});
}

size_t mass_prefix(std::span<const float> values, std::span<const float> weights,
                   std::span<int32_t> ids, double target, prefix_rule rule) {
  constexpr size_t sort_below = 64;
  const bool before = rule == prefix_rule::mass_before_below;
  auto weight = [&](int32_t id) { return static_cast<double>(weights[static_cast<size_t>(id)]); };
  size_t lo = 0;  // [0, lo) is known to be in the prefix, with weight `acc`
  size_t hi = ids.size();  // the prefix ends at or before hi
  double acc = 0.0;
  while (hi - lo > sort_below) {
    const size_t mid = lo + (hi - lo) / 2;
    select_ids(values, ids.subspan(lo, hi - lo), mid - lo);
    double mass = 0.0;
    for (size_t i = lo; i < mid; ++i) mass += weight(ids[i]);
    if (before ? acc + mass < target : acc + mass <= target) {
      acc += mass;
      lo = mid;
    } else {
      hi = mid;
    }
  }
  sort_ids(values, ids.subspan(lo, hi - lo));
  size_t i = lo;
  for (; i < hi; ++i) {
    const double w = weight(ids[i]);
    if (before ? !(acc < target) : !(acc + w <= target)) break;
    acc += w;
  }
  return i;
}

std::vector<int32_t> top_ids(std::span<const float> values, size_t k) {
  k = std::min(k, values.size());
  const rank_before better{values};
  if (k * 8 > values.size()) {  // a large share of the vocab: select, then sort the head
    std::vector<int32_t> ids(values.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::nth_element(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(), better);
    ids.resize(k);
    std::sort(ids.begin(), ids.end(), better);
    return ids;
  }
  std::vector<int32_t> heap;  // front: the worst id kept so far
  heap.reserve(k);
  if (k == 0) return heap;
  for (size_t i = 0; i < values.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (heap.size() < k) {
      heap.push_back(id);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(id, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = id;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), better);
  return heap;
}

}  // namespace actorserve::gpu
