// Encoding: added tokens first (raw text), then normalizer, added tokens again (normalized
// text), pre-tokenizer splits and the BPE model, then the post-processor's BOS/EOS.
#include <string>
#include <vector>

#include "protocol/tokenizer/tokenizer_impl.hpp"

namespace actorserve::protocol::detail {
namespace {

bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word_byte(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

struct added_match {
  size_t start = 0;
  size_t end = 0;
  int32_t id = -1;
};

/// The leftmost (then longest) added token in text[from..], with lstrip/rstrip applied.
bool find_added(const tokenizer_impl& t, const tokenizer_impl::added_index& index, std::string_view text,
                size_t from, added_match& m) {
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& cands = index.by_first_byte[static_cast<uint8_t>(text[pos])];
    for (uint32_t ci : cands) {
      const added_token& tok = t.added[ci];
      if (text.compare(pos, tok.content.size(), tok.content) != 0) continue;
      size_t end = pos + tok.content.size();
      if (tok.single_word) {
        bool left_ok = pos == 0 || !is_word_byte(static_cast<uint8_t>(text[pos - 1]));
        bool right_ok = end == text.size() || !is_word_byte(static_cast<uint8_t>(text[end]));
        if (!left_ok || !right_ok) continue;
      }
      size_t start = pos;
      if (tok.lstrip)
        while (start > from && is_space(static_cast<uint8_t>(text[start - 1]))) --start;
      if (tok.rstrip)
        while (end < text.size() && is_space(static_cast<uint8_t>(text[end]))) ++end;
      m = {start, end, tok.id};
      return true;
    }
  }
  return false;
}

/// Calls seg(piece, offset) for the text between added tokens and tok(id) for each token.
template <class Seg, class Tok>
void split_added(const tokenizer_impl& t, const tokenizer_impl::added_index& index, std::string_view text, Seg&& seg,
                 Tok&& tok) {
  size_t pos = 0;
  added_match m;
  while (!index.empty && find_added(t, index, text, pos, m)) {
    if (m.start > pos) seg(text.substr(pos, m.start - pos), pos);
    tok(m.id);
    pos = m.end;
  }
  if (pos < text.size()) seg(text.substr(pos), pos);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos);
  s.swap(out);
}

/// Pre-tokenizer and model for one piece of normalized text.
void encode_pretokenized(const tokenizer_impl& t, std::string_view text, bool at_start, std::vector<int32_t>& out) {
  std::string buf;
  if (t.metaspace) {
    const metaspace_settings& ms = *t.metaspace;
    buf.assign(text);
    replace_all(buf, " ", ms.replacement);
    bool prepend = ms.prepend_scheme == metaspace_settings::prepend::always ||
                   (ms.prepend_scheme == metaspace_settings::prepend::first && at_start);
    if (prepend && buf.compare(0, ms.replacement.size(), ms.replacement) != 0) buf.insert(0, ms.replacement);
    text = buf;
  }
  if (t.byte_level_prefix_space && (text.empty() || text[0] != ' ')) {
    buf.insert(0, 1, ' ');
    if (!t.metaspace) buf.append(text);
    text = buf;
  }
  thread_local std::vector<std::string_view> pieces;
  thread_local std::vector<std::string_view> next;
  pieces.assign(1, text);
  for (const regex_splitter& sp : t.splitters) {
    next.clear();
    for (std::string_view p : pieces) sp.split(p, next);
    pieces.swap(next);
  }
  if (t.metaspace && t.metaspace->split) {
    const std::string& r = t.metaspace->replacement;
    next.clear();
    for (std::string_view p : pieces) {
      size_t start = 0;
      for (size_t hit = p.find(r, 1); hit != std::string_view::npos; hit = p.find(r, hit + r.size())) {
        next.push_back(p.substr(start, hit - start));
        start = hit;
      }
      next.push_back(p.substr(start));
    }
    pieces.swap(next);
  }
  // NOTE: `pieces` is thread_local and encode_word does not recurse into this function.
  for (std::string_view p : pieces) t.model.encode_word(p, out);
}

/// Normalizer, then added tokens on the normalized text, then pre-tokenizer and model.
void encode_segment(const tokenizer_impl& t, std::string_view seg, bool at_start, std::vector<int32_t>& out) {
  std::string normalized;
  if (!t.normalizers.empty()) {
    normalized.assign(seg);
    for (const normalizer_step& n : t.normalizers) {
      if (n.type == normalizer_step::kind::prepend) {
        if (!normalized.empty()) normalized.insert(0, n.content);
      } else if (n.type == normalizer_step::kind::unicode) {
        normalized = unicode_normalize(normalized, n.form);
      } else {
        replace_all(normalized, n.pattern, n.content);
      }
    }
    seg = normalized;
  }
  split_added(
      t, t.normalized_added, seg,
      [&](std::string_view piece, size_t offset) { encode_pretokenized(t, piece, at_start && offset == 0, out); },
      [&](int32_t id) { out.push_back(id); });
}

}  // namespace

void encode_text(const tokenizer_impl& t, std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) {
  bool add_bos = add_special_tokens && !t.has_post_processor && t.add_bos_token.value_or(false) && t.bos_id;
  bool add_eos = add_special_tokens && !t.has_post_processor && t.add_eos_token.value_or(false) && !t.eos_ids.empty();
  if (add_special_tokens) out.insert(out.end(), t.post_prefix.begin(), t.post_prefix.end());
  if (add_bos) out.push_back(*t.bos_id);
  split_added(
      t, t.raw_added, text, [&](std::string_view seg, size_t offset) { encode_segment(t, seg, offset == 0, out); },
      [&](int32_t id) { out.push_back(id); });
  if (add_special_tokens) out.insert(out.end(), t.post_suffix.begin(), t.post_suffix.end());
  if (add_eos) out.push_back(t.eos_ids.front());
}

}  // namespace actorserve::protocol::detail
