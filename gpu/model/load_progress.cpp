#include "gpu/model/load_progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "config/log.hpp"

namespace actorserve::gpu {
namespace {

constexpr int bar_width = 30;
constexpr auto redraw_interval = std::chrono::milliseconds(100);

double gigabytes(uint64_t bytes) { return double(bytes) / 1e9; }

double rate_gb_s(uint64_t bytes, double seconds) { return seconds > 0 ? gigabytes(bytes) / seconds : 0.0; }

}  // namespace

load_progress::output load_progress::stderr_output() {
  output o;
  o.terminal = ::isatty(STDERR_FILENO) == 1 && log::enabled(log::level::info);
  o.redraw = [](std::string_view text) {
    std::fprintf(stderr, "\r%.*s\033[K", static_cast<int>(text.size()), text.data());
    std::fflush(stderr);
  };
  o.line = [](std::string_view text) { log::info("{}", text); };
  return o;
}

load_progress::load_progress(uint64_t total_bytes, output out, clock::time_point start)
    : total_(total_bytes), out_(std::move(out)), start_(start), last_redraw_(start) {}

std::string load_progress::bar(double seconds) const {
  const double frac = total_ ? std::min(1.0, double(done_) / double(total_)) : 1.0;
  const int filled = static_cast<int>(frac * bar_width);
  return fmt::format("loading weights [{}{}] {:.1f} / {:.1f} GB, {:.2f} GB/s", std::string(size_t(filled), '#'),
                     std::string(size_t(bar_width - filled), '.'), gigabytes(done_), gigabytes(total_),
                     rate_gb_s(done_, seconds));
}

void load_progress::advance(uint64_t bytes, clock::time_point now) {
  done_ += bytes;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (out_.terminal) {
    if (now - last_redraw_ >= redraw_interval || (total_ && done_ >= total_)) {
      out_.redraw(bar(seconds));
      last_redraw_ = now;
      drawn_ = true;
    }
    return;
  }
  const int tenths = total_ ? static_cast<int>(std::min<uint64_t>(10, done_ * 10 / total_)) : 10;
  if (tenths > tenths_logged_) {
    tenths_logged_ = tenths;
    out_.line(fmt::format("loading weights: {}% ({:.1f} / {:.1f} GB, {:.2f} GB/s)", tenths * 10, gigabytes(done_),
                          gigabytes(total_), rate_gb_s(done_, seconds)));
  }
}

void load_progress::finish(std::string_view where, clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (out_.terminal && drawn_) out_.redraw("");  // clears the bar's line for the closing log line
  out_.line(fmt::format("weights loaded: {:.2f} GB {} in {:.2f} s ({:.2f} GB/s)", gigabytes(done_), where, seconds,
                        rate_gb_s(done_, seconds)));
}

}  // namespace actorserve::gpu
