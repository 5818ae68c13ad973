#pragma once
/// Writes random bf16 safetensors shards fast: the data is split into large chunks that worker
/// threads fill (a 64K-entry table of normal quantiles indexed by splitmix64 bits) and write with
/// pwrite. The bytes depend only on the seed, never on the thread count.
#include <cstdint>
#include <string>
#include <vector>

#include "config/error.hpp"

namespace actorserve::bench {

/// How one tensor is filled.
enum class fill_kind { normal, ones };

struct tensor_spec {
  std::string name;
  std::vector<int64_t> shape;
  fill_kind fill = fill_kind::normal;
  int64_t num_bytes() const;             ///< bf16: 2 bytes per element
};

struct shard_plan {
  std::string file_name;                 ///< e.g. model-00001-of-00004.safetensors
  std::vector<tensor_spec> tensors;
};

/// Groups tensors (in order) into shards of at most `shard_bytes` (a larger tensor gets its own).
std::vector<shard_plan> plan_shards(const std::vector<tensor_spec>& tensors, double shard_bytes);

/// The model.safetensors.index.json text for `shards`.
std::string index_json(const std::vector<shard_plan>& shards);

/// Writes every shard into `dir`; returns the bytes written. `std` scales the normal fill.
result<int64_t> write_shards(const std::string& dir, const std::vector<shard_plan>& shards, uint64_t seed,
                             double std, int32_t threads);

}  // namespace actorserve::bench
