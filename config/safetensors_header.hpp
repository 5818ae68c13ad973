#pragma once
/// The safetensors container format: an 8-byte little-endian header length, a JSON header
/// (name -> {dtype, shape, data_offsets}, optional __metadata__), then the data section.
/// Also `model.safetensors.index.json` (weight_map) for sharded checkpoints. Parsing never
/// trusts its input: every inconsistency is an error naming the file and the tensor.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/error.hpp"

namespace actorserve {

enum class st_dtype { f64, f32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, boolean, f8_e4m3, f8_e5m2 };

/// Bytes per element of a dtype.
size_t dtype_size(st_dtype d);
/// The dtype as safetensors spells it ("F32", "BF16", ...).
const char* to_string(st_dtype d);

struct safetensors_tensor {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;   ///< byte offset inside the data section
  uint64_t end = 0;     ///< one past the last byte, inside the data section

  uint64_t num_elements() const;
  uint64_t num_bytes() const { return end - begin; }
};

struct safetensors_header {
  uint64_t header_size = 0;    ///< length of the JSON header
  uint64_t data_offset = 0;    ///< file offset of the data section (8 + header_size)
  std::vector<safetensors_tensor> tensors;                     ///< in header order
  std::vector<std::pair<std::string, std::string>> metadata;   ///< __metadata__ (string values)
};

/// Headers larger than this are rejected (the reference implementation uses the same bound).
inline constexpr uint64_t max_safetensors_header_size = 100'000'000;

/// Reads the 8-byte prefix of `bytes` (the first bytes of the file, at least 8); the header
/// length it declares, or an error when it exceeds the file.
result<uint64_t> read_safetensors_header_size(std::string_view bytes, size_t file_size, const std::string& file_name);

/// Parses and validates a header. `bytes` holds the start of the file: the 8-byte prefix and at
/// least the header; `file_size` is the whole file's size. Safe on arbitrary input.
result<safetensors_header> parse_safetensors_header(std::string_view bytes, size_t file_size,
                                                    const std::string& file_name_for_errors);

/// `model.safetensors.index.json`: which shard file holds each tensor.
struct safetensors_index {
  std::vector<std::pair<std::string, std::string>> weight_map;  ///< tensor name -> shard file name
  std::vector<std::string> shard_files() const;                ///< distinct, in first-seen order
};

/// Parses the text of an index file; shard names must be plain file names (no '/').
result<safetensors_index> parse_safetensors_index(std::string_view json, const std::string& file_name_for_errors);

}  // namespace actorserve
