// Incremental HTTP/1.1 response framing (see http_response.h).
#include "http_response.h"

#include <cstring>

#include "tollgate/http/response_head.h"

namespace tollgate::loadgen {
namespace {

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

}  // namespace

const char* frame_errc_name(frame_errc e) noexcept {
  switch (e) {
    case frame_errc::none:
      return "none";
    case frame_errc::bad_status_line:
      return "bad_status_line";
    case frame_errc::bad_header:
      return "bad_header";
    case frame_errc::bad_content_length:
      return "bad_content_length";
    case frame_errc::conflicting_framing:
      return "conflicting_framing";
    case frame_errc::bad_chunk:
      return "bad_chunk";
    case frame_errc::head_too_large:
      return "head_too_large";
    case frame_errc::body_too_large:
      return "body_too_large";
    case frame_errc::truncated:
      return "truncated";
  }
  return "unknown";
}

void response_parser::reset() noexcept {
  start_ = 0;
  scanned_ = 0;
  head_end_ = 0;
  head_ = response_head{};
  ct_off_ = 0;
  ct_len_ = 0;
  mode_ = body_mode::none;
  content_length_ = 0;
  cstate_ = chunk_state::size;
  cpos_ = 0;
  cleft_ = 0;
  decoded_.clear();
  body_ = {};
  consumed_ = 0;
  err_ = frame_errc::none;
}

frame_result response_parser::parse_head(const char* in, std::size_t n) {
  // 1. Find the blank line that ends the head, resuming where the last search stopped.
  for (;;) {
    std::size_t from = scanned_ > start_ + 3 ? scanned_ - 3 : start_;
    const char* p = nullptr;
    if (n > from) {
      p = static_cast<const char*>(memmem(in + from, n - from, "\r\n\r\n", 4));
    }
    if (p == nullptr) {
      scanned_ = n;
      if (n - start_ > max_head) {
        return fail(frame_errc::head_too_large);
      }
      return frame_result::incomplete;
    }
    std::size_t end = static_cast<std::size_t>(p - in) + 4;
    std::string_view block(in + start_, end - start_ - 2);  // keeps the last header's CRLF

    // 2. Status line and fields (one parser with the server's outbound client).
    tollgate::http::response_fields f;
    switch (tollgate::http::parse_response_fields(block, f)) {
      case tollgate::http::response_head_error::none:
        break;
      case tollgate::http::response_head_error::status_line:
        return fail(frame_errc::bad_status_line);
      case tollgate::http::response_head_error::field_line:
        return fail(frame_errc::bad_header);
      case tollgate::http::response_head_error::content_length:
        return fail(frame_errc::bad_content_length);
    }
    const int status = f.status;
    head_ = response_head{};
    head_.status = status;
    head_.minor_version = f.minor_version;
    head_.has_retry_after = f.has_retry_after;
    head_.close = f.close;
    ct_off_ = f.content_type.empty() ? 0 : static_cast<std::size_t>(f.content_type.data() - in);
    ct_len_ = f.content_type.size();
    const bool have_length = f.has_length;
    const bool chunked = f.chunked;
    const bool other_te = f.other_coding;
    const std::uint64_t length = f.content_length;

    // 3. Interim responses (100 Continue, 103 Early Hints) carry no body: skip them.
    if (status >= 100 && status < 200 && status != 101) {
      start_ = end;
      scanned_ = end;
      continue;
    }
    head_end_ = end;
    if ((chunked || other_te) && have_length) {
      return fail(frame_errc::conflicting_framing);
    }
    if (status == 204 || status == 304) {
      mode_ = body_mode::none;
    } else if (chunked) {
      mode_ = body_mode::chunked;
      cpos_ = end;
      cstate_ = chunk_state::size;
      decoded_.clear();
    } else if (have_length) {
      if (length > max_body) {
        return fail(frame_errc::body_too_large);
      }
      mode_ = body_mode::length;
      content_length_ = length;
    } else {
      mode_ = body_mode::until_close;
      head_.close = true;
    }
    return frame_result::complete;
  }
}

namespace {

// A chunk-size line without its CRLF: 1..15 hex digits, then nothing, a chunk extension
// (";...") or whitespace.
bool chunk_size(const char* line, std::size_t len, std::uint64_t& size) {
  size = 0;
  std::size_t i = 0;
  for (; i < len; i++) {
    int d = hex_digit(line[i]);
    if (d < 0) {
      break;
    }
    if (i + 1 > 15) {
      return false;
    }
    size = size * 16 + static_cast<std::uint64_t>(d);
  }
  return i > 0 && (i == len || line[i] == ';' || line[i] == ' ' || line[i] == '\t');
}

}  // namespace

// A state machine over the chunk framing: one case per state, kept together to be read as one.
frame_result response_parser::parse_chunked(const char* in, std::size_t n) {
  for (;;) {
    switch (cstate_) {
      case chunk_state::size: {
        const char* p =
            cpos_ < n ? static_cast<const char*>(memchr(in + cpos_, '\n', n - cpos_)) : nullptr;
        if (p == nullptr) {
          if (n - cpos_ > 1024) {
            return fail(frame_errc::bad_chunk);
          }
          return frame_result::incomplete;
        }
        std::size_t lf = static_cast<std::size_t>(p - in);
        if (lf == cpos_ || in[lf - 1] != '\r') {
          return fail(frame_errc::bad_chunk);
        }
        std::uint64_t size = 0;
        if (!chunk_size(in + cpos_, lf - 1 - cpos_, size)) {
          return fail(frame_errc::bad_chunk);
        }
        cpos_ = lf + 1;
        if (size == 0) {
          cstate_ = chunk_state::trailer;
        } else {
          if (decoded_.size() + size > max_body) {
            return fail(frame_errc::body_too_large);
          }
          cleft_ = size;
          cstate_ = chunk_state::data;
        }
        break;
      }
      case chunk_state::data: {
        std::size_t avail = n - cpos_;
        std::size_t take = avail < cleft_ ? avail : static_cast<std::size_t>(cleft_);
        decoded_.insert(decoded_.end(), in + cpos_, in + cpos_ + take);
        cpos_ += take;
        cleft_ -= take;
        if (cleft_ > 0) {
          return frame_result::incomplete;
        }
        cstate_ = chunk_state::data_crlf;
        break;
      }
      case chunk_state::data_crlf: {
        if (n - cpos_ < 2) {
          return frame_result::incomplete;
        }
        if (in[cpos_] != '\r' || in[cpos_ + 1] != '\n') {
          return fail(frame_errc::bad_chunk);
        }
        cpos_ += 2;
        cstate_ = chunk_state::size;
        break;
      }
      case chunk_state::trailer: {
        // Trailer fields end with an empty line; usually there are none.
        const char* p =
            cpos_ < n ? static_cast<const char*>(memchr(in + cpos_, '\n', n - cpos_)) : nullptr;
        if (p == nullptr) {
          if (n - cpos_ > max_head) {
            return fail(frame_errc::head_too_large);
          }
          return frame_result::incomplete;
        }
        std::size_t lf = static_cast<std::size_t>(p - in);
        if (lf == cpos_ || in[lf - 1] != '\r') {
          return fail(frame_errc::bad_chunk);
        }
        bool empty = lf == cpos_ + 1;
        cpos_ = lf + 1;
        if (empty) {
          body_ = std::string_view(decoded_.data(), decoded_.size());
          consumed_ = cpos_;
          return frame_result::complete;
        }
        break;
      }
    }
  }
}

frame_result response_parser::parse(const char* in, std::size_t n, bool eof) {
  if (err_ != frame_errc::none) {
    return frame_result::error;
  }
  if (head_end_ == 0) {
    frame_result r = parse_head(in, n);
    if (r != frame_result::complete) {
      if (r == frame_result::incomplete && eof) {
        return fail(frame_errc::truncated);
      }
      return r;
    }
  }
  // The buffer may have moved since the head was parsed: views are rebuilt from offsets.
  head_.content_type = std::string_view(in + ct_off_, ct_len_);
  switch (mode_) {
    case body_mode::none:
      body_ = {};
      consumed_ = head_end_;
      return frame_result::complete;
    case body_mode::length:
      if (n - head_end_ < content_length_) {
        if (eof) {
          return fail(frame_errc::truncated);
        }
        return frame_result::incomplete;
      }
      body_ = std::string_view(in + head_end_, static_cast<std::size_t>(content_length_));
      consumed_ = head_end_ + static_cast<std::size_t>(content_length_);
      return frame_result::complete;
    case body_mode::chunked: {
      frame_result r = parse_chunked(in, n);
      if (r == frame_result::incomplete && eof) {
        return fail(frame_errc::truncated);
      }
      return r;
    }
    case body_mode::until_close:
      if (n - head_end_ > max_body) {
        return fail(frame_errc::body_too_large);
      }
      if (!eof) {
        return frame_result::incomplete;
      }
      body_ = std::string_view(in + head_end_, n - head_end_);
      consumed_ = n;
      return frame_result::complete;
  }
  return frame_result::incomplete;
}

}  // namespace tollgate::loadgen
