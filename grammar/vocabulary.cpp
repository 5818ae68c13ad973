#include "grammar/vocabulary.hpp"

#include <algorithm>

namespace actorserve::grammar {

vocabulary::vocabulary(int32_t size, std::vector<std::string> token_bytes, std::vector<uint8_t> excluded,
                       std::vector<int32_t> terminators)
    : size_(std::max<int32_t>(size, 0)), bytes_(std::move(token_bytes)), terminators_(std::move(terminators)) {
  if (bytes_.size() > static_cast<size_t>(size_)) bytes_.resize(static_cast<size_t>(size_));
  allowed_.assign(bytes_.size(), 0);
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    const bool out = bytes_[id].empty() || (id < excluded.size() && excluded[id]);
    if (out) {
      bytes_[id].clear();
      continue;
    }
    allowed_[id] = 1;
    order.push_back(static_cast<int32_t>(id));
    max_token_bytes_ = std::max<uint32_t>(max_token_bytes_, static_cast<uint32_t>(bytes_[id].size()));
  }
  terminators_.erase(std::remove_if(terminators_.begin(), terminators_.end(),
                                    [&](int32_t id) { return id < 0 || id >= size_; }),
                     terminators_.end());
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)] ||
           (bytes_[static_cast<size_t>(a)] == bytes_[static_cast<size_t>(b)] && a < b);
  });

  // Preorder trie from the sorted strings: a node per distinct prefix.
  token_trie& t = trie_;
  std::vector<uint32_t> path;  // node index at each depth of the current string
  std::string_view prev;
  for (int32_t id : order) {
    std::string_view s = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    // Close the nodes below the common prefix.
    for (size_t d = path.size(); d > common; --d) t.end[path[d - 1]] = t.num_nodes();
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(t.num_nodes());
      t.byte.push_back(static_cast<uint8_t>(s[d]));
      t.depth.push_back(static_cast<uint32_t>(d + 1));
      t.end.push_back(0);
      t.first_token.push_back(static_cast<uint32_t>(t.token_ids.size()));
    }
    // Tokens are sorted, so this id belongs to the newest node on the path (its last byte).
    t.token_ids.push_back(id);
    prev = s;
  }
  for (size_t d = path.size(); d > 0; --d) t.end[path[d - 1]] = t.num_nodes();
  // first_token was recorded when each node was made; the ids of a node sit right after it was
  // made (preorder and sorted order agree), so its range ends where the next node's begins.
  t.first_token.push_back(static_cast<uint32_t>(t.token_ids.size()));
}

std::string_view vocabulary::bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return {};
  return bytes_[static_cast<size_t>(id)];
}

bool vocabulary::allowed(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < allowed_.size() && allowed_[static_cast<size_t>(id)];
}

}  // namespace actorserve::grammar
