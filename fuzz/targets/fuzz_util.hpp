#pragma once
/// Helpers shared by the libFuzzer targets: invariant checks that abort (so libFuzzer records a
/// crash), splitting one input into several files at NUL bytes, fixtures and scratch files.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// Aborts with a message when an invariant of the code under test does not hold.
#define FUZZ_CHECK(cond, ...)                                                    \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, "  " __VA_ARGS__);                                    \
      std::fprintf(stderr, "\n");                                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

namespace actorserve::fuzz {

/// The input as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Up to `n` parts of `text` split at NUL bytes (the last part keeps any further NULs).
inline std::vector<std::string_view> split_nul(std::string_view text, size_t n) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    size_t at = text.find('\0');
    if (at == std::string_view::npos) break;
    parts.push_back(text.substr(0, at));
    text.remove_prefix(at + 1);
  }
  parts.push_back(text);
  return parts;
}

/// True when $ACTORSERVE_FUZZ_KNOWN (comma-separated names, set by scripts/fuzz_smoke.sh from
/// fuzz/known_issues.txt) lists `name`: a reported finding whose check is skipped until fixed.
inline bool known_issue(std::string_view name) {
  const char* env = std::getenv("ACTORSERVE_FUZZ_KNOWN");
  std::string_view list = env ? env : "";
  while (!list.empty()) {
    size_t comma = list.find(',');
    if (list.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

/// The test fixtures folder: $ACTORSERVE_TEST_DATA or the source tree's tests/data.
inline std::string data_dir() {
  if (const char* env = std::getenv("ACTORSERVE_TEST_DATA"); env && *env) return env;
  return ACTORSERVE_FUZZ_DATA_DEFAULT;
}

/// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<uint8_t>(s[i]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
    i += len;
  }
  return true;
}

/// A per-process scratch folder under /dev/shm (or /tmp), for parsers that read files.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string d = base + "/actorserve_fuzz_" + std::to_string(getpid());
    FUZZ_CHECK(mkdir(d.c_str(), 0700) == 0 || access(d.c_str(), W_OK) == 0, "cannot create %s", d.c_str());
    return d;
  }();
  return dir;
}

/// Removes scratch_dir()/name (for the end of a run).
inline void remove_scratch(const std::string& name) { std::remove((scratch_dir() + "/" + name).c_str()); }

/// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FUZZ_CHECK(out.good(), "cannot write %s", path.c_str());
  return path;
}

}  // namespace actorserve::fuzz
