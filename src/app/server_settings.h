// The settings `serve` and `stdio` run with (server_settings.cc): the command line and config
// file parsed (cli.h), then checked as a whole (the fleet's settings hold together), and turned
// into the engine's options. `tollgate config check` runs the same checks without starting.
#pragma once

#include <optional>
#include <string_view>

#include "tollgate/config/config.h"

namespace tollgate::net {
struct server_options;  // tollgate/net/server.h
}  // namespace tollgate::net

namespace tollgate::app {

// The settings `command` ("serve" or "stdio") may run with: parsed (the usage after --help,
// code 0), then checked as a whole (the fleet's settings); or nullopt with `code` set after the
// message.
std::optional<config::settings> checked_settings(std::string_view command, int argc, char** argv,
                                                 int& code);

// The public engine's options from the settings (and the open-file limit, read now).
net::server_options engine_options(const config::settings& s);

}  // namespace tollgate::app
