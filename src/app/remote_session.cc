// The bridge's MCP session with the server (remote_session.h): the handshake kept to run again,
// what it negotiated, the server's clock, and the headers each POST carries because of them.
#include "remote_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "tollgate/common/log.h"

namespace tollgate::app::remote {
namespace {

// How much earlier than its own timeout the bridge asks the server to give up (step 5): a tenth
// of it, between 50 ms and 2 s, and never more than half of it.
int64_t deadline_margin_ms(int64_t timeout_ms) {
  return std::min(std::clamp<int64_t>(timeout_ms / 10, 50, 2000), timeout_ms / 2);
}

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool header_safe(std::string_view v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
}

void session::on_line(std::string_view line, const line_facts& facts, bool initialize) {
  if (initialize) {
    // A new handshake: what the last one negotiated no longer holds.
    version_.clear();
    id_.clear();
    negotiated_ = envelope::revision::v2025_03_26;
    init_line_ = line;
  } else if (!facts.batch && facts.messages.size() == 1 &&
             facts.messages[0].method == "notifications/initialized") {
    initialized_line_ = line;
  }
}

std::vector<std::string> session::headers(const line_facts& facts, bool initialize,
                                          bool own) const {
  std::vector<std::string> extra;
  const message_facts* single =
      !facts.batch && facts.messages.size() == 1 ? &facts.messages[0] : nullptr;
  envelope::revision meta_rev;
  if (single != nullptr && !single->meta_version.empty() &&
      envelope::parse_revision(single->meta_version, meta_rev) && envelope::is_modern(meta_rev)) {
    // 2026-07-28: every request names its revision, method and tool in headers too.
    extra.push_back("MCP-Protocol-Version: " + single->meta_version);
    extra.push_back("Mcp-Method: " + header_value(single->method));
    if (single->method == "tools/call") {
      extra.push_back("Mcp-Name: " + header_value(single->tool));
    }
  } else if (!initialize && !version_.empty()) {
    extra.push_back("MCP-Protocol-Version: " + version_);
  }
  if (!initialize && !id_.empty()) {
    extra.push_back("Mcp-Session-Id: " + id_);
  }
  if (!own && facts.any_request()) {
    const int64_t deadline =
        wall_ms() + clock_offset_ms_ + timeout_ms_ - deadline_margin_ms(timeout_ms_);
    extra.push_back(fmt::format("Tollgate-Deadline: {}", deadline));
  }
  return extra;
}

void session::adopt_version(std::string_view version) {
  if (header_safe(version)) {
    version_ = version;
    envelope::revision r;
    negotiated_ = envelope::parse_revision(version_, r) ? r : envelope::revision::v2025_03_26;
  }
}

void session::adopt_id(std::string_view id) {
  if (header_safe(id)) {
    id_ = id;
  }
}

bool session::renew(std::string_view version, std::string_view id) {
  if (!header_safe(id) || !header_safe(version)) {
    return false;
  }
  id_ = id;
  version_ = version;
  envelope::revision r;
  negotiated_ = envelope::parse_revision(version_, r) ? r : envelope::revision::v2025_03_26;
  return true;
}

void session::note_server_time(time_t server) {
  // Date is the second the server wrote the answer in: its middle is the best guess.
  const int64_t diff = static_cast<int64_t>(server) * 1000 + 500 - wall_ms();
  const int64_t offset = diff > 2000 || diff < -2000 ? diff : 0;
  if (offset != 0 && clock_offset_ms_ == 0) {
    log_info(
        "stdio --remote: the server's clock differs from ours by about {} ms; deadlines are "
        "sent on its clock",
        offset);
  } else if (offset == 0 && clock_offset_ms_ != 0) {
    log_info("stdio --remote: the server's clock agrees with ours again");
  }
  clock_offset_ms_ = offset;
}

}  // namespace tollgate::app::remote
