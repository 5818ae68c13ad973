// tokenizer.json (model, vocabulary, merges, added tokens), tokenizer_config.json and
// generation_config.json -> tokenizer_impl.
#include <algorithm>
#include <atomic>
#include <filesystem>

#include "config/json_fields.hpp"
#include "protocol/tokenizer/byte_level.hpp"
#include "protocol/tokenizer/pipeline_load.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::protocol {
namespace detail {
namespace {

/// Parses `path` into `doc`; errors name the file.
result<dom::element> parse_file(const std::string& path, dom::parser& parser, simdjson::padded_string& buf) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return make_error(error_code::not_found, fmt::format("{}: file not found", path));
  if (simdjson::padded_string::load(path).get(buf) != simdjson::SUCCESS)
    return make_error(error_code::not_found, fmt::format("{}: cannot read file", path));
  dom::element root;
  if (auto err = parser.parse(buf).get(root); err != simdjson::SUCCESS)
    return make_error(error_code::malformed_file, fmt::format("{}: invalid JSON: {}", path, simdjson::error_message(err)));
  return root;
}

/// The top-level object of the JSON file `path` (which must outlive the result); errors name it.
result<json_obj> open_object(const std::string& path, dom::parser& parser, simdjson::padded_string& buf) {
  auto root = parse_file(path, parser, buf);
  if (!root) return root.err();
  dom::object o;
  if (root->get_object().get(o) != simdjson::SUCCESS)
    return make_error(error_code::malformed_file, fmt::format("{}: top level must be a JSON object", path));
  return json_obj{o, &path, ""};
}

/// Token ids index a dense table, so an id is bounded by the entries that declare ids: at most
/// twice their count plus 64 Ki (real vocabularies are dense; added tokens follow them). Without
/// it a few-kilobyte file with one id near 2^26 made the loader allocate 2 GiB (fuzz finding 8).
int64_t max_token_id(size_t entries) { return std::min<int64_t>(int64_t{1} << 26, 2 * int64_t(entries) + 65536); }

status load_vocab(tokenizer_impl& t, const json_obj& model) {
  auto vocab = model.get_object("vocab");
  if (!vocab) return vocab.err();
  const int64_t max_id = max_token_id(vocab->obj.size());
  for (auto [key, value] : vocab->obj) {
    int64_t id = -1;
    if (value.get_int64().get(id) != simdjson::SUCCESS || id < 0)
      return vocab->bad(key, "a token id");
    if (id >= max_id)
      return vocab->bad(key, fmt::format("a token id below {} (the vocabulary has {} entries)", max_id,
                                         vocab->obj.size()));
    if (static_cast<size_t>(id) >= t.id_to_token.size()) t.id_to_token.resize(id + 1);
    t.id_to_token[id].assign(key);
    t.token_to_id.emplace(std::string(key), static_cast<int32_t>(id));
  }
  return {};
}

/// Model-space pieces: raw bytes for byte-level vocabularies, the strings themselves otherwise.
void build_pieces(tokenizer_impl& t) {
  bpe_model& m = t.model;
  m.byte_id.fill(-1);
  m.fallback_id.fill(-1);
  m.piece_to_id.reserve(t.token_to_id.size());
  for (const auto& [tok, id] : t.token_to_id) {
    std::string piece = tok;
    if (m.byte_level)
      if (auto b = byte_level_to_bytes(tok)) piece = std::move(*b);
    if (piece.size() == 1 && (m.byte_level || static_cast<uint8_t>(piece[0]) < 0x80))
      m.byte_id[static_cast<uint8_t>(piece[0])] = id;
    m.joinable.add_piece(piece, m.byte_level);
    m.piece_to_id.emplace(std::move(piece), id);
  }
  for (int b = 0; b < 256; ++b)
    if (auto it = t.token_to_id.find(fmt::format("<0x{:02X}>", b)); it != t.token_to_id.end())
      m.fallback_id[b] = it->second;
}

status load_merges(tokenizer_impl& t, const json_obj& model) {
  auto e = model.find("merges");
  if (!e) return {};
  dom::array arr;
  if (e->get_array().get(arr) != simdjson::SUCCESS) return model.bad("merges", "an array");
  t.model.merges.reserve(arr.size());
  int32_t rank = 0;
  for (dom::element item : arr) {
    std::string_view a, b, line;
    dom::array pair;
    if (item.get_string().get(line) == simdjson::SUCCESS) {
      size_t sp = line.find(' ');
      if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
        return model.bad(fmt::format("merges[{}]", rank), "\"a b\" or [a, b]");
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else if (item.get_array().get(pair) != simdjson::SUCCESS || pair.size() != 2 ||
               pair.at(0).get_string().get(a) != simdjson::SUCCESS ||
               pair.at(1).get_string().get(b) != simdjson::SUCCESS) {
      return model.bad(fmt::format("merges[{}]", rank), "\"a b\" or [a, b]");
    }
    auto ia = t.token_to_id.find(a);
    auto ib = t.token_to_id.find(b);
    auto iab = t.token_to_id.find(std::string(a) + std::string(b));
    if (ia == t.token_to_id.end() || ib == t.token_to_id.end() || iab == t.token_to_id.end())
      return model.bad(fmt::format("merges[{}]", rank), fmt::format("a pair of vocabulary tokens whose concatenation "
                                                                    "is in the vocabulary (got '{}' '{}')", a, b));
    t.model.merges.insert(ia->second, ib->second, {rank, iab->second});
    ++rank;
  }
  return {};
}

status load_model(tokenizer_impl& t, const json_obj& root) {
  auto model = root.get_object("model");
  if (!model) return model.err();
  std::string type = "BPE";
  if (status s = model->get_string("type", type); !s) return s;
  if (type != "BPE") return model->unsupported("type", type);
  std::string prefix, suffix, unk;
  if (status s = model->get_string("continuing_subword_prefix", prefix); !s) return s;
  if (status s = model->get_string("end_of_word_suffix", suffix); !s) return s;
  if (!prefix.empty()) return model->unsupported("continuing_subword_prefix", prefix);
  if (!suffix.empty()) return model->unsupported("end_of_word_suffix", suffix);
  if (status s = model->get_bool("byte_fallback", t.model.byte_fallback); !s) return s;
  if (status s = model->get_bool("fuse_unk", t.model.fuse_unk); !s) return s;
  if (status s = model->get_bool("ignore_merges", t.model.ignore_merges); !s) return s;
  if (status s = model->get_string("unk_token", unk); !s) return s;
  if (status s = load_vocab(t, *model); !s) return s;
  build_pieces(t);
  if (!unk.empty()) {
    auto it = t.token_to_id.find(unk);
    if (it == t.token_to_id.end()) return model->bad("unk_token", "a token of the vocabulary");
    t.model.unk_id = it->second;
  }
  return load_merges(t, *model);
}

status load_added_tokens(tokenizer_impl& t, const json_obj& root) {
  auto e = root.find("added_tokens");
  if (!e) return {};
  dom::array arr;
  if (e->get_array().get(arr) != simdjson::SUCCESS) return root.bad("added_tokens", "an array");
  size_t i = 0;
  const int64_t max_id = max_token_id(t.token_to_id.size() + arr.size());
  for (dom::element item : arr) {
    std::string name = fmt::format("added_tokens[{}]", i++);
    dom::object obj;
    if (item.get_object().get(obj) != simdjson::SUCCESS) return root.bad(name, "an object");
    json_obj o = root.child(obj, name);
    added_token tok;
    int64_t id = -1;
    if (status s = o.get_int("id", id); !s) return s;
    if (id < 0) return o.bad("id", "a token id");
    if (id >= max_id) return o.bad("id", fmt::format("a token id below {} (with the vocabulary's entries)", max_id));
    tok.id = static_cast<int32_t>(id);
    if (status s = o.get_string("content", tok.content); !s) return s;
    if (tok.content.empty()) return o.bad("content", "a non-empty string");
    for (auto [key, flag] : {std::pair{"lstrip", &tok.lstrip}, {"rstrip", &tok.rstrip}, {"normalized", &tok.normalized},
                             {"special", &tok.special}, {"single_word", &tok.single_word}})
      if (status s = o.get_bool(key, *flag); !s) return s;
    if (static_cast<size_t>(tok.id) >= t.id_to_token.size()) t.id_to_token.resize(tok.id + 1);
    t.id_to_token[tok.id] = tok.content;
    t.token_to_id.emplace(tok.content, tok.id);
    t.added.push_back(std::move(tok));
  }
  return {};
}

void build_added_index(tokenizer_impl& t) {
  t.special.assign(t.id_to_token.size(), 0);
  std::vector<uint32_t> order(t.added.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return t.added[a].content.size() > t.added[b].content.size(); });
  for (uint32_t i : order) {
    const added_token& tok = t.added[i];
    if (tok.special) t.special[tok.id] = 1;
    // As Hugging Face's AddedVocabulary: split purely on the `normalized` flag.
    auto& index = tok.normalized ? t.normalized_added : t.raw_added;
    index.by_first_byte[static_cast<uint8_t>(tok.content[0])].push_back(i);
    index.empty = false;
  }
}

void build_decode_tables(tokenizer_impl& t) {
  t.byte_token_value.assign(t.id_to_token.size(), -1);
  if (t.decodes_byte_fallback()) {
    for (int b = 0; b < 256; ++b)
      if (t.model.fallback_id[b] >= 0) t.byte_token_value[t.model.fallback_id[b]] = static_cast<int16_t>(b);
  }
  if (t.decoders.size() == 1 && t.decoders[0].type == decoder_step::kind::byte_level) {
    t.byte_level_bytes.resize(t.id_to_token.size());
    for (size_t id = 0; id < t.id_to_token.size(); ++id) {
      auto b = byte_level_to_bytes(t.id_to_token[id]);
      t.byte_level_bytes[id] = b ? std::move(*b) : t.id_to_token[id];
    }
  }
}

/// A token given as a string or as an AddedToken object {"content": ...}.
status get_token_field(const json_obj& o, std::string_view key, std::string& out) {
  auto e = o.find(key);
  if (!e) return {};
  std::string_view v;
  dom::object obj;
  if (e->get_string().get(v) == simdjson::SUCCESS) {
    out.assign(v);
    return {};
  }
  if (e->get_object().get(obj) == simdjson::SUCCESS && obj["content"].get_string().get(v) == simdjson::SUCCESS) {
    out.assign(v);
    return {};
  }
  return o.bad(key, "a string or an object with \"content\"");
}

status load_chat_template(tokenizer_impl& t, const json_obj& o) {
  auto e = o.find("chat_template");
  if (!e) return {};
  std::string_view v;
  if (e->get_string().get(v) == simdjson::SUCCESS) {
    t.chat_template.assign(v);
    return {};
  }
  dom::array arr;
  if (e->get_array().get(arr) != simdjson::SUCCESS)
    return o.bad("chat_template", "a string or a list of {name, template}");
  for (dom::element item : arr) {
    std::string_view name, tmpl;
    if (item["name"].get_string().get(name) != simdjson::SUCCESS ||
        item["template"].get_string().get(tmpl) != simdjson::SUCCESS)
      return o.bad("chat_template", "a string or a list of {name, template}");
    if (t.chat_template.empty() || name == "default") t.chat_template.assign(tmpl);
    t.named_chat_templates.emplace_back(name, tmpl);
  }
  return {};
}

status load_config(tokenizer_impl& t, const std::string& path) {
  dom::parser parser;
  simdjson::padded_string buf;
  auto o = open_object(path, parser, buf);
  if (!o) return o.err();
  if (status s = get_token_field(*o, "bos_token", t.bos_token); !s) return s;
  if (status s = get_token_field(*o, "eos_token", t.eos_token); !s) return s;
  for (auto [key, out] : {std::pair{"add_bos_token", &t.add_bos_token}, std::pair{"add_eos_token", &t.add_eos_token}}) {
    if (!o->find(key)) continue;  // absent: the post-processor decides
    bool flag = false;
    if (status s = o->get_bool(key, flag); !s) return s;
    *out = flag;
  }
  return load_chat_template(t, *o);
}

/// eos_token_id (an id or a list) and bos_token_id of generation_config.json.
status load_generation_config(tokenizer_impl& t, const std::string& path) {
  dom::parser parser;
  simdjson::padded_string buf;
  auto o = open_object(path, parser, buf);
  if (!o) return o.err();
  std::vector<int32_t> eos;
  if (status s = o->get_id_list("eos_token_id", eos); !s) return s;
  t.eos_ids.insert(t.eos_ids.end(), eos.begin(), eos.end());
  int64_t bos = -1;
  if (status s = o->get_int("bos_token_id", bos); !s) return s;
  if (bos >= 0 && !t.bos_id) t.bos_id = static_cast<int32_t>(bos);
  return {};
}

void finalize_special_ids(tokenizer_impl& t) {
  if (auto it = t.token_to_id.find(t.bos_token); !t.bos_token.empty() && it != t.token_to_id.end())
    t.bos_id = it->second;
  else if (!t.bos_id && !t.post_prefix.empty())
    t.bos_id = t.post_prefix.front();
  if (auto it = t.token_to_id.find(t.eos_token); !t.eos_token.empty() && it != t.token_to_id.end())
    t.eos_ids.insert(t.eos_ids.begin(), it->second);
  std::vector<int32_t> unique;
  for (int32_t id : t.eos_ids)
    if (t.token_of(id) && std::find(unique.begin(), unique.end(), id) == unique.end()) unique.push_back(id);
  t.eos_ids = std::move(unique);
  if (t.bos_token.empty() && t.bos_id && t.token_of(*t.bos_id)) t.bos_token = *t.token_of(*t.bos_id);
  if (t.eos_token.empty() && !t.eos_ids.empty()) t.eos_token = *t.token_of(t.eos_ids.front());
}

}  // namespace

