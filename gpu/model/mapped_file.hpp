#pragma once
/// A read-only memory-mapped file (RAII). Weights are read straight from the page cache.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "config/error.hpp"

namespace actorserve::gpu {

class mapped_file {
 public:
  /// Maps the whole file read-only; errors name the path.
  static result<std::unique_ptr<mapped_file>> open(const std::string& path);
  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  mapped_file() = default;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace actorserve::gpu
