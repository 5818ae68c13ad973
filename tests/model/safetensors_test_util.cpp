#include "model/safetensors_test_util.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "test_data.hpp"

namespace actorserve::testing {

safetensors_parts split_safetensors(const std::string& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b.at(static_cast<size_t>(i)));
  return {b.substr(8, n), b.substr(8 + n)};
}

std::string join_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

scratch_dir copy_model(const std::string& name, const std::string& tag) {
  namespace fs = std::filesystem;
  scratch_dir dst("model_" + tag);
  for (const auto& e : fs::directory_iterator(model_dir(name))) {
    if (e.path().filename() == "reference.json") continue;
    fs::copy_file(e.path(), dst / e.path().filename());
    fs::permissions(dst / e.path().filename(), fs::perms::owner_read | fs::perms::owner_write);
  }
  return dst;
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const size_t pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << "'" << from << "' not found";
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

}  // namespace actorserve::testing
