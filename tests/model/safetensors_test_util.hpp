#pragma once
/// Builds safetensors files and broken model-directory copies for the loader tests.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "scratch_dir.hpp"

namespace actorserve::testing {

/// A file's 8-byte length prefix + header text, and the data section after it.
struct safetensors_parts {
  std::string header;
  std::string data;
};
safetensors_parts split_safetensors(const std::string& file_bytes);
/// Reassembles a file from a (possibly edited) header and a data section.
std::string join_safetensors(const std::string& header, const std::string& data);

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& bytes);

/// A fresh writable copy of a fixture model directory under the test temp dir, removed with
/// the returned owner.
scratch_dir copy_model(const std::string& name, const std::string& tag);

/// Replaces the first occurrence of `from` in `s` (the test fails when absent).
std::string replace_once(std::string s, const std::string& from, const std::string& to);

}  // namespace actorserve::testing
