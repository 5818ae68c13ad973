#pragma once
/// The tensors of a model directory's safetensors file(s), memory-mapped. Lookup by name with a
/// shape check; raw host views (pointer + dtype + shape, as stored) for a device uploader, and
/// exact fp32 copies for the CPU executor. A dummy store (`--load-format dummy`) opens no file:
/// it hands out a bf16 view of any requested name and shape whose elements are generated.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/error.hpp"
#include "config/safetensors_header.hpp"
#include "gpu/model/dummy_weights.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/mapped_file.hpp"

namespace actorserve::gpu {

/// A non-owning view of one stored tensor (valid while its weight_store lives).
struct tensor_view {
  const std::byte* data = nullptr;   ///< unaligned, row-major, `dtype` elements
  st_dtype dtype = st_dtype::f32;
  std::vector<int64_t> shape;
  std::string name;
  std::string file;                  ///< the safetensors file it lives in
  std::optional<fp8_scale_view> scale;   ///< F8_E4M3 weights: how to dequantize them
  /// A dummy store's tensor: generated, never read (`data` is a non-null marker, not memory).
  std::optional<dummy_fill> dummy;

  size_t num_elements() const;
  size_t num_bytes() const { return num_elements() * dtype_size(dtype); }
};

class weight_store {
 public:
  /// Opens `model_dir`/model.safetensors, or the shards listed by model.safetensors.index.json.
  static result<weight_store> open_dir(const std::string& model_dir);
  /// Opens the given safetensors files; a tensor name present in two files is an error.
  static result<weight_store> open_files(const std::vector<std::string>& paths);
  /// A store that reads nothing: get() returns a generated bf16 tensor of the expected shape.
  static weight_store dummy(uint64_t seed);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  size_t size() const { return tensors_.size(); }
  bool is_dummy() const { return dummy_seed_.has_value(); }
  /// Bytes of all tensors as stored (what a full load reads); a dummy store's bound tensors.
  uint64_t total_bytes() const;
  /// The tensor, checked against `expected_shape`; missing or mis-shaped -> error naming the
  /// file and tensor. F32/F16/BF16 only.
  result<tensor_view> get(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  /// A stored F8_E4M3 weight of `shape` ([out][in]) with its scale tensor `scale_name` (e.g.
  /// "...weight_scale", "...weight_scale_inv"), which must have the shape `kind` needs, dtype F32,
  /// BF16 or F16 and finite non-negative values; a NaN weight element is an error too.
  result<tensor_view> get_fp8(const std::string& weight_name, const std::vector<int64_t>& shape,
                              const std::string& scale_name, fp8_scale_kind kind, int64_t block_rows,
                              int64_t block_cols) const;
  /// A stored scalar (shape [] or [1]) of a float dtype, e.g. an input_scale or k_scale.
  result<float> get_scalar(const std::string& name) const;
  /// An exact fp32 copy of a view; F8_E4M3 views (bound by get_fp8, which checked them) are
  /// dequantized with their scale.
  static std::vector<float> to_f32(const tensor_view& view);

 private:
  status add_file(const std::string& path);
  /// "FILES: missing tensor 'name'".
  error missing(const std::string& name) const;
  std::vector<std::unique_ptr<mapped_file>> files_;
  std::unordered_map<std::string, tensor_view> tensors_;
  std::optional<uint64_t> dummy_seed_;
  /// A dummy store's tensors handed out so far; get() stays const, as a lookup.
  mutable std::unordered_map<std::string, tensor_view> generated_;
};

}  // namespace actorserve::gpu
