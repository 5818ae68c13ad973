#include "config/safetensors_header.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <unordered_set>

namespace actorserve {
namespace {

namespace dom = simdjson::dom;

struct dtype_entry {
  const char* name;
  st_dtype dtype;
  size_t size;
};

constexpr dtype_entry dtype_table[] = {
    {"F64", st_dtype::f64, 8},  {"F32", st_dtype::f32, 4},         {"F16", st_dtype::f16, 2},
    {"BF16", st_dtype::bf16, 2}, {"I64", st_dtype::i64, 8},        {"I32", st_dtype::i32, 4},
    {"I16", st_dtype::i16, 2},  {"I8", st_dtype::i8, 1},           {"U64", st_dtype::u64, 8},
    {"U32", st_dtype::u32, 4},  {"U16", st_dtype::u16, 2},         {"U8", st_dtype::u8, 1},
    {"BOOL", st_dtype::boolean, 1}, {"F8_E4M3", st_dtype::f8_e4m3, 1}, {"F8_E5M2", st_dtype::f8_e5m2, 1},
};

error malformed(const std::string& file, std::string what) {
  return make_error(error_code::malformed_file, fmt::format("{}: {}", file, what));
}

/// Parses one tensor entry's {dtype, shape, data_offsets}.
result<safetensors_tensor> parse_entry(std::string_view name, dom::element value, uint64_t data_size,
                                       const std::string& file) {
  safetensors_tensor t;
  t.name = std::string(name);
  auto bad = [&](const std::string& why) { return malformed(file, fmt::format("tensor '{}': {}", t.name, why)); };
  dom::object obj;
  if (value.get_object().get(obj) != simdjson::SUCCESS) return bad("entry is not an object");
  std::string_view dtype_name;
  if (obj["dtype"].get_string().get(dtype_name) != simdjson::SUCCESS) return bad("missing or non-string 'dtype'");
  const dtype_entry* entry = nullptr;
  for (const auto& d : dtype_table)
    if (dtype_name == d.name) entry = &d;
  if (!entry) return bad(fmt::format("unknown dtype '{}'", std::string(dtype_name).substr(0, 32)));
  t.dtype = entry->dtype;
  dom::array shape;
  if (obj["shape"].get_array().get(shape) != simdjson::SUCCESS) return bad("missing or non-array 'shape'");
  uint64_t count = 1;
  bool overflow = false;
  for (dom::element dim : shape) {
    uint64_t d = 0;
    if (dim.get_uint64().get(d) != simdjson::SUCCESS || d > (uint64_t{1} << 62))
      return bad("shape entries must be non-negative integers");
    if (t.shape.size() >= 16) return bad("more than 16 dimensions");
    t.shape.push_back(static_cast<int64_t>(d));
    overflow = overflow || __builtin_mul_overflow(count, d, &count);
  }
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(count, entry->size, &expected_bytes);
  dom::array offsets;
  if (obj["data_offsets"].get_array().get(offsets) != simdjson::SUCCESS || offsets.size() != 2)
    return bad("'data_offsets' must be a list of two integers");
  if (offsets.at(0).get_uint64().get(t.begin) != simdjson::SUCCESS ||
      offsets.at(1).get_uint64().get(t.end) != simdjson::SUCCESS)
    return bad("'data_offsets' must be a list of two integers");
  if (t.end < t.begin) return bad(fmt::format("data_offsets [{}, {}] are reversed", t.begin, t.end));
  if (t.end > data_size)
    return bad(fmt::format("data_offsets [{}, {}] lie outside the data section ({} bytes)", t.begin, t.end,
                           data_size));
  if (overflow || t.end - t.begin != expected_bytes)
    return bad(fmt::format("data_offsets [{}, {}] span {} bytes but shape and dtype {} need {}", t.begin, t.end,
                           t.end - t.begin, entry->name, overflow ? std::string("more than 2^64") :
                                                                    std::to_string(expected_bytes)));
  return t;
}

}  // namespace

size_t dtype_size(st_dtype d) {
  for (const auto& e : dtype_table)
    if (e.dtype == d) return e.size;
  return 0;
}

const char* to_string(st_dtype d) {
  for (const auto& e : dtype_table)
    if (e.dtype == d) return e.name;
  return "?";
}

uint64_t safetensors_tensor::num_elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

result<uint64_t> read_safetensors_header_size(std::string_view bytes, size_t file_size, const std::string& file) {
  if (bytes.size() < 8 || file_size < 8) return malformed(file, "file is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > file_size - 8)
    return malformed(file, fmt::format("header length {} exceeds the file ({} bytes)", n, file_size));
  if (n > max_safetensors_header_size) return malformed(file, fmt::format("header length {} is too large", n));
  if (n < 2) return malformed(file, fmt::format("header length {} is too small", n));
  return n;
}

result<safetensors_header> parse_safetensors_header(std::string_view bytes, size_t file_size,
                                                    const std::string& file) {
  auto size = read_safetensors_header_size(bytes, file_size, file);
  if (!size) return size.err();
  safetensors_header h;
  h.header_size = size.value();
  h.data_offset = 8 + h.header_size;
  if (bytes.size() < h.data_offset)
    return malformed(file, fmt::format("header of {} bytes is truncated", h.header_size));
  const uint64_t data_size = file_size - h.data_offset;
  dom::parser parser;
  dom::element root;
  dom::object obj;
  if (parser.parse(bytes.data() + 8, h.header_size).get(root) != simdjson::SUCCESS ||
      root.get_object().get(obj) != simdjson::SUCCESS)
    return malformed(file, "header is not a JSON object");
  std::unordered_set<std::string_view> seen;
  for (dom::key_value_pair field : obj) {
    if (!seen.insert(field.key).second)
      return malformed(file, fmt::format("tensor '{}' is listed twice", std::string(field.key)));
    if (field.key == "__metadata__") {
      dom::object meta;
      if (field.value.get_object().get(meta) != simdjson::SUCCESS)
        return malformed(file, "__metadata__ is not an object");
      for (dom::key_value_pair m : meta) {
        std::string_view v;
        if (m.value.get_string().get(v) != simdjson::SUCCESS)
          return malformed(file, fmt::format("__metadata__ value '{}' is not a string", std::string(m.key)));
        h.metadata.emplace_back(std::string(m.key), std::string(v));
      }
      continue;
    }
    auto t = parse_entry(field.key, field.value, data_size, file);
    if (!t) return t.err();
    h.tensors.push_back(std::move(t).value());
  }
  // NOTE: tensors must not share bytes; empty tensors overlap nothing.
  std::vector<const safetensors_tensor*> order;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      return malformed(file, fmt::format("tensor '{}' overlaps tensor '{}'", order[i]->name, order[i - 1]->name));
  return h;
}

std::vector<std::string> safetensors_index::shard_files() const {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (const auto& [name, shard] : weight_map)
    if (seen.insert(shard).second) out.push_back(shard);
  return out;
}

result<safetensors_index> parse_safetensors_index(std::string_view json, const std::string& file) {
  dom::parser parser;
  dom::element root;
  dom::object map;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS)
    return malformed(file, "not valid JSON");
  if (root["weight_map"].get_object().get(map) != simdjson::SUCCESS)
    return malformed(file, "missing or non-object field 'weight_map'");
  safetensors_index index;
  std::unordered_set<std::string_view> seen;
  for (dom::key_value_pair entry : map) {
    std::string_view shard;
    if (entry.value.get_string().get(shard) != simdjson::SUCCESS || shard.empty() ||
        shard.find('/') != std::string_view::npos || shard == "..")
      return malformed(file, fmt::format("weight_map['{}'] must be a file name", std::string(entry.key)));
    if (!seen.insert(entry.key).second)
      return malformed(file, fmt::format("weight_map lists tensor '{}' twice", std::string(entry.key)));
    index.weight_map.emplace_back(std::string(entry.key), std::string(shard));
  }
  return index;
}

}  // namespace actorserve
