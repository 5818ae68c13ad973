#include "actors/wire.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

namespace actorserve::actors {

void register_wire_types(caf::actor_system_config& cfg) { cfg.add_message_types<caf::id_block::actorserve>(); }

void configure_network(caf::actor_system_config& cfg, const cluster_options& c) {
  cfg.load<caf::io::middleman>();
  if (c.tls.enabled()) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = c.tls.cert;
    cfg.openssl_key = c.tls.key;
    cfg.openssl_cafile = c.tls.ca;
  }
  register_wire_types(cfg);
  cfg.set("middleman.app-identifiers", std::vector<std::string>{wire_app_identifier});
  // A host that vanishes without closing its connections (power, network) is noticed by the
  // missing heartbeats: its connection is closed and monitors fire.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(5)});
}

}  // namespace actorserve::actors
