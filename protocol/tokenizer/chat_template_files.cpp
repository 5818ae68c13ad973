/// Chat templates kept as files beside the tokenizer (transformers >= 4.50 writes them so).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "protocol/tokenizer/pipeline_load.hpp"

namespace actorserve::protocol::detail {
namespace {

result<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(error_code::not_found, fmt::format("{}: cannot read file", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void set_named(tokenizer_impl& t, const std::string& name, std::string text) {
  for (auto& [n, existing] : t.named_chat_templates)
    if (n == name) {
      existing = std::move(text);
      return;
    }
  t.named_chat_templates.emplace_back(name, std::move(text));
}

}  // namespace

status load_chat_template_files(tokenizer_impl& t, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path main = fs::path(dir) / "chat_template.jinja";
  if (fs::is_regular_file(main, ec)) {
    auto text = read_text(main);
    if (!text) return text.err();
    t.chat_template = *text;
    set_named(t, "default", std::move(*text));
  }
  const fs::path extra = fs::path(dir) / "additional_chat_templates";
  if (!fs::is_directory(extra, ec)) return {};
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(extra, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".jinja") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto text = read_text(f);
    if (!text) return text.err();
    set_named(t, f.stem().string(), std::move(*text));
  }
  return {};
}

}  // namespace actorserve::protocol::detail
