#include "bench/common/bench_cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "config/cli.hpp"
#include "config/log.hpp"

namespace actorserve::bench {

result<bench_command_line> parse_bench_command_line(const std::string& description, const std::vector<bench_option>& own,
                                                    bool with_engine, int argc, const char* const* argv) {
  bench_command_line out;
  CLI::App app{description};
  for (const auto& o : own) {
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>) app.add_flag(o.name, *p, o.help);
          else app.add_option(o.name, *p, o.help)->capture_default_str();
        },
        o.target);
  }
  if (with_engine) app.allow_extras();
  std::string engine_help;
  if (with_engine) {
    const char* help_argv[] = {"actorserve", "serve", "--help"};
    auto h = parse_command_line(3, help_argv);
    if (h && h->exit_now) engine_help = h->output;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out.exit_now = true;
    out.output = app.help();
    if (with_engine) out.output += "\nEngine flags (as `actorserve serve` takes them, --model required):\n" + engine_help;
    return out;
  } catch (const CLI::ParseError& e) {
    return make_error(error_code::invalid_argument, e.what());
  }
  if (!with_engine) return out;
  std::vector<std::string> rest = app.remaining();
  std::vector<const char*> args{"actorserve", "serve"};
  for (const auto& a : rest) args.push_back(a.c_str());
  auto cl = parse_command_line(static_cast<int>(args.size()), args.data());
  if (!cl) return cl.err();
  out.engine = cl->engine;
  log::level lvl = log::level::info;
  if (log::parse_level(out.engine.log_level, lvl)) log::set_level(lvl);
  return out;
}

std::string command_line_text(int argc, const char* const* argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const bool plain = !a.empty() && a.find_first_of(" \t\"'$\\*?;&|<>()") == std::string::npos;
    if (i) out += ' ';
    out += plain ? a : fmt::format("'{}'", a);
  }
  return out;
}

}  // namespace actorserve::bench
