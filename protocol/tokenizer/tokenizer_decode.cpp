// Decoding: ids -> vocabulary strings -> the decoder chain (ByteLevel, Replace, ByteFallback,
// Fuse, Strip, Metaspace), with Hugging Face's semantics for each step.
#include <string>
#include <vector>

#include "protocol/tokenizer/byte_level.hpp"
#include "protocol/tokenizer/tokenizer_impl.hpp"
#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::protocol::detail {
namespace {

void replace_in(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/// NN of a `<0xNN>` token, else -1.
int byte_token(std::string_view tok) {
  if (tok.size() != 6 || tok.compare(0, 3, "<0x") != 0 || tok[5] != '>') return -1;
  int hi = hex_value(tok[3]);
  int lo = hex_value(tok[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void apply_byte_level(std::vector<std::string>& toks) {
  std::string bytes;
  for (const std::string& tok : toks) {
    if (auto b = byte_level_to_bytes(tok))
      bytes += *b;
    else
      bytes += tok;
  }
  std::string out;
  append_utf8_lossy(out, bytes);
  toks.assign(1, std::move(out));
}

void apply_byte_fallback(std::vector<std::string>& toks) {
  std::vector<std::string> out;
  out.reserve(toks.size());
  std::string pending;
  auto flush = [&] {
    if (pending.empty()) return;
    if (is_valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(replacement_char);
    }
    pending.clear();
  };
  for (std::string& tok : toks) {
    int b = byte_token(tok);
    if (b >= 0) {
      pending.push_back(static_cast<char>(b));
      continue;
    }
    flush();
    out.push_back(std::move(tok));
  }
  flush();
  toks.swap(out);
}

void apply_strip(std::vector<std::string>& toks, const decoder_step& d) {
  const std::string& c = d.content;
  if (c.empty()) return;
  for (std::string& tok : toks) {
    size_t cut = 0;
    for (int i = 0; i < d.start && tok.compare(cut, c.size(), c) == 0; ++i) cut += c.size();
    size_t end = tok.size();
    for (int i = 0; i < d.stop && end >= cut + c.size() && tok.compare(end - c.size(), c.size(), c) == 0; ++i)
      end -= c.size();
    tok = tok.substr(cut, end - cut);
  }
}

void apply_metaspace(std::vector<std::string>& toks, const decoder_step& d) {
  for (size_t i = 0; i < toks.size(); ++i) {
    replace_in(toks[i], d.pattern, " ");
    if (i == 0 && d.start > 0 && !toks[i].empty() && toks[i][0] == ' ') toks[i].erase(0, 1);
  }
}

}  // namespace

bool tokenizer_impl::decodes_byte_fallback() const {
  for (const decoder_step& d : decoders)
    if (d.type == decoder_step::kind::byte_fallback) return true;
  return false;
}

bool tokenizer_impl::decodes_byte_level() const {
  for (const decoder_step& d : decoders)
    if (d.type == decoder_step::kind::byte_level) return true;
  return false;
}

std::string decode_ids(const tokenizer_impl& t, std::span<const int32_t> ids, bool skip_special_tokens) {
  auto keep = [&](int32_t id) {
    return t.token_of(id) != nullptr && !(skip_special_tokens && static_cast<size_t>(id) < t.special.size() &&
                                          t.special[id]);
  };
  if (!t.byte_level_bytes.empty()) {  // decoder chain is exactly ByteLevel
    std::string bytes;
    for (int32_t id : ids)
      if (keep(id)) bytes += t.byte_level_bytes[id];
    std::string out;
    append_utf8_lossy(out, bytes);
    return out;
  }
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids)
    if (keep(id)) toks.push_back(*t.token_of(id));
  if (t.decoders.empty()) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
    return out;
  }
  for (const decoder_step& d : t.decoders) {
    switch (d.type) {
      case decoder_step::kind::byte_level: apply_byte_level(toks); break;
      case decoder_step::kind::replace:
        for (std::string& tok : toks) replace_in(tok, d.pattern, d.content);
        break;
      case decoder_step::kind::byte_fallback: apply_byte_fallback(toks); break;
      case decoder_step::kind::fuse: {
        std::string all;
        for (const std::string& tok : toks) all += tok;
        toks.assign(1, std::move(all));
        break;
      }
      case decoder_step::kind::strip: apply_strip(toks, d); break;
      case decoder_step::kind::metaspace: apply_metaspace(toks, d); break;
    }
  }
  std::string out;
  for (const std::string& tok : toks) out += tok;
  // Decoders other than ByteLevel pass bytes through; keep the result valid UTF-8.
  if (is_valid_utf8(out)) return out;
  std::string fixed;
  append_utf8_lossy(fixed, out);
  return fixed;
}

std::optional<std::string> token_bytes(const tokenizer_impl& t, int32_t id) {
  const std::string* tok = t.token_of(id);
  if (!tok) return std::nullopt;
  if (!t.byte_level_bytes.empty()) return t.byte_level_bytes[static_cast<size_t>(id)];
  std::string s = *tok;
  bool fused = false;
  for (const decoder_step& d : t.decoders) {
    switch (d.type) {
      case decoder_step::kind::byte_level:
        if (auto b = byte_level_to_bytes(s)) s = *b;
        break;
      case decoder_step::kind::replace: replace_in(s, d.pattern, d.content); break;
      case decoder_step::kind::byte_fallback:
        if (const int b = byte_token(s); b >= 0) s = std::string(1, static_cast<char>(b));
        break;
      case decoder_step::kind::fuse: fused = true; break;
      case decoder_step::kind::strip:
        // After Fuse it strips the whole text's ends, which a token in the middle never is.
        if (!fused) {
          std::vector<std::string> one{s};
          apply_strip(one, d);
          s = one[0];
        }
        break;
      case decoder_step::kind::metaspace: replace_in(s, d.pattern, " "); break;
    }
  }
  return s;
}

}  // namespace actorserve::protocol::detail
