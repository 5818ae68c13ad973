// The wire types survive CAF's binary serialization (what BASP sends between processes).
#include <gtest/gtest.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/wire.hpp"

namespace actorserve::actors {
namespace {

template <class T>
T round_trip(T x) {
  caf::actor_system_config cfg;
  register_wire_types(cfg);
  caf::actor_system sys(cfg);
  std::vector<char> buf;
  caf::binary_serializer out(sys, buf);
  EXPECT_FALSE(out(x));
  T back;
  caf::binary_deserializer in(sys, buf);
  EXPECT_FALSE(in(back));
  return back;
}

TEST(wire, a_resumed_request_keeps_tokens_params_and_seed) {
  wire_request r;
  r.key = 42;
  r.tokens = {5, 6, 7, 8};
  r.num_generated = 2;
  r.index = 1;
  r.params.temperature = 0.7f;
  r.params.top_p = 0.9f;
  r.params.top_k = 40;
  r.params.max_tokens = 99;
  r.params.min_tokens = 3;
  r.params.stop_token_ids = {2, 3};
  r.params.logit_bias = {{17, -5.0f}};
  r.params.num_logprobs = 2;
  r.params.stop = {"never crosses"};
  r.seed = 0xfeedULL;
  r.priority = -1;
  const auto b = round_trip(r);
  EXPECT_EQ(b.key, 42u);
  EXPECT_EQ(b.tokens, r.tokens);
  EXPECT_EQ(b.num_generated, 2);
  EXPECT_EQ(b.index, 1);
  EXPECT_FLOAT_EQ(b.params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(b.params.top_p, 0.9f);
  EXPECT_EQ(b.params.top_k, 40);
  EXPECT_EQ(b.params.max_tokens, 99);
  EXPECT_EQ(b.params.min_tokens, 3);
  EXPECT_EQ(b.params.stop_token_ids, r.params.stop_token_ids);
  EXPECT_EQ(b.params.logit_bias, r.params.logit_bias);
  EXPECT_EQ(b.params.num_logprobs, 2);
  EXPECT_TRUE(b.params.stop.empty()) << "stop strings stay on the front end";
  EXPECT_EQ(b.seed, 0xfeedULL);
  EXPECT_EQ(b.priority, -1);
}

TEST(wire, outputs_keep_ids_logprobs_and_finish_reasons) {
  output_batch o;
  seq_output s;
  s.group_id = 9;
  s.index = 1;
  s.has_token = true;
  s.token.token_id = 77;
  s.token.logprob = -0.25f;
  s.token.top_logprobs = {{77, -0.25f}, {12, -1.5f}};
  s.finish = seq_finish::length;
  s.num_cached = 32;
  s.scheduled_us = 120;
  s.first_token_us = 4500;
  s.last_token_us = 9000;
  o.outputs.push_back(s);
  const auto b = round_trip(o);
  ASSERT_EQ(b.outputs.size(), 1u);
  const auto& t = b.outputs[0];
  EXPECT_EQ(t.index, 1);
  EXPECT_TRUE(t.has_token);
  EXPECT_EQ(t.token.token_id, 77);
  EXPECT_FLOAT_EQ(t.token.logprob, -0.25f);
  ASSERT_EQ(t.token.top_logprobs.size(), 2u);
  EXPECT_EQ(t.token.top_logprobs[1].token_id, 12);
  EXPECT_EQ(t.finish, seq_finish::length);
  EXPECT_EQ(t.num_cached, 32);
  EXPECT_EQ(t.scheduled_us, 120);
  EXPECT_EQ(t.first_token_us, 4500);
  EXPECT_EQ(t.last_token_us, 9000);
}

TEST(wire, engine_info_and_stats_cross) {
  engine_info i{wire_version, "llama-tiny", 1000, 16, 2048, true};
  const auto bi = round_trip(i);
  EXPECT_EQ(bi.version, wire_version);
  EXPECT_EQ(bi.model_name, "llama-tiny");
  EXPECT_EQ(bi.block_size, 16);
  EXPECT_EQ(bi.max_model_len, 2048);
  EXPECT_TRUE(bi.logit_bias);
  engine_stats s;
  s.num_running = 3;
  s.kv_blocks_free = 100;
  s.prefix_cache_hits = 640;
  s.healthy = true;
  s.decode_idle_us = 5;
  s.untimed_busy_us = 6;
  s.iteration_tokens[0] = 7;
  s.iteration_tokens.back() = 2;
  s.moe_layers = {1, 3};
  s.num_experts = 2;
  s.moe_expert_tokens = {4, 0, 1, 3};
  const auto bs = round_trip(s);
  EXPECT_EQ(bs.num_running, 3);
  EXPECT_EQ(bs.kv_blocks_free, 100);
  EXPECT_EQ(bs.prefix_cache_hits, 640);
  EXPECT_TRUE(bs.healthy);
  EXPECT_EQ(bs.decode_idle_us, 5);
  EXPECT_EQ(bs.untimed_busy_us, 6);
  EXPECT_EQ(bs.iteration_tokens, s.iteration_tokens);
  EXPECT_EQ(bs.moe_layers, s.moe_layers);
  EXPECT_EQ(bs.num_experts, 2);
  EXPECT_EQ(bs.moe_expert_tokens, s.moe_expert_tokens);
}

}  // namespace
}  // namespace actorserve::actors
