#pragma once
/// The tensors of a model directory's safetensors file(s), memory-mapped. Lookup by name with a
/// shape check; raw host views (pointer + dtype + shape, as stored) for a device uploader, and
/// exact fp32 copies for the CPU executor.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/error.hpp"
#include "config/safetensors_header.hpp"
#include "gpu/model/mapped_file.hpp"

namespace actorserve::gpu {

/// A non-owning view of one stored tensor (valid while its weight_store lives).
struct tensor_view {
  const std::byte* data = nullptr;   ///< unaligned, row-major, `dtype` elements
  st_dtype dtype = st_dtype::f32;
  std::vector<int64_t> shape;
  std::string name;
  std::string file;                  ///< the safetensors file it lives in

  size_t num_elements() const;
  size_t num_bytes() const { return num_elements() * dtype_size(dtype); }
};

class weight_store {
 public:
  /// Opens `model_dir`/model.safetensors, or the shards listed by model.safetensors.index.json.
  static result<weight_store> open_dir(const std::string& model_dir);
  /// Opens the given safetensors files; a tensor name present in two files is an error.
  static result<weight_store> open_files(const std::vector<std::string>& paths);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  size_t size() const { return tensors_.size(); }
  /// Bytes of all tensors as stored (what a full load reads).
  uint64_t total_bytes() const;
  /// The tensor, checked against `expected_shape`; missing or mis-shaped -> error naming the
  /// file and tensor. F32/F16/BF16 only.
  result<tensor_view> get(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  /// An exact fp32 copy of a view.
  static std::vector<float> to_f32(const tensor_view& view);

 private:
  status add_file(const std::string& path);
  std::vector<std::unique_ptr<mapped_file>> files_;
  std::unordered_map<std::string, tensor_view> tensors_;
};

}  // namespace actorserve::gpu
