#pragma once
/// Progress of a weight load, in checkpoint bytes read: on a terminal one bar redrawn in place
/// (`loading weights [#########...........] 6.4 / 16.1 GB, 4.12 GB/s`), otherwise one log line
/// per tenth of the bytes; a closing line with the total, the time and the rate either way.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace actorserve::gpu {

class load_progress {
 public:
  using clock = std::chrono::steady_clock;

  /// Where the progress goes: `redraw` replaces the terminal's current line (no newline);
  /// `line` writes one log line. With `terminal` false only `line` is used.
  struct output {
    bool terminal = false;
    std::function<void(std::string_view)> redraw;
    std::function<void(std::string_view)> line;
  };

  /// stderr: the bar when stderr is a terminal and info logging is on, plain log lines otherwise.
  static output stderr_output();

  load_progress(uint64_t total_bytes, output out, clock::time_point start = clock::now());

  /// `bytes` more were read. Redraws at most every 100 ms; logs when a tenth boundary is crossed.
  void advance(uint64_t bytes, clock::time_point now = clock::now());
  /// Ends the bar and logs "weights loaded: X GB in S s (R GB/s)"; `where` names the target
  /// ("on the GPU", "in host memory").
  void finish(std::string_view where, clock::time_point now = clock::now());

  uint64_t done_bytes() const { return done_; }

 private:
  std::string bar(double seconds) const;

  uint64_t total_, done_ = 0;
  output out_;
  clock::time_point start_, last_redraw_;
  int tenths_logged_ = 0;
  bool drawn_ = false;
};

}  // namespace actorserve::gpu
