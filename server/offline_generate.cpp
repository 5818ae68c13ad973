// `actorserve generate`: reads prompts (--prompt, --prompt-ids, --requests JSON lines), submits
// them all to the engine at once and prints the results in input order.
#include "server/offline_generate.hpp"

#include <simdjson.h>

#include <fmt/format.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>

#include "actors/engine.hpp"
#include "protocol/json/writer.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::server {

using actors::delta;
using actors::delta_sink;
using actors::engine;
using actors::finish_reason;
using actors::generation_request;
using actors::logprob_entry;
using actors::usage_counts;

namespace {

struct choice_out {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<finish_reason> finish;
  std::optional<error> failure;
  std::vector<logprob_entry> logprobs;
};

struct request_out {
  std::vector<int32_t> prompt;
  sampling_params params;
  std::optional<error> failure;
  std::map<int32_t, choice_out> choices;
  usage_counts usage;
};

error line_error(const std::string& file, size_t line, const std::string& why) {
  return make_error(error_code::invalid_argument, fmt::format("--requests {}:{}: {}", file, line, why));
}

/// Reads one JSON line of --requests into `out` (prompt text is left to the caller via `text`).
status parse_request_line(std::string_view line, const std::string& file, size_t lineno, request_out& out,
                          std::optional<std::string>& text) {
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(line.data(), line.size()).get(obj)) return line_error(file, lineno, "not a JSON object");
  for (auto field : obj) {
    const std::string_view key = field.key;
    const auto v = field.value;
    auto bad = [&](const char* what) { return line_error(file, lineno, fmt::format("{}: {}", key, what)); };
    if (key == "prompt") {
      std::string_view s;
      if (v.get(s)) return bad("must be a string");
      text = std::string(s);
    } else if (key == "prompt_ids") {
      simdjson::dom::array arr;
      if (v.get(arr)) return bad("must be an array of token ids");
      for (auto x : arr) {
        int64_t id = 0;
        if (x.get(id) || id < 0 || id > INT32_MAX) return bad("must be an array of token ids");
        out.prompt.push_back(static_cast<int32_t>(id));
      }
    } else if (key == "max_tokens" || key == "top_k" || key == "logprobs") {
      int64_t n = 0;
      if (v.get(n) || n < -1 || n > INT32_MAX) return bad("must be an integer");
      (key == "max_tokens" ? out.params.max_tokens : key == "top_k" ? out.params.top_k : out.params.num_logprobs) =
          static_cast<int32_t>(n);
    } else if (key == "temperature" || key == "top_p") {
      double d = 0;
      if (v.get(d)) return bad("must be a number");
      (key == "temperature" ? out.params.temperature : out.params.top_p) = static_cast<float>(d);
    } else if (key == "seed") {
      uint64_t s = 0;
      if (v.get(s)) return bad("must be a non-negative integer");
      out.params.seed = s;
    } else if (key == "ignore_eos") {
      bool b = false;
      if (v.get(b)) return bad("must be a boolean");
      out.params.ignore_eos = b;
    } else {
      return bad("unknown field");
    }
  }
  if (!text && out.prompt.empty()) return line_error(file, lineno, "give \"prompt\" or \"prompt_ids\"");
  if (auto st = validate(out.params); !st) return line_error(file, lineno, st.err().message);
  return {};
}

result<std::vector<request_out>> collect_requests(const command_line& cl, const protocol::tokenizer& tok) {
  const auto& g = cl.generate;
  std::vector<request_out> reqs;
  for (const auto& p : g.prompts) reqs.push_back({tok.encode(p, true), g.sampling, {}, {}, {}});
  for (const auto& ids : g.prompt_ids) reqs.push_back({ids, g.sampling, {}, {}, {}});
  if (!g.requests_file.empty()) {
    std::ifstream in(g.requests_file);
    if (!in) return make_error(error_code::not_found, fmt::format("--requests {}: cannot open", g.requests_file));
    std::string line;
    for (size_t lineno = 1; std::getline(in, line); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      request_out r{{}, g.sampling, {}, {}, {}};
      std::optional<std::string> text;
      if (auto st = parse_request_line(line, g.requests_file, lineno, r, text); !st) return st.err();
      if (text) r.prompt = tok.encode(*text, true);
      reqs.push_back(std::move(r));
    }
  }
  return reqs;
}

