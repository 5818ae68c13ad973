// `actorserve serve` for the end-to-end tests: the same command line, run through run_server.
// (Used until the actorserve binary itself dispatches `serve`; point ACTORSERVE_BIN at either.)
#include <cstdio>

#include "config/cli.hpp"
#include "config/log.hpp"
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
  if (cl->cmd != command::serve) {
    std::fprintf(stderr, "actorserve_e2e_serve: only `serve` is supported\n");
    return 2;
  }
  log::level lvl{};
  log::parse_level(cl->engine.log_level, lvl);
  log::set_level(lvl);
  return server::run_server(cl->engine);
}
