#include "server/context.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>

#include "config/log.hpp"
#include "protocol/openai/parse.hpp"
#include "server/prompt_builder.hpp"

namespace actorserve::server {

server_context::server_context(actors::engine& e, const engine_config& c)
    : engine(e), config(c), model_name(e.model_name()), max_model_len(e.max_model_len()), stats(max_model_len) {
  if (!c.model.served_model_name.empty()) model_name = c.model.served_model_name;
  created = std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::system_clock::now().time_since_epoch()).count();
  nonce_ = std::random_device{}() & 0xffffffu;
  if (c.model.generation_config == generation_config_source::auto_detect && !c.model.model_dir.empty()) {
    auto model = load_model_config(c.model.model_dir);
    if (model) sampling_defaults = model->sampling_defaults;
    else log::warn("--generation-config auto: {}; requests get OpenAI's defaults", model.err().message);
    sampling_params p;
    protocol::openai::apply_generation_defaults(p, {}, sampling_defaults);
    if (auto st = validate(p); !st) {
      log::warn("generation_config.json: {}; requests get OpenAI's defaults", st.err().message);
      sampling_defaults = {};
    }
  }
}

server_context::~server_context() = default;

std::string server_context::new_request_id(std::string_view prefix) {
  return fmt::format("{}-{:06x}{:010x}", prefix, nonce_, next_id_.fetch_add(1, std::memory_order_relaxed));
}

bool authorized(std::string_view header_value, std::string_view api_key) {
  // RFC 7235: the scheme is case-insensitive and one or more spaces separate it from the token.
  constexpr std::string_view scheme = "bearer";
  bool has_scheme = header_value.size() > scheme.size() && header_value[scheme.size()] == ' ';
  for (size_t i = 0; has_scheme && i < scheme.size(); ++i)
    has_scheme = std::tolower(static_cast<unsigned char>(header_value[i])) == scheme[i];
  std::string_view given;
  if (has_scheme) {
    given = header_value.substr(scheme.size());
    given.remove_prefix(std::min(given.find_first_not_of(' '), given.size()));
  }
  // Compare over the key's full length whatever the input, so timing reveals neither prefix nor length.
  unsigned char diff = given.size() == api_key.size() ? 0 : 1;
  for (size_t i = 0; i < api_key.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(api_key[i]));
  }
  return has_scheme && diff == 0;
}

}  // namespace actorserve::server
