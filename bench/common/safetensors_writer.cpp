#include "bench/common/safetensors_writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

namespace actorserve::bench {
namespace {

constexpr int64_t chunk_bytes = int64_t{32} << 20;   ///< one worker job
constexpr uint16_t bf16_one = 0x3F80;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9).
double inverse_normal_cdf(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  };
  constexpr double p_low = 0.02425;
  if (p < p_low) return tail(std::sqrt(-2 * std::log(p)));
  if (p > 1 - p_low) return -tail(std::sqrt(-2 * std::log(1 - p)));
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFF + ((u >> 16) & 1);   // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

/// 65536 equiprobable quantiles of N(0, std) in bf16: 16 random bits pick one.
std::vector<uint16_t> normal_table(double std) {
  std::vector<uint16_t> t(65536);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = to_bf16(static_cast<float>(std * inverse_normal_cdf((static_cast<double>(i) + 0.5) / 65536.0)));
  return t;
}

struct shard_layout {
  std::string path;
  std::string header;                    ///< 8-byte length + JSON, padded to 8 bytes
  std::vector<int64_t> begin;            ///< data offset of each tensor
  int64_t data_bytes = 0;
};

shard_layout layout_shard(const std::string& dir, const shard_plan& plan) {
  shard_layout l;
  l.path = dir + "/" + plan.file_name;
  std::string json = R"({"__metadata__":{"format":"pt"})";
  for (const auto& t : plan.tensors) {
    l.begin.push_back(l.data_bytes);
    std::string shape;
    for (int64_t d : t.shape) shape += fmt::format("{}{}", shape.empty() ? "" : ",", d);
    json += fmt::format(R"(,"{}":{{"dtype":"BF16","shape":[{}],"data_offsets":[{},{}]}})", t.name, shape,
                        l.data_bytes, l.data_bytes + t.num_bytes());
    l.data_bytes += t.num_bytes();
  }
  json += "}";
  while ((json.size() + 8) % 8 != 0) json += ' ';
  l.header.resize(8);
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) l.header[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  l.header += json;
  return l;
}

status write_all(int fd, const char* data, int64_t len, int64_t offset, const std::string& path) {
  while (len > 0) {
    ssize_t n = ::pwrite(fd, data, static_cast<size_t>(len), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(error_code::internal, fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    data += n;
    len -= n;
    offset += n;
  }
  return {};
}

/// Fills bytes [off, off + len) of a shard's data section.
void fill_chunk(const shard_plan& plan, const shard_layout& l, int64_t off, int64_t len, uint64_t seed,
                const std::vector<uint16_t>& table, uint16_t* out) {
  uint64_t state = seed;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const int64_t tb = l.begin[i], te = tb + plan.tensors[i].num_bytes();
    const int64_t b = std::max(tb, off), e = std::min(te, off + len);
    if (b >= e) continue;
    uint16_t* p = out + (b - off) / 2;
    const int64_t n = (e - b) / 2;
    if (plan.tensors[i].fill == fill_kind::ones) {
      std::fill(p, p + n, bf16_one);
      continue;
    }
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const uint64_t r = splitmix64(state);
      p[j] = table[r & 0xFFFF];
      p[j + 1] = table[(r >> 16) & 0xFFFF];
      p[j + 2] = table[(r >> 32) & 0xFFFF];
      p[j + 3] = table[r >> 48];
    }
    for (const uint64_t r = splitmix64(state); j < n; ++j) p[j] = table[(r >> (16 * (j % 4))) & 0xFFFF];
  }
}

}  // namespace

int64_t tensor_spec::num_bytes() const {
  int64_t n = 2;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<shard_plan> plan_shards(const std::vector<tensor_spec>& tensors, double shard_bytes) {
  std::vector<shard_plan> shards;
  int64_t current = 0;
  for (const auto& t : tensors) {
    if (shards.empty() || (current > 0 && static_cast<double>(current + t.num_bytes()) > shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().tensors.push_back(t);
    current += t.num_bytes();
  }
  for (size_t i = 0; i < shards.size(); ++i)
    shards[i].file_name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
  return shards;
}

std::string index_json(const std::vector<shard_plan>& shards) {
  int64_t total = 0;
  for (const auto& s : shards)
    for (const auto& t : s.tensors) total += t.num_bytes();
  std::string out = fmt::format("{{\n  \"metadata\": {{\"total_size\": {}}},\n  \"weight_map\": {{", total);
  bool first = true;
  for (const auto& s : shards)
    for (const auto& t : s.tensors) {
      out += fmt::format("{}\n    \"{}\": \"{}\"", first ? "" : ",", t.name, s.file_name);
      first = false;
    }
  return out + "\n  }\n}\n";
}

result<int64_t> write_shards(const std::string& dir, const std::vector<shard_plan>& shards, uint64_t seed,
                             double std, int32_t threads) {
  const auto table = normal_table(std);
  std::vector<shard_layout> layouts;
  std::vector<int> fds;
  struct job { size_t shard; int64_t off, len; };
  std::vector<job> jobs;
  int64_t total = 0;
  std::optional<error> failure;
  for (size_t s = 0; s < shards.size() && !failure; ++s) {
    layouts.push_back(layout_shard(dir, shards[s]));
    const auto& l = layouts.back();
    int fd = ::open(l.path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
      failure = make_error(error_code::not_found, fmt::format("{}: cannot create: {}", l.path, std::strerror(errno)));
      break;
    }
    fds.push_back(fd);
    if (auto st = write_all(fd, l.header.data(), static_cast<int64_t>(l.header.size()), 0, l.path); !st)
      failure = st.err();
    for (int64_t off = 0; off < l.data_bytes; off += chunk_bytes)
      jobs.push_back({s, off, std::min(chunk_bytes, l.data_bytes - off)});
    total += static_cast<int64_t>(l.header.size()) + l.data_bytes;
  }
  std::atomic<size_t> next{0};
  std::mutex fail_mu;
  auto worker = [&] {
    std::vector<uint16_t> buf(chunk_bytes / 2);
    for (size_t j = next++; j < jobs.size(); j = next++) {
      const job& jb = jobs[j];
      const auto& l = layouts[jb.shard];
      uint64_t chunk_seed = seed ^ (0xD1B54A32D192ED03ULL * (j + 1));
      fill_chunk(shards[jb.shard], l, jb.off, jb.len, splitmix64(chunk_seed), table, buf.data());
      auto st = write_all(fds[jb.shard], reinterpret_cast<const char*>(buf.data()), jb.len,
                          static_cast<int64_t>(l.header.size()) + jb.off, l.path);
      if (!st) {
        std::lock_guard<std::mutex> lock(fail_mu);
        if (!failure) failure = st.err();
        next = jobs.size();
      }
    }
  };
  if (!failure) {
    const int32_t n = threads > 0 ? threads : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int32_t i = 0; i < n; ++i) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  for (int fd : fds)
    if (::close(fd) != 0 && !failure) failure = make_error(error_code::internal, "close failed on a shard file");
  if (failure) return *failure;
  return total;
}

}  // namespace actorserve::bench
