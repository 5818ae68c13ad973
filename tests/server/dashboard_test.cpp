// The Grafana dashboard in docs/grafana/ is valid JSON and every series its queries name is one
// that /metrics renders, so a renamed series cannot leave a panel silently empty.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "server/metrics.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GrafanaDashboard, EveryQueriedSeriesIsRendered) {
  const std::string path = test_data_dir() + "/../../docs/grafana/actorserve.json";
  const std::string text = read_file(path);
  if (text.empty() && std::getenv("ACTORSERVE_TEST_DATA")) GTEST_SKIP() << "the bundle carries no docs/";
  ASSERT_FALSE(text.empty()) << path;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(text).get(doc), simdjson::SUCCESS) << "not valid JSON: " << path;
  simdjson::dom::array panels;
  ASSERT_EQ(doc["panels"].get_array().get(panels), simdjson::SUCCESS);
  EXPECT_GE(panels.size(), 8u);

  const server::metrics m;
  const std::string page = m.render(actors::engine_stats{}, "x", 0);
  const std::regex series("actorserve:[a-z0-9_]+");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), series); it != std::sregex_iterator(); ++it)
    names.insert(it->str());
  EXPECT_GE(names.size(), 15u);
  for (const auto& name : names) EXPECT_NE(page.find("\n" + name + "{"), std::string::npos) << name;
}

}  // namespace
}  // namespace actorserve::testing
