#pragma once
/// A test's own directory under the test temp dir, removed with its contents when the owner goes
/// away, so that a test run leaves $TEST_TMPDIR / $TMPDIR (default /tmp) as it found it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

namespace actorserve::testing {

/// Numbers the directories of one process, so two live ones with the same name never collide.
inline std::atomic<unsigned> num_scratch_dirs{0};

/// A fresh directory `actorserve_<name>_<pid>_<n>` under ::testing::TempDir(); its destructor
/// removes it recursively. Move-only: exactly one owner removes it.
// NOTE: no conversion to std::filesystem::path, so a caller cannot keep the path while the owner
// (and with it the directory) is already gone.
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& name)
      : path_(std::filesystem::path(::testing::TempDir()) /
              ("actorserve_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(num_scratch_dirs++))) {
    std::filesystem::remove_all(path_);  // left by an earlier process with the same id
    std::filesystem::create_directories(path_);
  }
  ~scratch_dir() { remove(); }

  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  scratch_dir(scratch_dir&& other) noexcept
      : path_(std::exchange(other.path_, {})), kept_(std::exchange(other.kept_, false)) {}
  scratch_dir& operator=(scratch_dir&& other) noexcept {
    if (this != &other) {
      remove();
      path_ = std::exchange(other.path_, {});
      kept_ = std::exchange(other.kept_, false);
    }
    return *this;
  }

  /// The directory (empty once moved from).
  const std::filesystem::path& path() const { return path_; }
  /// A path inside the directory.
  std::filesystem::path operator/(const std::filesystem::path& relative) const { return path_ / relative; }
  /// Leaves the directory in place when the owner goes away (a failed run's logs, for reading).
  void keep() { kept_ = true; }

 private:
  void remove() noexcept {
    if (path_.empty() || kept_) return;
    std::error_code ec;  // a destructor does not throw; a directory left behind fails the test
    std::filesystem::remove_all(path_, ec);
    if (ec) ADD_FAILURE() << "cannot remove " << path_ << ": " << ec.message();
  }

  std::filesystem::path path_;
  bool kept_ = false;
};

}  // namespace actorserve::testing
