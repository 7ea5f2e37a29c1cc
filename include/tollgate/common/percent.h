// Percent-encoding (RFC 3986 §2.1): decoding for the REST query-string parser and the shard
// node's story paths; encoding for form bodies and query strings (OAuth, the Stripe meter).
#pragma once

#include <string>
#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate {

/// The value of one hexadecimal digit, or -1.
int hex_digit_value(char c) noexcept;

/// Appends `s` to `out` with every %XX decoded; with `plus_is_space` (query strings, form
/// encoding) '+' becomes a space, otherwise (paths) it stays. False on a malformed escape
/// (`out` then holds a partial result).
bool percent_decode(std::string_view s, out_buffer& out, bool plus_is_space);

/// `s` with every byte but the unreserved ones (A-Z a-z 0-9 - . _ ~) as %XX: safe in a query
/// string, a form value (application/x-www-form-urlencoded) and a path segment.
std::string percent_encode(std::string_view s);
/// The same, appended to `out` (allocation-free once `out` has room: the fleet's story paths).
void percent_encode(std::string_view s, out_buffer& out);

}  // namespace tollgate
