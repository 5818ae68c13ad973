#include "protocol/tokenizer/pipeline_load.hpp"

#include "protocol/tokenizer/regex_splitter.hpp"

namespace actorserve::protocol::detail {
namespace {

/// Each element of array field `key` as an object, with its indexed path.
template <class F>
status for_each_object(const json_obj& o, std::string_view key, F&& f) {
  auto e = o.find(key);
  dom::array arr;
  if (!e || e->get_array().get(arr) != simdjson::SUCCESS) return o.bad(key, "an array");
  size_t i = 0;
  for (dom::element item : arr) {
    dom::object obj;
    std::string name = fmt::format("{}[{}]", key, i++);
    if (item.get_object().get(obj) != simdjson::SUCCESS) return o.bad(name, "an object");
    if (status s = f(o.child(obj, name)); !s) return s;
  }
  return {};
}

/// A `pattern` field: {"String": s} (literal) or {"Regex": r}. Sets `is_regex`.
status get_pattern(const json_obj& o, std::string& out, bool& is_regex) {
  auto p = o.get_object("pattern");
  if (!p) return p.err();
  if (p->find("Regex")) {
    is_regex = true;
    return p->get_string("Regex", out);
  }
  is_regex = false;
  if (!p->find("String")) return o.bad("pattern", "{\"String\": ...} or {\"Regex\": ...}");
  return p->get_string("String", out);
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

status add_splitter(tokenizer_impl& t, const json_obj& o, std::string_view pattern, regex_splitter::behavior b) {
  auto sp = regex_splitter::compile(pattern, b, fmt::format("{}: {}pattern", *o.file, o.path));
  if (!sp) return sp.err();
  t.splitters.push_back(std::move(*sp));
  return {};
}

status load_metaspace(const json_obj& o, metaspace_settings& ms) {
  if (status s = o.get_string("replacement", ms.replacement); !s) return s;
  if (ms.replacement.empty()) ms.replacement = "\xE2\x96\x81";
  bool add_prefix_space = true;
  if (status s = o.get_bool("add_prefix_space", add_prefix_space); !s) return s;
  ms.prepend_scheme = add_prefix_space ? metaspace_settings::prepend::always : metaspace_settings::prepend::never;
  std::string scheme;
  if (status s = o.get_string("prepend_scheme", scheme); !s) return s;
  if (scheme == "first") ms.prepend_scheme = metaspace_settings::prepend::first;
  else if (scheme == "never") ms.prepend_scheme = metaspace_settings::prepend::never;
  else if (scheme == "always") ms.prepend_scheme = metaspace_settings::prepend::always;
  else if (!scheme.empty()) return o.unsupported("prepend_scheme", scheme);
  return o.get_bool("split", ms.split);
}

status load_normalizer_obj(tokenizer_impl& t, const json_obj& o) {
  auto type = o.type();
  if (!type) return type.err();
  if (*type == "Sequence")
    return for_each_object(o, "normalizers", [&](const json_obj& c) { return load_normalizer_obj(t, c); });
  normalizer_step step;
  if (const auto form = unicode_form_named(*type)) {
    step.type = normalizer_step::kind::unicode;
    step.form = *form;
  } else if (*type == "Prepend") {
    step.type = normalizer_step::kind::prepend;
    if (status s = o.get_string("prepend", step.content); !s) return s;
  } else if (*type == "Replace") {
    bool is_regex = false;
    if (status s = get_pattern(o, step.pattern, is_regex); !s) return s;
    if (is_regex) return o.unsupported("pattern", "Regex");
    if (status s = o.get_string("content", step.content); !s) return s;
  } else {
    return o.unsupported("type", *type);
  }
  t.normalizers.push_back(std::move(step));
  return {};
}

status load_pre_tokenizer_obj(tokenizer_impl& t, const json_obj& o) {
  auto type = o.type();
  if (!type) return type.err();
  if (*type == "Sequence")
    return for_each_object(o, "pretokenizers", [&](const json_obj& c) { return load_pre_tokenizer_obj(t, c); });
  if (*type == "Split") {
    std::string pattern, behavior;
    bool is_regex = false, invert = false;
    if (status s = get_pattern(o, pattern, is_regex); !s) return s;
    if (status s = o.get_string("behavior", behavior); !s) return s;
    if (status s = o.get_bool("invert", invert); !s) return s;
    if (invert) return o.unsupported("invert", "true");
    regex_splitter::behavior b;
    if (behavior == "Isolated") b = regex_splitter::behavior::isolated;
    else if (behavior == "Removed") b = regex_splitter::behavior::removed;
    else return o.unsupported("behavior", behavior);
    return add_splitter(t, o, is_regex ? pattern : regex_escape(pattern), b);
  }
  if (*type == "ByteLevel") {
    t.model.byte_level = true;
    bool use_regex = true;
    if (status s = o.get_bool("add_prefix_space", t.byte_level_prefix_space); !s) return s;
    if (status s = o.get_bool("use_regex", use_regex); !s) return s;
    return use_regex ? add_splitter(t, o, gpt2_split_pattern, regex_splitter::behavior::isolated) : status();
  }
  if (*type == "Metaspace") {
    metaspace_settings ms;
    if (status s = load_metaspace(o, ms); !s) return s;
    t.metaspace = ms;
    return {};
  }
  if (*type == "Digits") {
    bool individual = false;
    if (status s = o.get_bool("individual_digits", individual); !s) return s;
    return add_splitter(t, o, individual ? "\\p{N}" : "\\p{N}+", regex_splitter::behavior::isolated);
  }
  return o.unsupported("type", *type);
}

/// Ids of a special token named in TemplateProcessing's `special_tokens` map.
status template_ids(const json_obj& o, std::string_view name, std::vector<int32_t>& out) {
  auto specials = o.get_object("special_tokens");
  if (!specials) return specials.err();
  auto entry = specials->get_object(name);
  if (!entry) return entry.err();
  auto ids = entry->find("ids");
  dom::array arr;
  if (!ids || ids->get_array().get(arr) != simdjson::SUCCESS) return entry->bad("ids", "an array of token ids");
  for (dom::element e : arr) {
    int64_t id = 0;
    if (e.get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX)
      return entry->bad("ids", "an array of token ids");
    out.push_back(static_cast<int32_t>(id));
  }
  return {};
}

status load_template(tokenizer_impl& t, const json_obj& o) {
  auto single = o.find("single");
  dom::array arr;
  if (!single || single->get_array().get(arr) != simdjson::SUCCESS) return o.bad("single", "an array");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  size_t i = 0;
  for (dom::element item : arr) {
    std::string name = fmt::format("single[{}]", i++);
    dom::object obj, inner;
    if (item.get_object().get(obj) != simdjson::SUCCESS) return o.bad(name, "an object");
    if (obj["Sequence"].get_object().get(inner) == simdjson::SUCCESS) {
      seen_sequence = true;
      continue;
    }
    std::string_view id;
    if (obj["SpecialToken"].get_object().get(inner) != simdjson::SUCCESS ||
        inner["id"].get_string().get(id) != simdjson::SUCCESS)
      return o.bad(name, "{\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
    if (status s = template_ids(o, id, seen_sequence ? suffix : prefix); !s) return s;
  }
  t.post_prefix.insert(t.post_prefix.end(), prefix.begin(), prefix.end());
  t.post_suffix.insert(t.post_suffix.end(), suffix.begin(), suffix.end());
  return {};
}

/// BertProcessing / RobertaProcessing: {"cls": [token, id], "sep": [token, id]}.
status load_cls_sep(tokenizer_impl& t, const json_obj& o) {
  for (const char* key : {"cls", "sep"}) {
    auto e = o.find(key);
    dom::array arr;
    int64_t id = -1;
    if (!e || e->get_array().get(arr) != simdjson::SUCCESS || arr.size() != 2 ||
        arr.at(1).get_int64().get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX)
      return o.bad(key, "[token, id]");
    (std::string_view(key) == "cls" ? t.post_prefix : t.post_suffix).push_back(static_cast<int32_t>(id));
  }
  return {};
}

status load_post_processor_obj(tokenizer_impl& t, const json_obj& o) {
  auto type = o.type();
  if (!type) return type.err();
  if (*type == "Sequence")
    return for_each_object(o, "processors", [&](const json_obj& c) { return load_post_processor_obj(t, c); });
  if (*type == "ByteLevel") return {};  // only adjusts offsets
  if (*type == "TemplateProcessing") return load_template(t, o);
  if (*type == "BertProcessing" || *type == "RobertaProcessing") return load_cls_sep(t, o);
  return o.unsupported("type", *type);
}

status load_decoder_obj(tokenizer_impl& t, const json_obj& o) {
  auto type = o.type();
  if (!type) return type.err();
  if (*type == "Sequence")
    return for_each_object(o, "decoders", [&](const json_obj& c) { return load_decoder_obj(t, c); });
  decoder_step d;
  if (*type == "ByteLevel") {
    d.type = decoder_step::kind::byte_level;
  } else if (*type == "ByteFallback") {
    d.type = decoder_step::kind::byte_fallback;
  } else if (*type == "Fuse") {
    d.type = decoder_step::kind::fuse;
  } else if (*type == "Replace") {
    d.type = decoder_step::kind::replace;
    bool is_regex = false;
    if (status s = get_pattern(o, d.pattern, is_regex); !s) return s;
    if (is_regex) return o.unsupported("pattern", "Regex");
    if (status s = o.get_string("content", d.content); !s) return s;
  } else if (*type == "Strip") {
    d.type = decoder_step::kind::strip;
    int64_t start = 0, stop = 0;
    if (status s = o.get_string("content", d.content); !s) return s;
    if (status s = o.get_int("start", start); !s) return s;
    if (status s = o.get_int("stop", stop); !s) return s;
    if (start < 0 || stop < 0 || start > 1024 || stop > 1024) return o.bad("start", "a small non-negative integer");
    d.start = static_cast<int>(start);
    d.stop = static_cast<int>(stop);
  } else if (*type == "Metaspace") {
    d.type = decoder_step::kind::metaspace;
    metaspace_settings ms;
    if (status s = load_metaspace(o, ms); !s) return s;
    d.pattern = ms.replacement;
    d.start = ms.prepend_scheme == metaspace_settings::prepend::never ? 0 : 1;
  } else {
    return o.unsupported("type", *type);
  }
  t.decoders.push_back(std::move(d));
  return {};
}

/// Runs `f` on the object field `key` unless it is absent or null.
template <class F>
status optional_section(const json_obj& root, std::string_view key, F&& f) {
  auto e = root.find(key);
  if (!e) return {};
  dom::object o;
  if (e->get_object().get(o) != simdjson::SUCCESS) return root.bad(key, "an object or null");
  return f(root.child(o, key));
}

}  // namespace

status load_normalizer(tokenizer_impl& t, const json_obj& root) {
  return optional_section(root, "normalizer", [&](const json_obj& o) { return load_normalizer_obj(t, o); });
}
status load_pre_tokenizer(tokenizer_impl& t, const json_obj& root) {
  return optional_section(root, "pre_tokenizer", [&](const json_obj& o) { return load_pre_tokenizer_obj(t, o); });
}
status load_post_processor(tokenizer_impl& t, const json_obj& root) {
  return optional_section(root, "post_processor", [&](const json_obj& o) -> status {
    t.has_post_processor = true;
    if (status s = load_post_processor_obj(t, o); !s) return s;
    // NOTE: runs after the model and added tokens, so the vocabulary is complete here.
    for (const auto* ids : {&t.post_prefix, &t.post_suffix})
      for (int32_t id : *ids)
        if (static_cast<size_t>(id) >= t.id_to_token.size() || t.id_to_token[id].empty())
          return o.bad("special_tokens", fmt::format("ids within the vocabulary (id {} is not)", id));
    return {};
  });
}
status load_decoder(tokenizer_impl& t, const json_obj& root) {
  return optional_section(root, "decoder", [&](const json_obj& o) { return load_decoder_obj(t, o); });
}

}  // namespace actorserve::protocol::detail
