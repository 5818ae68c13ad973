// Loading a tokenizer from a model directory: tokenizer.json, then optionally (after a NUL byte)
// tokenizer_config.json, then (after another NUL) generation_config.json. The files go to a
// scratch folder because the loader reads files. Either an error, or a tokenizer that encodes
// and decodes sample text to in-range ids and valid UTF-8 and whose special ids are in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "protocol/chat_template/chat_template.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

using actorserve::protocol::tokenizer;
namespace fz = actorserve::fuzz;

namespace {

const char* const file_names[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};

void cleanup() {
  for (const char* f : file_names) fz::remove_scratch(f);
  std::remove(fz::scratch_dir().c_str());
}

void check_id(const tokenizer& tok, int32_t id, const char* what) {
  FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "%s %d outside the vocabulary (%d ids)", what, id, tok.vocab_size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)fz::scratch_dir();
  std::atexit(cleanup);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = fz::split_nul(fz::as_text(data, size), 3);
  for (size_t i = 0; i < 3; ++i) {
    if (i < parts.size())
      fz::write_scratch(file_names[i], parts[i]);
    else
      fz::remove_scratch(file_names[i]);
  }
  auto loaded = tokenizer::from_model_dir(fz::scratch_dir());
  if (!loaded) return 0;
  const tokenizer& tok = *loaded;
  FUZZ_CHECK(tok.vocab_size() >= 0, "negative vocab_size");
  // Known issue "special-ids-range": post-processor special-token ids are not checked against the
  // vocabulary, so BOS and the ids encode() adds with add_special_tokens can lie outside it.
  const bool special_ids_known = fz::known_issue("special-ids-range");
  for (int32_t id : tok.eos_token_ids()) check_id(tok, id, "eos id");
  if (auto bos = tok.bos_token_id(); bos && !special_ids_known) check_id(tok, *bos, "bos id");

  static const std::string samples[] = {"Hello world, it's 12:30!", "  \n\t x\xE6\x97\xA5\xF0\x9F\x99\x82 \xFF\xC3",
                                        "<s>[INST] hi [/INST]</s><|eot_id|>"};
  for (const auto& text : samples) {
    for (bool special : {false, true}) {
      auto ids = tok.encode(text, special);
      if (!special || !special_ids_known)
        for (int32_t id : ids) check_id(tok, id, "encoded id");
      FUZZ_CHECK(fz::valid_utf8(tok.decode(ids, !special)), "decode gave invalid UTF-8");
    }
  }
  std::vector<int32_t> every;
  for (int32_t id = -2; id < tok.vocab_size() + 2 && id < 4096; ++id) every.push_back(id);
  FUZZ_CHECK(fz::valid_utf8(tok.decode(every, false)), "decode of every id gave invalid UTF-8");
  if (!tok.chat_template().empty()) (void)actorserve::protocol::chat_template::parse(tok.chat_template());
  return 0;
}