/// Loads all three files; `config_path` and `generation_path` may be empty or missing.
result<std::shared_ptr<tokenizer_impl>> load_tokenizer(const std::string& json_path, const std::string& config_path,
                                                       const std::string& generation_path) {
  static std::atomic<uint64_t> next_model_id{1};
  auto t = std::make_shared<tokenizer_impl>();
  t->source = json_path;
  t->model.cache_owner_id = next_model_id.fetch_add(1);
  {
    dom::parser parser;
    simdjson::padded_string buf;
    auto o = open_object(json_path, parser, buf);
    if (!o) return o.err();
    // The pre-tokenizer decides whether the model works on bytes, so it is read first.
    for (auto step : {load_pre_tokenizer, load_model, load_added_tokens, load_normalizer, load_post_processor,
                      load_decoder})
      if (status s = step(*t, *o); !s) return s.err();
  }
  build_added_index(*t);
  build_decode_tables(*t);
  std::error_code ec;
  if (!config_path.empty() && std::filesystem::exists(config_path, ec))
    if (status s = load_config(*t, config_path); !s) return s.err();
  if (!generation_path.empty() && std::filesystem::exists(generation_path, ec))
    if (status s = load_generation_config(*t, generation_path); !s) return s.err();
  finalize_special_ids(*t);
  return t;
}

}  // namespace detail

result<tokenizer> tokenizer::from_files(const std::string& tokenizer_json_path,
                                        const std::string& tokenizer_config_path) {
  auto t = detail::load_tokenizer(tokenizer_json_path, tokenizer_config_path, "");
  if (!t) return t.err();
  return tokenizer(std::move(*t));
}

result<tokenizer> tokenizer::from_model_dir(const std::string& dir) {
  auto t = detail::load_tokenizer(dir + "/tokenizer.json", dir + "/tokenizer_config.json",
                                  dir + "/generation_config.json");
  if (!t) return t.err();
  if (status s = detail::load_chat_template_files(**t, dir); !s) return s.err();
  return tokenizer(std::move(*t));
}

}  // namespace actorserve::protocol
