#include "gpu/model/weight_store.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "config/check.hpp"
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

error weight_store::missing(const std::string& name) const {
  std::string files;
  for (const auto& f : files_) files += (files.empty() ? "" : ", ") + f->path();
  return make_error(error_code::not_found, fmt::format("{}: missing tensor '{}'", files, name));
}

weight_store weight_store::dummy(uint64_t seed) {
  weight_store store;
  store.dummy_seed_ = seed;
  return store;
}

uint64_t weight_store::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, view] : tensors_) total += view.num_bytes();
  for (const auto& [name, view] : generated_) total += view.num_bytes();
  return total;
}

result<tensor_view> weight_store::get(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  if (dummy_seed_) {
    static const std::byte marker{};
    auto [it, inserted] = generated_.try_emplace(name);
    tensor_view& v = it->second;
    if (inserted) {
      v.data = &marker;
      v.dtype = st_dtype::bf16;
      v.shape = expected_shape;
      v.name = name;
      v.file = "--load-format dummy";
      v.dummy = dummy_fill{*dummy_seed_, dummy_tensor_id(name), 0, dummy_is_norm(name)};
    }
    if (v.shape != expected_shape)
      return make_error(error_code::invalid_argument,
                        fmt::format("--load-format dummy: tensor '{}' is bound as {} and as {}", name,
                                    shape_string(v.shape), shape_string(expected_shape)));
    return v;
  }
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return missing(name);
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

result<tensor_view> weight_store::get_fp8(const std::string& weight_name, const std::vector<int64_t>& shape,
                                          const std::string& scale_name, fp8_scale_kind kind, int64_t block_rows,
                                          int64_t block_cols) const {
  if (dummy_seed_)
    return make_error(error_code::unsupported,
                      fmt::format("--load-format dummy: tensor '{}' is FP8 in config.json's quantization_config, "
                                  "which dummy weights do not generate; remove quantization_config (and pass "
                                  "--quantization fp8 to quantize the dummy weights at load)",
                                  weight_name));
  auto it = tensors_.find(weight_name);
  if (it == tensors_.end()) return get(weight_name, shape);
  tensor_view v = it->second;
  if (v.dtype != st_dtype::f8_e4m3)
    return make_error(error_code::malformed_file,
                      fmt::format("{}: tensor '{}' has dtype {}, but quantization_config quantizes it (F8_E4M3 "
                                  "expected; its ignore list keeps a module unquantized)",
                                  v.file, weight_name, to_string(v.dtype)));
  if (v.shape != shape || shape.size() != 2)
    return make_error(error_code::malformed_file,
                      fmt::format("{}: tensor '{}' has shape {}, expected {}", v.file, weight_name,
                                  shape_string(v.shape), shape_string(shape)));
  auto s = tensors_.find(scale_name);
  if (s == tensors_.end())
    return make_error(error_code::not_found,
                      fmt::format("{}: F8_E4M3 tensor '{}' has no scale tensor '{}'", v.file, weight_name, scale_name));
  const tensor_view& sv = s->second;
  if (!is_float_weight_dtype(sv.dtype))
    return make_error(error_code::unsupported, fmt::format("{}: scale tensor '{}' has dtype {} (F32, BF16 or F16 expected)",
                                                           sv.file, scale_name, to_string(sv.dtype)));
  if (!fp8_scale_shape_ok(kind, shape[0], shape[1], block_rows, block_cols, sv.shape)) {
    std::string want = kind == fp8_scale_kind::per_tensor    ? "[] or [1] (per tensor)"
                       : kind == fp8_scale_kind::per_channel ? fmt::format("[{}, 1] (per output channel)", shape[0])
                                                             : fmt::format("[{}, {}] ({} x {} blocks)",
                                                                           (shape[0] + block_rows - 1) / block_rows,
                                                                           (shape[1] + block_cols - 1) / block_cols,
                                                                           block_rows, block_cols);
    return make_error(error_code::malformed_file, fmt::format("{}: scale tensor '{}' has shape {}, expected {}", sv.file,
                                                              scale_name, shape_string(sv.shape), want));
  }
  v.scale = fp8_scale_view{sv.data, sv.dtype, kind, block_rows, block_cols, scale_name, sv.file};
  // Checks every element and scale here, so that the dequantization at load cannot fail.
  std::vector<float> scratch(v.num_elements());
  if (status st = dequantize_e4m3(v.data, shape[0], shape[1], *v.scale, weight_name, scratch.data()); !st)
    return st.err();
  return v;
}

result<float> weight_store::get_scalar(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return missing(name);
  const tensor_view& v = it->second;
  if (!is_float_weight_dtype(v.dtype) || v.num_elements() != 1 || v.shape.size() > 1)
    return make_error(error_code::malformed_file,
                      fmt::format("{}: tensor '{}' must be one F32, BF16 or F16 number (dtype {}, shape {})", v.file,
                                  name, to_string(v.dtype), shape_string(v.shape)));
  float f = 0;
  upcast_to_f32(v.data, v.dtype, 1, &f);
  if (!std::isfinite(f) || f <= 0)
    return make_error(error_code::malformed_file, fmt::format("{}: tensor '{}' is {} (positive expected)", v.file, name, f));
  return f;
}

std::vector<float> weight_store::to_f32(const tensor_view& view) {
  std::vector<float> out(view.num_elements());
  if (view.dummy) {
    fill_dummy_f32(*view.dummy, out.size(), out.data());
    return out;
  }
  if (view.dtype == st_dtype::f8_e4m3) {
    AS_CHECK(view.scale && view.shape.size() == 2, "to_f32: an F8_E4M3 view is bound by get_fp8");
    const status st = dequantize_e4m3(view.data, view.shape[0], view.shape[1], *view.scale, view.name, out.data());
    AS_CHECK(st.ok(), "to_f32: get_fp8 checked the weights and scales");
    return out;
  }
  upcast_to_f32(view.data, view.dtype, out.size(), out.data());
  return out;
}

}  // namespace actorserve::gpu
