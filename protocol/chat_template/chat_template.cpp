#include "protocol/chat_template/chat_template.hpp"

#include <ctime>
#include <exception>
#include <new>

#include "protocol/chat_template/parser.hpp"
#include "protocol/chat_template/renderer.hpp"
#include "protocol/chat_template/template_error.hpp"

namespace actorserve::protocol {

result<chat_template> chat_template::parse(std::string_view source) {
  try {
    return chat_template(jinja::parse_template(source));
  } catch (const jinja::template_error& e) {
    return make_error(e.code, e.message);
  } catch (const std::bad_alloc&) {
    return make_error(error_code::too_large, "chat template: out of memory while parsing");
  }
}

result<std::string> chat_template::render(const chat_value& context) const {
  return render(context, chat_template_limits{});
}

result<std::string> chat_template::render(const chat_value& context, const chat_template_limits& limits) const {
  if (!ast_) return make_error(error_code::internal, "chat template: rendering an unparsed template");
  if (!context.is_object() && !context.is_null()) {
    return make_error(error_code::invalid_argument, "chat template: the render context must be an object");
  }
  jinja::limits lim;
  lim.max_output_bytes = limits.max_output_bytes;
  lim.max_items = limits.max_items;
  lim.max_steps = limits.max_steps;
  lim.max_call_depth = limits.max_call_depth;
  lim.now = limits.fixed_time ? *limits.fixed_time : static_cast<std::int64_t>(std::time(nullptr));
  try {
    jinja::value_map vars;
    if (context.is_object()) {
      for (const auto& [k, v] : context.as_object()) vars.set(k, jinja::from_chat(v));
    }
    jinja::renderer r(lim);
    return r.render(*ast_, std::move(vars));
  } catch (const jinja::template_error& e) {
    return make_error(e.code, e.message);
  } catch (const std::bad_alloc&) {
    return make_error(error_code::too_large, "chat template: out of memory while rendering");
  }
}

result<std::string> apply_chat_template(const chat_template& tpl, const chat_template_inputs& inputs) {
  chat_value::object vars;
  // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=..., **special_tokens)
  vars.emplace_back("messages", chat_value(inputs.messages));
  vars.emplace_back("tools", inputs.tools);
  vars.emplace_back("documents", inputs.documents);
  vars.emplace_back("add_generation_prompt", chat_value(inputs.add_generation_prompt));
  if (inputs.bos_token) vars.emplace_back("bos_token", chat_value(*inputs.bos_token));
  if (inputs.eos_token) vars.emplace_back("eos_token", chat_value(*inputs.eos_token));
  chat_value context(std::move(vars));
  if (inputs.extra.is_object()) {
    for (const auto& [k, v] : inputs.extra.as_object()) context = context.with(k, v);
  }
  chat_template_limits limits;
  limits.fixed_time = inputs.fixed_time;
  return tpl.render(context, limits);
}

result<std::string> apply_chat_template(const chat_template& tpl, const std::vector<chat_value>& messages,
                                        bool add_generation_prompt, std::string_view bos_token,
                                        std::string_view eos_token) {
  chat_template_inputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  if (!bos_token.empty()) in.bos_token = std::string(bos_token);
  if (!eos_token.empty()) in.eos_token = std::string(eos_token);
  return apply_chat_template(tpl, in);
}

}  // namespace actorserve::protocol
