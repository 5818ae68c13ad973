#include "reference_json.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace actorserve::testing {
namespace {

struct reader {
  const std::string& s;
  size_t i = 0;
  bool ok = true;

  void ws() { while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i; }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) { ++i; return true; }
    return false;
  }
  std::string str() {
    ws();
    std::string out;
    if (!eat('"')) { ok = false; return out; }
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\') ++i;
      if (i < s.size()) out += s[i++];
    }
    ++i;
    return out;
  }
  std::vector<double> numbers() {
    std::vector<double> v;
    if (!eat('[')) { ok = false; return v; }
    if (eat(']')) return v;
    do {
      ws();
      char* end = nullptr;
      v.push_back(std::strtod(s.c_str() + i, &end));
      if (end == s.c_str() + i) { ok = false; return v; }
      i = static_cast<size_t>(end - s.c_str());
    } while (eat(','));
    if (!eat(']')) ok = false;
    return v;
  }
  void skip() {  // any value
    ws();
    if (i >= s.size()) { ok = false; return; }
    if (s[i] == '"') { str(); return; }
    if (s[i] == '[' || s[i] == '{') {
      const char close = s[i] == '[' ? ']' : '}';
      const bool obj = s[i] == '{';
      ++i;
      if (eat(close)) return;
      do {
        if (obj) { str(); eat(':'); }
        skip();
      } while (ok && eat(','));
      if (!eat(close)) ok = false;
      return;
    }
    while (i < s.size() && s[i] != ',' && s[i] != ']' && s[i] != '}') ++i;
  }
};

}  // namespace

std::vector<ref_case> read_reference(const std::string& model_dir) {
  std::ifstream f(model_dir + "/reference.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  reader r{text};
  std::vector<ref_case> cases;
  if (!r.eat('{')) return {};
  do {
    const std::string key = r.str();
    r.eat(':');
    if (key != "cases") { r.skip(); continue; }
    if (!r.eat('[')) return {};
    do {
      ref_case c;
      if (!r.eat('{')) return {};
      do {
        const std::string k = r.str();
        r.eat(':');
        if (k == "prompt_ids" || k == "greedy_ids") {
          for (double x : r.numbers()) (k == "prompt_ids" ? c.prompt_ids : c.greedy_ids).push_back(int32_t(x));
        } else if (k == "last_logits") {
          for (double x : r.numbers()) c.last_logits.push_back(float(x));
        } else if (k == "greedy_top2_margins") {
          c.margins = r.numbers();
        } else {
          r.skip();
        }
      } while (r.ok && r.eat(','));
      if (!r.eat('}')) return {};
      cases.push_back(std::move(c));
    } while (r.ok && r.eat(','));
    if (!r.eat(']')) return {};
  } while (r.ok && r.eat(','));
  return r.ok ? cases : std::vector<ref_case>{};
}

}  // namespace actorserve::testing
