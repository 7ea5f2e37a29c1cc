// Percent-decoding (RFC 3986 §2.1) shared by the REST query-string parser and the shard node's
// story paths.
#pragma once

#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate {

/// The value of one hexadecimal digit, or -1.
int hex_digit_value(char c) noexcept;

/// Appends `s` to `out` with every %XX decoded; with `plus_is_space` (query strings, form
/// encoding) '+' becomes a space, otherwise (paths) it stays. False on a malformed escape
/// (`out` then holds a partial result).
bool percent_decode(std::string_view s, out_buffer& out, bool plus_is_space);

}  // namespace tollgate
