#include "protocol/tokenizer/regex_splitter.hpp"

#include <fmt/format.h>
#include <pcre2.h>

namespace actorserve::protocol::detail {

struct regex_splitter::code {
  pcre2_code* re = nullptr;
  ~code() { pcre2_code_free(re); }
};

namespace {

/// Per-thread JIT stack and match data: PCRE2's default 32 KiB JIT stack is too small for long
/// runs of whitespace under `\s+(?!\S)`.
struct thread_match_state {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_match_data* data = pcre2_match_data_create(4, nullptr);
  thread_match_state() {
    if (stack && ctx) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~thread_match_state() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
  thread_match_state(const thread_match_state&) = delete;
  thread_match_state& operator=(const thread_match_state&) = delete;
};

}  // namespace

result<regex_splitter> regex_splitter::compile(std::string_view pattern, behavior b, const std::string& what) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                                 &offset, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return make_error(error_code::malformed_file, fmt::format("{}: regex does not compile at offset {}: {}", what,
                                                              offset, reinterpret_cast<const char*>(msg)));
  }
  auto c = std::make_shared<code>();
  c->re = re;
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // NOTE: without JIT pcre2_match still works, slower
  return regex_splitter(std::move(c), b);
}

void regex_splitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local thread_match_state st;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_start = 0;
  auto emit_gap = [&](size_t end) {
    if (end > gap_start) out.push_back(text.substr(gap_start, end - gap_start));
  };
  while (pos < text.size()) {
    int rc = pcre2_match(code_->re, subject, text.size(), pos, 0, st.data, st.ctx);
    if (rc < 0) break;  // no match (or a matching error): the rest is one gap
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t start = ov[0];
    size_t end = ov[1];
    if (end <= start) {  // empty match: step over one byte, it joins the gap
      pos = start + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    emit_gap(start);
    if (behavior_ == behavior::isolated) out.push_back(text.substr(start, end - start));
    gap_start = end;
    pos = end;
  }
  emit_gap(text.size());
}

}  // namespace actorserve::protocol::detail
