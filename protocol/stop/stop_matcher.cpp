#include "protocol/stop/stop_matcher.hpp"

#include <algorithm>
#include <utility>

namespace actorserve::protocol {
namespace {

/// Bytes at the end of `text` that start a UTF-8 character not yet complete (0 if none).
size_t incomplete_utf8_tail(std::string_view text) {
  const size_t look = std::min<size_t>(text.size(), 3);
  for (size_t back = 1; back <= look; ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((byte & 0xE0) == 0xC0) need = 2;
    else if ((byte & 0xF0) == 0xE0) need = 3;
    else if ((byte & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes (or nothing): not ours to repair
}

}  // namespace

stop_matcher::stop_matcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

stop_matcher::output stop_matcher::push(std::string_view new_text) {
  output out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  pending_.append(new_text);
  // The first stop is the one that completes first (then the longer one), as a reader scanning
  // left to right meets it; this makes the result independent of how the text was split.
  // NOTE: searching pending_ alone is enough: any stop occurrence that began in text already
  // emitted would have made that text a held-back partial match.
  size_t first = std::string::npos;
  size_t first_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t pos = pending_.find(stop);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stop.size();
    if (end < first_end || (end == first_end && pos < first)) {
      first = pos;
      first_end = end;
    }
  }
  if (first != std::string::npos) {
    out.text_to_emit = pending_.substr(0, first);
    out.stopped = stopped_ = true;
    pending_.clear();
    return out;
  }
  const size_t hold = std::max(partial_match_length(), incomplete_utf8_tail(pending_));
  out.text_to_emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string stop_matcher::flush() {
  return std::exchange(pending_, std::string());
}

size_t stop_matcher::partial_match_length() const {
  size_t best = 0;
  const std::string_view text(pending_);
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace actorserve::protocol
