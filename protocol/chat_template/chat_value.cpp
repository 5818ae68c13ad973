#include "protocol/chat_template/chat_value.hpp"

namespace actorserve::protocol {

chat_value chat_value::make_object(std::initializer_list<member> members) {
  chat_value out = object{};
  for (const auto& m : members) out = out.with(m.first, m.second);
  return out;
}

chat_value chat_value::make_array(std::initializer_list<chat_value> items) { return array(items); }

chat_value chat_value::message(std::string_view role, std::string_view content) {
  return object{{"role", chat_value(role)}, {"content", chat_value(content)}};
}

const chat_value* chat_value::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& m : as_object()) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

chat_value chat_value::with(std::string_view key, chat_value v) const {
  object members = is_object() ? as_object() : object{};
  for (auto& m : members) {
    if (m.first == key) {
      m.second = std::move(v);
      return chat_value(std::move(members));
    }
  }
  members.emplace_back(std::string(key), std::move(v));
  return chat_value(std::move(members));
}

}  // namespace actorserve::protocol
