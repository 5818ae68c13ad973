// Chat message lists and tool definitions: read into native types, with tool calls and tools
// kept as chat_values in the shape Hugging Face templates read.
#include <fmt/format.h>

#include "protocol/openai/common_fields.hpp"

namespace actorserve::protocol::openai::detail_common {
namespace {

using namespace actorserve::protocol::detail;

status read_content(element v, std::string_view field, std::string& out) {
  out.clear();
  if (is_null(v)) return {};
  if (v.type() == element_type::STRING) {
    out.assign(std::string_view(v));
    return {};
  }
  simdjson::dom::array parts;
  if (v.get(parts)) return field_error(field, "expected a string or an array of content parts");
  size_t j = 0;
  for (element part : parts) {
    const std::string where = fmt::format("{}[{}]", field, j++);
    simdjson::dom::object obj;
    if (part.get(obj)) return field_error(where, "expected a content part object");
    std::string_view type, text;
    if (obj["type"].get(type)) return field_error(where + ".type", "expected a string");
    if (type != "text")
      return make_error(error_code::unsupported,
                        fmt::format("{}.type: content part type '{}' is not supported", where, type));
    if (obj["text"].get(text)) return field_error(where + ".text", "expected a string");
    out.append(text);
  }
  return {};
}

/// One assistant tool call as templates read it: {id, type, function: {name, arguments}}, with
/// `arguments` decoded from its JSON string into a value, as vLLM hands it to templates.
result<chat_value> read_tool_call(element v, const std::string& where) {
  simdjson::dom::object obj, fn;
  if (v.get(obj)) return field_error(where, "expected a tool call object");
  std::string_view id, type = "function", name, arguments;
  if (obj["id"].get(id)) return field_error(where + ".id", "expected a string");
  if (auto t = obj["type"]; !t.error() && t.get(type)) return field_error(where + ".type", "expected a string");
  if (type != "function") return field_error(where + ".type", fmt::format("must be function, got '{}'", type));
  if (obj["function"].get(fn)) return field_error(where + ".function", "expected an object");
  if (fn["name"].get(name)) return field_error(where + ".function.name", "expected a string");
  if (fn["arguments"].get(arguments)) return field_error(where + ".function.arguments", "expected a JSON string");
  // NOTE: a parser of its own: the request's DOM lives in the shared thread-local one.
  simdjson::dom::parser args_parser;
  element args;
  if (args_parser.parse(arguments.data(), arguments.size()).get(args))
    return field_error(where + ".function.arguments", "is not valid JSON");
  chat_value function = chat_value::object{{"name", chat_value(name)}, {"arguments", to_chat_value(args)}};
  return chat_value(chat_value::object{{"id", chat_value(id)}, {"type", chat_value(type)}, {"function", function}});
}

status read_tool_calls(element v, const std::string& where, chat_value& out) {
  simdjson::dom::array arr;
  if (v.get(arr)) return field_error(where, "expected an array of tool calls");
  chat_value::array calls;
  size_t j = 0;
  for (element item : arr) {
    auto call = read_tool_call(item, fmt::format("{}[{}]", where, j++));
    if (!call) return call.err();
    calls.push_back(std::move(*call));
  }
  if (!calls.empty()) out = chat_value(std::move(calls));
  return {};
}

status read_message(simdjson::dom::object obj, const std::string& where, chat_message& m) {
  bool has_role = false;
  for (auto [key, value] : obj) {
    if (is_null(value)) continue;
    if (key == "role") {
      if (auto st = read_string(value, where + ".role", m.role); !st) return st;
      has_role = true;
    } else if (key == "content") {
      if (auto st = read_content(value, where + ".content", m.content); !st) return st;
    } else if (key == "name") {
      if (auto st = read_string(value, where + ".name", m.name); !st) return st;
    } else if (key == "tool_call_id") {
      if (auto st = read_string(value, where + ".tool_call_id", m.tool_call_id); !st) return st;
    } else if (key == "tool_calls") {
      if (auto st = read_tool_calls(value, where + ".tool_calls", m.tool_calls); !st) return st;
    } else if (key == "reasoning_content") {
      if (auto st = read_string(value, where + ".reasoning_content", m.reasoning_content); !st) return st;
    } else if (key == "refusal" || key == "annotations") {
      // Output fields a client echoes back with an earlier assistant message; not prompt text.
    } else {
      return field_error(fmt::format("{}.{}", where, key), "unknown field of a message");
    }
  }
  if (!has_role) return field_error(where + ".role", "is required");
  if (m.role == "developer") m.role = "system";
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
    return field_error(where + ".role", fmt::format("must be system, user, assistant or tool, got '{}'", m.role));
  if (!m.tool_calls.is_null() && m.role != "assistant")
    return field_error(where + ".tool_calls", "only assistant messages carry tool calls");
  return {};
}

status read_tool(element v, const std::string& where, std::vector<tool_function>& functions) {
  simdjson::dom::object obj, fn;
  std::string_view type, name;
  if (v.get(obj)) return field_error(where, "expected a tool object");
  if (obj["type"].get(type)) return field_error(where + ".type", "expected a string");
  if (type != "function")
    return unsupported_field(where + ".type", fmt::format("only function tools are supported, got '{}'", type));
  if (obj["function"].get(fn)) return field_error(where + ".function", "expected an object");
  if (fn["name"].get(name) || name.empty()) return field_error(where + ".function.name", "expected a non-empty string");
  for (auto [key, value] : fn) {
    if (key == "parameters" && !is_null(value) && value.type() != element_type::OBJECT)
      return field_error(where + ".function.parameters", "expected a JSON schema object");
    if (key == "description" && !is_null(value) && value.type() != element_type::STRING)
      return field_error(where + ".function.description", "expected a string");
  }
  tool_function f;
  f.name = std::string(name);
  if (element params; !fn["parameters"].get(params) && !is_null(params)) f.parameters_json = simdjson::minify(params);
  functions.push_back(std::move(f));
  return {};
}

}  // namespace

status read_messages(element v, std::vector<chat_message>& out) {
  simdjson::dom::array arr;
  if (v.get(arr)) return field_error("messages", "expected an array of messages");
  if (arr.size() == 0) return field_error("messages", "must not be empty");
  out.clear();
  size_t i = 0;
  for (element item : arr) {
    const std::string where = fmt::format("messages[{}]", i++);
    simdjson::dom::object obj;
    if (item.get(obj)) return field_error(where, "expected an object");
    chat_message m;
    if (auto st = read_message(obj, where, m); !st) return st;
    out.push_back(std::move(m));
  }
  return {};
}

status read_tools(element v, chat_value& out, std::vector<tool_function>& functions) {
  simdjson::dom::array arr;
  if (v.get(arr)) return field_error("tools", "expected an array of tools");
  functions.clear();
  size_t i = 0;
  for (element item : arr)
    if (auto st = read_tool(item, fmt::format("tools[{}]", i++), functions); !st) return st;
  out = to_chat_value(v);
  return {};
}

status read_template_kwargs(element v, chat_value& out) {
  if (v.type() != element_type::OBJECT) return field_error("chat_template_kwargs", "expected an object");
  out = to_chat_value(v);
  return {};
}

}  // namespace actorserve::protocol::openai::detail_common
