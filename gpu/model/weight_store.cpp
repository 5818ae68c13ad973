#include "gpu/model/weight_store.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "gpu/model/dtype_convert.hpp"

namespace actorserve::gpu {
namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

size_t tensor_view::num_elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

status weight_store::add_file(const std::string& path) {
  auto mapped = mapped_file::open(path);
  if (!mapped) return mapped.err();
  const mapped_file& f = *mapped.value();
  auto header = parse_safetensors_header(f.bytes(), f.size(), path);
  if (!header) return header.err();
  for (auto& t : header->tensors) {
    tensor_view v;
    v.data = f.data() + header->data_offset + t.begin;
    v.dtype = t.dtype;
    v.shape = t.shape;
    v.name = t.name;
    v.file = path;
    auto [it, inserted] = tensors_.emplace(t.name, std::move(v));
    if (!inserted)
      return make_error(error_code::malformed_file,
                        fmt::format("{}: tensor '{}' is also stored in {}", path, t.name, it->second.file));
  }
  files_.push_back(std::move(mapped).value());
  return {};
}

result<weight_store> weight_store::open_files(const std::vector<std::string>& paths) {
  weight_store store;
  for (const auto& p : paths)
    if (status st = store.add_file(p); !st) return st.err();
  return store;
}

result<weight_store> weight_store::open_dir(const std::string& model_dir) {
  const std::string single = model_dir + "/model.safetensors";
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  if (file_exists(single) || !file_exists(index_path)) return open_files({single});
  std::ifstream in(index_path, std::ios::binary);
  if (!in) return make_error(error_code::not_found, fmt::format("{}: cannot open file", index_path));
  std::ostringstream text;
  text << in.rdbuf();
  auto index = parse_safetensors_index(text.str(), index_path);
  if (!index) return index.err();
  std::vector<std::string> paths;
  for (const auto& shard : index->shard_files()) paths.push_back(model_dir + "/" + shard);
  auto store = open_files(paths);
  if (!store) return store.err();
  for (const auto& [name, shard] : index->weight_map) {
    auto it = store->tensors_.find(name);
    if (it == store->tensors_.end() || it->second.file != model_dir + "/" + shard)
      return make_error(error_code::malformed_file,
                        fmt::format("{}: tensor '{}' is not in shard {}", index_path, name, shard));
  }
  return store;
}

uint64_t weight_store::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, view] : tensors_) total += view.num_bytes();
  return total;
}

result<tensor_view> weight_store::get(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string files;
    for (const auto& f : files_) files += (files.empty() ? "" : ", ") + f->path();
    return make_error(error_code::not_found, fmt::format("{}: missing tensor '{}'", files, name));
  }
  const tensor_view& v = it->second;
  if (v.shape != expected_shape)
    return make_error(error_code::malformed_file,
                      fmt::format("{}: tensor '{}' has shape {}, expected {}", v.file, name, shape_string(v.shape),
                                  shape_string(expected_shape)));
  if (!is_float_weight_dtype(v.dtype))
    return make_error(error_code::unsupported,
                      fmt::format("{}: tensor '{}' has dtype {} (F32, F16 or BF16 expected)", v.file, name,
                                  to_string(v.dtype)));
  return v;
}

std::vector<float> weight_store::to_f32(const tensor_view& view) {
  std::vector<float> out(view.num_elements());
  upcast_to_f32(view.data, view.dtype, out.size(), out.data());
  return out;
}

}  // namespace actorserve::gpu
