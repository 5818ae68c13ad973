// --kv-cache-memory-bytes on the CPU executor, made through the executor factory as the engine
// makes it: the pool is floor(bytes / a shard's block) blocks, the bytes are each shard's (as
// vLLM's are each GPU's), --num-gpu-blocks-override wins, and a size that holds no block is
// refused naming the flag.
#include <gtest/gtest.h>

#include "config/model_config.hpp"
#include "gpu/executor_factory.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

constexpr int64_t block_size = 16;

engine_config cpu_config(int64_t kv_cache_memory_bytes, int64_t tp = 1) {
  engine_config cfg;
  cfg.model.model_dir = model_dir("llama-tiny");
  cfg.executor.device = device_kind::cpu;
  cfg.executor.cpu_threads = 2;
  cfg.executor.tensor_parallel_size = tp;
  cfg.cache.block_size = block_size;
  cfg.cache.kv_cache_memory_bytes = kv_cache_memory_bytes;
  return cfg;
}

/// Bytes of one whole-model KV block of llama-tiny from its config.json: fp32 K and V of every
/// layer and KV head.
int64_t whole_block_bytes() {
  auto c = load_model_config(model_dir("llama-tiny"));
  EXPECT_TRUE(c.ok());
  return 2 * c->num_layers * block_size * c->num_kv_heads * c->head_dim * int64_t(sizeof(float));
}

TEST(kv_cache_memory_bytes, sizes_the_pool_in_whole_blocks) {
  const int64_t block = whole_block_bytes();
  for (int64_t blocks : {1, 5, 300}) {
    for (int64_t extra : {int64_t{0}, block - 1}) {
      auto ex = gpu::make_executor(cpu_config(blocks * block + extra));
      ASSERT_TRUE(ex.ok()) << ex.err().message;
      EXPECT_EQ(ex.value()->info().num_blocks, blocks) << blocks << " blocks + " << extra << " bytes";
      EXPECT_EQ(ex.value()->info().host_kv_cache_bytes, blocks * block);
    }
  }
}

TEST(kv_cache_memory_bytes, are_each_shards) {
  // llama-tiny has 2 KV heads: over 2 shards each holds one (half a block's bytes), over 4 each
  // holds a copy of one, so the same bytes per shard hold twice the blocks.
  const int64_t block = whole_block_bytes(), bytes = 40 * block;
  auto one = gpu::make_executor(cpu_config(bytes, 1));
  auto two = gpu::make_executor(cpu_config(bytes, 2));
  auto four = gpu::make_executor(cpu_config(bytes, 4));
  ASSERT_TRUE(one.ok() && two.ok() && four.ok());
  EXPECT_EQ(one.value()->info().num_blocks, 40);
  EXPECT_EQ(two.value()->info().num_blocks, 80);
  EXPECT_EQ(four.value()->info().num_blocks, 80);
  EXPECT_EQ(two.value()->info().host_kv_cache_bytes, 2 * bytes) << "two shards, each its bytes";
  EXPECT_EQ(four.value()->info().host_kv_cache_bytes, 4 * bytes);
}

TEST(kv_cache_memory_bytes, yields_to_the_block_override) {
  auto cfg = cpu_config(100 * whole_block_bytes());
  cfg.cache.num_gpu_blocks_override = 7;
  auto ex = gpu::make_executor(cfg);
  ASSERT_TRUE(ex.ok()) << ex.err().message;
  EXPECT_EQ(ex.value()->info().num_blocks, 7);
}

TEST(kv_cache_memory_bytes, that_hold_no_block_are_refused_naming_the_flag) {
  auto ex = gpu::make_executor(cpu_config(whole_block_bytes() - 1));
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.err().code, error_code::out_of_memory);
  EXPECT_NE(ex.err().message.find("--kv-cache-memory-bytes"), std::string::npos) << ex.err().message;
}

}  // namespace
}  // namespace actorserve::testing
