// The session half of `tollgate stdio --remote URL` (remote_transport.cc holds the transport,
// remote_bridge.h what is written back): what the bridge knows of its MCP session with the
// server, and what every POST carries because of it:
//   - the handshake: a client's initialize starts a new one (what the last one negotiated no
//     longer holds); it is kept, with its notifications/initialized, so that the bridge can run
//     it again itself when the server has ended the session (step 4 of remote_transport.cc);
//   - what the handshake negotiated: the protocol version (MCP-Protocol-Version on each later
//     POST, and the revision the bridge's own errors are rendered for) and the session id
//     (Mcp-Session-Id);
//   - deadlines (step 5): Tollgate-Deadline on each POST of requests, on the server's clock as
//     the Date of its answers shows it.
// No sockets here: the transport reads the headers and hands their values in. Not thread-safe
// (one bridge, one thread).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "remote_bridge.h"
#include "tollgate/envelope/envelope.h"

namespace tollgate::app::remote {

/// Printable ASCII without blanks: what a header may carry verbatim.
bool header_safe(std::string_view v);

class session {
 public:
  /// `timeout_ms`: the bridge's longest wait for one answer (--timeout-ms).
  explicit session(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}

  /// A client's line about to be POSTed, with its facts; `initialize`: the line is one
  /// initialize request (a new handshake).
  void on_line(std::string_view line, const line_facts& facts, bool initialize);
  /// The headers a POST of `facts` carries besides the bridge's own (key, content type): the
  /// protocol version (for a 2026-07-28 request, its own, with its method and tool), the session
  /// id, and, when it holds requests, the deadline. `own`: a message the bridge sends itself
  /// (the key check, a cancellation), which carries no deadline.
  std::vector<std::string> headers(const line_facts& facts, bool initialize, bool own) const;
  /// Whether a POST carries the session id (a 404 to it then means the session ended).
  bool sends_id(bool initialize) const noexcept { return !initialize && !id_.empty(); }

  /// An initialize's 200 answer: the protocolVersion it negotiated and the Mcp-Session-Id
  /// header it carried, each taken when header_safe.
  void adopt_version(std::string_view version);
  void adopt_id(std::string_view id);
  /// A handshake the bridge ran again: its version and session id, both taken or neither (false
  /// when one is not header_safe).
  bool renew(std::string_view version, std::string_view id);
  /// The server's clock minus ours, from the Date of an answer (`server`, whole seconds since
  /// the epoch): 0 within 2 s, as a smaller difference is not told apart from none.
  void note_server_time(time_t server);

  envelope::revision negotiated() const noexcept { return negotiated_; }
  /// The client's last initialize (empty: none yet), and its notifications/initialized.
  const std::string& initialize_line() const noexcept { return init_line_; }
  const std::string& initialized_line() const noexcept { return initialized_line_; }

 private:
  int64_t timeout_ms_;
  std::string version_;  ///< MCP-Protocol-Version negotiated at initialize
  envelope::revision negotiated_ = envelope::revision::v2025_03_26;
  std::string id_;                ///< Mcp-Session-Id the server gave at initialize
  std::string init_line_;         ///< the client's last initialize, to open a new session with
  std::string initialized_line_;  ///< and its notifications/initialized
  int64_t clock_offset_ms_ = 0;   ///< the server's clock minus ours (note_server_time)
};

}  // namespace tollgate::app::remote
