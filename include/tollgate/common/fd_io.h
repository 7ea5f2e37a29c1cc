// Blocking writes to a file descriptor that finish the job: write(2) may write less than asked
// or be interrupted by a signal; write_all() retries until everything is written or a real
// error occurs. Thread-safe (no state); allocates nothing.
#pragma once

#include <cstddef>
#include <string_view>

namespace tollgate {

/// Writes all of `data` to `fd`, retrying short writes and EINTR. Returns the bytes written:
/// data.size() on success, fewer when write(2) failed (errno then says why).
size_t write_all(int fd, std::string_view data) noexcept;

}  // namespace tollgate
