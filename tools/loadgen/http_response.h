// Incremental HTTP/1.1 response framing for the load generator: finds where one response
// ends in a connection's receive buffer (Content-Length, chunked, or until close), decodes a
// chunked body, and pulls out the few headers the checks need. Resumable: call parse() again
// with the same buffer grown by the next read; work already done is not repeated for the
// header block and chunked bodies.
//
// Core-local: one parser per connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tollgate::loadgen {

/// Why a response could not be framed. A framing error poisons the connection.
enum class frame_errc : std::uint8_t {
  none,
  bad_status_line,      ///< not "HTTP/1.x NNN ..."
  bad_header,           ///< a header line without a colon, or a bare CR/LF inside it
  bad_content_length,   ///< not a decimal number, or two different values
  conflicting_framing,  ///< both Content-Length and Transfer-Encoding
  bad_chunk,            ///< a malformed chunk size line or missing CRLF after chunk data
  head_too_large,       ///< header block above the limit
  body_too_large,       ///< body above the limit
  truncated,            ///< the peer closed before the response was complete
};

/// A short stable name for each frame_errc ("bad_status_line", ...).
const char* frame_errc_name(frame_errc e) noexcept;

enum class frame_result : std::uint8_t { complete, incomplete, error };

/// What the checks need from a response head. Views point into the buffer last passed to
/// response_parser::parse().
struct response_head {
  int status = 0;
  int minor_version = 1;
  bool close = false;  ///< the server will close after this response
  bool has_retry_after = false;
  std::string_view content_type;  ///< empty when absent
};

/// Frames one response at a time. Core-local.
class response_parser {
 public:
  static constexpr std::size_t max_head = 64 * 1024;
  static constexpr std::size_t max_body = 64 * 1024 * 1024;

  /// Tries to complete the response that starts at in[0]. `eof` says the peer closed, so a
  /// body without length ends here (the load generator never sends HEAD).
  /// On complete: head(), body() and consumed() describe it until reset(). On error: error().
  frame_result parse(const char* in, std::size_t n, bool eof);

  /// Call after a complete response has been used and its bytes consumed from the buffer.
  void reset() noexcept;

  const response_head& head() const noexcept { return head_; }
  /// The body, decoded if chunked. Valid until the next parse()/reset() or buffer change.
  std::string_view body() const noexcept { return body_; }
  /// Bytes of input the response (including interim 1xx responses) occupies.
  std::size_t consumed() const noexcept { return consumed_; }
  frame_errc error() const noexcept { return err_; }

 private:
  enum class body_mode : std::uint8_t { none, length, chunked, until_close };
  enum class chunk_state : std::uint8_t { size, data, data_crlf, trailer };

  frame_result parse_head(const char* in, std::size_t n);
  frame_result parse_chunked(const char* in, std::size_t n);
  frame_result fail(frame_errc e) noexcept {
    err_ = e;
    return frame_result::error;
  }

  // Head state.
  std::size_t start_ = 0;     ///< offset of the current (non-interim) response
  std::size_t scanned_ = 0;   ///< bytes already searched for the end of the head
  std::size_t head_end_ = 0;  ///< offset just past the blank line; 0 while incomplete
  response_head head_;
  std::size_t ct_off_ = 0;  ///< Content-Type value as an offset: the buffer may move
  std::size_t ct_len_ = 0;
  body_mode mode_ = body_mode::none;
  std::uint64_t content_length_ = 0;
  // Chunked state.
  chunk_state cstate_ = chunk_state::size;
  std::size_t cpos_ = 0;       ///< next input offset to decode
  std::uint64_t cleft_ = 0;    ///< bytes left in the current chunk
  std::vector<char> decoded_;  ///< chunked body, capacity kept across responses
  // Result.
  std::string_view body_;
  std::size_t consumed_ = 0;
  frame_errc err_ = frame_errc::none;
};

}  // namespace tollgate::loadgen
