#pragma once
/// The playground page served at GET / (server/playground/index.html, compiled in at build time).
#include <string_view>

namespace actorserve::server {

/// The page's bytes: HTML with its CSS and script inline.
std::string_view playground_page();

}  // namespace actorserve::server