void write_choice(protocol::json::writer& w, const choice_out& c, bool with_logprobs) {
  w.key("token_ids").int_array(c.tokens);
  w.key("text").str(c.text);
  w.key("finish_reason");
  if (c.finish) {
    w.str(to_string(*c.finish));
  } else {
    w.null();
  }
  if (c.failure) w.key("error").str(c.failure->message);
  if (!with_logprobs) return;
  w.key("logprobs").begin_array();
  for (const auto& e : c.logprobs) {
    w.begin_object().key("token_id").num(e.token_id).key("token").str(e.token).key("logprob").real(e.logprob);
    w.key("top_logprobs").begin_array();
    for (const auto& [id, lp] : e.top) w.begin_object().key("token_id").num(id).key("logprob").real(lp).end_object();
    w.end_array().end_object();
  }
  w.end_array();
}

std::string to_json(const std::vector<request_out>& reqs) {
  std::string out;
  out += "[\n";
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    protocol::json::writer w(out);
    w.begin_object().key("index").num(static_cast<int64_t>(i));
    w.key("prompt_tokens").num(static_cast<int64_t>(r.prompt.size()));
    if (r.failure) {
      w.key("error").str(r.failure->message);
    } else {
      const bool lp = r.params.num_logprobs >= 0;
      static const choice_out none;
      auto it = r.choices.find(0);
      write_choice(w, it == r.choices.end() ? none : it->second, lp);
      if (r.choices.size() > 1) {
        w.key("choices").begin_array();
        for (const auto& [index, c] : r.choices) {
          w.begin_object().key("index").num(index);
          write_choice(w, c, lp);
          w.end_object();
        }
        w.end_array();
      }
      w.key("usage").begin_object().key("prompt_tokens").num(r.usage.prompt_tokens);
      w.key("completion_tokens").num(r.usage.completion_tokens);
      w.key("cached_prompt_tokens").num(r.usage.cached_prompt_tokens);
      w.key("num_preemptions").num(r.usage.num_preemptions).end_object();
    }
    w.end_object();
    out += i + 1 < reqs.size() ? ",\n" : "\n";
  }
  out += "]\n";
  return out;
}

}  // namespace

result<generate_output> generate_json(const command_line& cl) {
  auto started = engine::start(cl.engine);
  if (!started) return started.err();
  auto& eng = *started.value();
  auto reqs = collect_requests(cl, eng.tokenizer());
  if (!reqs) return reqs.err();
  auto& all = reqs.value();

  std::mutex mu;
  std::condition_variable cv;
  size_t open = all.size();
  std::vector<std::pair<generation_request, delta_sink>> batch;
  batch.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    auto& r = all[i];
    generation_request g;
    g.request_id = fmt::format("generate-{}", i);
    g.prompt_ids = r.prompt;
    g.params = r.params;
    batch.emplace_back(std::move(g), [&mu, &cv, &open, &r](delta d) {
      std::lock_guard<std::mutex> l(mu);
      auto& c = r.choices[d.index];
      c.tokens.insert(c.tokens.end(), d.token_ids.begin(), d.token_ids.end());
      c.text += d.text;
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish) c.finish = d.finish;
      if (d.failure) c.failure = d.failure;
      if (d.usage) {
        r.usage = *d.usage;
        --open;
        cv.notify_all();
      }
      return true;
    });
  }
  // One arrival: the engine's first step carries as many prompts as its limits allow.
  const auto admitted = eng.submit_batch(std::move(batch));
  for (size_t i = 0; i < admitted.size(); ++i) {
    if (admitted[i]) continue;
    std::lock_guard<std::mutex> l(mu);
    all[i].failure = admitted[i].err();
    --open;
  }
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open == 0; });
  }
  eng.shutdown(std::chrono::milliseconds(0));
  generate_output out;
  out.json = to_json(all);
  for (const auto& r : all) {
    bool ok = !r.failure;
    for (const auto& [index, c] : r.choices) ok = ok && !c.failure;
    out.all_ok = out.all_ok && ok;
  }
  return out;
}

int run_generate(const command_line& cl) {
  auto json = generate_json(cl);
  if (!json) {
    std::fprintf(stderr, "actorserve generate: %s\n", json.err().message.c_str());
    return 1;
  }
  std::fwrite(json->json.data(), 1, json->json.size(), stdout);
  std::fflush(stdout);
  return json->all_ok ? 0 : 1;
}

}  // namespace actorserve::server
