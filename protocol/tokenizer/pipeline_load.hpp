#pragma once
/// Loading of the pipeline sections of tokenizer.json (normalizer, pre_tokenizer,
/// post_processor, decoder) into a tokenizer_impl. simdjson types only through
/// config/json_fields.hpp.
#include "config/json_fields.hpp"
#include "protocol/tokenizer/tokenizer_impl.hpp"

namespace actorserve::protocol::detail {

/// Reads `root.normalizer` (null, Sequence, Prepend, Replace, NFC).
status load_normalizer(tokenizer_impl& t, const json_obj& root);
/// Reads `root.pre_tokenizer` (null, Sequence, Split, ByteLevel, Metaspace, Digits); sets
/// t.model.byte_level when a ByteLevel step is present.
status load_pre_tokenizer(tokenizer_impl& t, const json_obj& root);
/// Reads `root.post_processor` (null, TemplateProcessing, ByteLevel, Sequence, Bert/Roberta).
status load_post_processor(tokenizer_impl& t, const json_obj& root);
/// Reads `root.decoder` (null, Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace).
status load_decoder(tokenizer_impl& t, const json_obj& root);

/// The newer Hugging Face layout: `dir/chat_template.jinja` (the default template, preferred
/// over tokenizer_config.json's) and `dir/additional_chat_templates/NAME.jinja` (named ones).
status load_chat_template_files(tokenizer_impl& t, const std::string& dir);

}  // namespace actorserve::protocol::detail
