#include "actors/sequence.hpp"

#include <algorithm>

#include "actors/block_hash.hpp"

namespace actorserve::actors {

seq_finish append_token(sequence& s, int32_t token, const std::vector<int32_t>& eos_ids, int32_t max_model_len,
                        int32_t block_size, bool hash_blocks) {
  s.tokens.push_back(token);
  if (hash_blocks) extend_block_hashes(s.block_hashes, s.tokens, block_size);
  const auto& p = *s.params;
  const bool may_stop = s.num_generated() > p.min_tokens;
  auto contains = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if (may_stop && ((!p.ignore_eos && contains(eos_ids)) || contains(p.stop_token_ids))) return seq_finish::stop;
  if (s.num_generated() >= p.max_tokens) return seq_finish::length;
  if (max_model_len > 0 && s.num_tokens() >= max_model_len) return seq_finish::length;
  return seq_finish::none;
}

}  // namespace actorserve::actors
