// The safetensors header (8-byte length + JSON) and model.safetensors.index.json: any bytes,
// taken as the start of a file of several sizes, either fail or give a header whose tensors lie
// inside the data section, do not overlap and span exactly shape x dtype bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/safetensors_header.hpp"
#include "fuzz_util.hpp"

using actorserve::fuzz::as_text;

namespace {

void check_header(const actorserve::safetensors_header& h, size_t bytes_size, size_t file_size) {
  FUZZ_CHECK(h.data_offset == 8 + h.header_size, "data_offset %llu != 8 + header_size %llu",
             static_cast<unsigned long long>(h.data_offset), static_cast<unsigned long long>(h.header_size));
  FUZZ_CHECK(h.data_offset <= bytes_size, "header extends past the bytes given");
  const uint64_t data_size = file_size - h.data_offset;
  std::vector<const actorserve::safetensors_tensor*> order;
  for (const auto& t : h.tensors) {
    FUZZ_CHECK(t.begin <= t.end && t.end <= data_size, "tensor '%s' [%llu, %llu) outside %llu data bytes",
               t.name.c_str(), static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(t.end),
               static_cast<unsigned long long>(data_size));
    FUZZ_CHECK(t.shape.size() <= 16, "tensor '%s' has %zu dimensions", t.name.c_str(), t.shape.size());
    unsigned __int128 bytes = actorserve::dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, "tensor '%s' has a negative dimension", t.name.c_str());
      bytes *= static_cast<uint64_t>(d);
      if (bytes > (static_cast<unsigned __int128>(1) << 64)) bytes = static_cast<unsigned __int128>(1) << 64;
    }
    FUZZ_CHECK(bytes == t.num_bytes(), "tensor '%s' spans %llu bytes, shape x dtype differs", t.name.c_str(),
               static_cast<unsigned long long>(t.num_bytes()));
    if (t.end > t.begin) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    FUZZ_CHECK(order[i]->begin >= order[i - 1]->end, "tensors '%s' and '%s' overlap", order[i - 1]->name.c_str(),
               order[i]->name.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes = as_text(data, size);
  const std::string name = "fuzz.safetensors";
  // The input as the whole file, and as the first bytes of a larger file (the tail byte picks how
  // much larger), so offsets past the input can be valid too.
  size_t extra = size ? (static_cast<size_t>(data[size - 1]) << 12) : 0;
  for (size_t file_size : {size, size + extra}) {
    auto len = actorserve::read_safetensors_header_size(bytes, file_size, name);
    auto h = actorserve::parse_safetensors_header(bytes, file_size, name);
    if (h) {
      FUZZ_CHECK(len && *len == h->header_size, "header parsed but its length prefix did not");
      check_header(*h, size, file_size);
    }
  }
  auto index = actorserve::parse_safetensors_index(bytes, "model.safetensors.index.json");
  if (index) {
    for (const auto& f : index->shard_files()) FUZZ_CHECK(f.find('/') == std::string::npos, "shard '%s'", f.c_str());
  }
  return 0;
}
