// systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram to the unix
// socket named by $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace).
#pragma once

#include <string>
#include <string_view>

namespace tollgate::app {

/// Sends `state` (e.g. "READY=1\nSTATUS=listening on ...") to $NOTIFY_SOCKET. Returns true when
/// sent, false when the variable is unset (not under systemd: nothing to do) or on an error,
/// which is written to `error` when given.
bool sd_notify(std::string_view state, std::string* error = nullptr);

}  // namespace tollgate::app
