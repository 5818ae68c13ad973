// The KV block manager actor: a thin shell around block_pool.
#include "actors/actor_spawn.hpp"
#include "actors/block_pool.hpp"

namespace actorserve::actors {

namespace {

struct kv_block_manager_state {
  std::unique_ptr<block_pool> pool;
  static inline const char* name = "kv_block_manager";
};

using kv_block_manager_self = kv_block_manager_actor::stateful_pointer<kv_block_manager_state>;

kv_block_manager_actor::behavior_type kv_block_manager(kv_block_manager_self self, int32_t num_blocks,
                                                       int32_t block_size, bool enable_prefix_caching,
                                                       std::shared_ptr<stats_board> stats) {
  auto fresh_pool = [self, block_size, enable_prefix_caching, stats](int32_t n) {
    self->state.pool = std::make_unique<block_pool>(n, block_size, enable_prefix_caching);
    stats->publish(self->state.pool->counts());
  };
  fresh_pool(num_blocks);
  return {
      // After an executor restart the device's KV contents are gone: every block is free and
      // the prefix cache is empty.
      [fresh_pool](reset_atom, int32_t n) { fresh_pool(n); },
      [self, stats](reserve_atom, const kv_reservation& r) -> kv_answer {
        kv_answer a = self->state.pool->reserve(r);
        stats->publish(a.counts);
        return a;
      },
  };
}

}  // namespace

kv_block_manager_actor spawn_kv_block_manager(caf::actor_system& sys, int32_t num_blocks, int32_t block_size,
                                              bool enable_prefix_caching, std::shared_ptr<stats_board> stats) {
  return sys.spawn(kv_block_manager, num_blocks, block_size, enable_prefix_caching, std::move(stats));
}

}  // namespace actorserve::actors
