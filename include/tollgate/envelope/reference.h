// The slow, obviously-correct reference renderer: builds each response naively with std::string
// (nested objects rendered as plain JSON first, then escaped as a whole when they sit inside a
// string). Used only by the differential test and fuzz target, which hold the fast envelope
// writers of envelope.h byte for byte equal to it. Not for the request path (allocates).
#pragma once

#include <string>
#include <string_view>

#include "tollgate/envelope/envelope.h"

namespace tollgate::envelope::reference {

/// `s` escaped as the inside of a JSON string.
std::string escape(std::string_view s);
/// A whole HTTP response: status line, Content-Type (when the status has one), Connection:
/// close (when `close`), `extra_headers`, Content-Length, blank line, body.
std::string http(int status, bool close, std::string_view extra_headers, std::string_view body);
/// A tools/call success whose payload (raw JSON text, unescaped) becomes the text block.
std::string success(std::string_view id, revision r, std::string_view raw_payload);
std::string tool_error_json(const tool_error& e);
std::string tool_error_response(std::string_view id, revision r, const tool_error& e);
std::string error_response(std::string_view id, const rpc_error& e);
std::string result_response(std::string_view id, std::string_view result_json);
std::string unauthorized(bool close, bool key_presented = false);
/// The supported revisions as a JSON array.
std::string supported_versions();

}  // namespace tollgate::envelope::reference
