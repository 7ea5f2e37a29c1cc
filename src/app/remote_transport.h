// The transport half of `tollgate stdio --remote URL` (remote_transport.cc): the bridge's one
// thread, which reads stdin, POSTs each line over libcurl and writes the answers to stdout.
#pragma once

#include <string>

#include "stdio_remote.h"

namespace tollgate::app {

/// Runs the bridge to `o.url` with `key` until stdin ends or SIGTERM/SIGINT arrives on
/// `signal_fd` (a signalfd; -1: none), then answers what is in flight. curl_global_init() must
/// have run. Returns the exit code run_stdio_remote() documents.
int run_bridge(remote_options o, std::string key, int signal_fd);

}  // namespace tollgate::app
