// The actorserve binary: `actorserve serve ...`, `actorserve generate ...` or `actorserve engine ...`
// (see README.md and docs/deployment.md).
#include <cstdio>

#include "config/cli.hpp"
#include "config/log.hpp"
#include "server/offline_generate.hpp"
#include "server/serve.hpp"

int main(int argc, char** argv) {
  using namespace actorserve;
  auto cl = parse_command_line(argc, argv);
  if (!cl) {
    std::fprintf(stderr, "actorserve: %s\n", cl.err().message.c_str());
    return 2;
  }
  if (cl->exit_now) {
    std::fputs(cl->output.c_str(), stdout);
    return cl->exit_code;
  }
  log::level lvl{};
  log::parse_level(cl->engine.log_level, lvl);
  log::set_level(lvl);
  for (const auto& w : cl->warnings) log::warn("{}", w);
  switch (cl->cmd) {
    case command::serve: return server::run_server(cl->engine);
    case command::generate: return server::run_generate(cl.value());
    case command::engine: return server::run_engine(cl->engine);
  }
  return 2;
}
