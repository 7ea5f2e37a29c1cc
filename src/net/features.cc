// io_uring feature probe: setup flags by trial, opcodes via io_uring_get_probe, and the two
// multishot variants and provided buffer rings by trial on a loopback socket pair (the opcode
// probe cannot see flags such as IORING_ACCEPT_MULTISHOT).
#include "tollgate/net/features.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tollgate::net {
namespace {

bool try_setup(unsigned flags) {
  io_uring ring{};
  io_uring_params p{};
  p.flags = flags;
  if (io_uring_queue_init_params(8, &ring, &p) < 0) {
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

// Waits up to one second for one CQE; copies it out and marks it seen.
bool wait_one(io_uring& ring, io_uring_cqe& out) {
  __kernel_timespec ts{};
  ts.tv_sec = 1;
  io_uring_cqe* cqe = nullptr;
  if (io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, nullptr) < 0 || cqe == nullptr) {
    return false;
  }
  out = *cqe;
  io_uring_cqe_seen(&ring, cqe);
  return true;
}

// A connected loopback TCP pair plus its listener, closed on scope exit.
struct loopback_pair {
  int listener = -1;
  int client = -1;
  ~loopback_pair() {
    if (client >= 0) {
      ::close(client);
    }
    if (listener >= 0) {
      ::close(listener);
    }
  }
  bool open() {
    listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) {
      return false;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener, 4) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return false;
    }
    client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return client >= 0 && ::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
};

void probe_ops(io_uring& ring, features& f) {
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) {
    f.missing_op = "IORING_REGISTER_PROBE";
    return;
  }
  struct {
    int op;
    const char* name;
  } const needed[] = {{IORING_OP_ACCEPT, "IORING_OP_ACCEPT"},
                      {IORING_OP_RECV, "IORING_OP_RECV"},
                      {IORING_OP_SEND, "IORING_OP_SEND"},
                      {IORING_OP_READ, "IORING_OP_READ"},
                      {IORING_OP_ASYNC_CANCEL, "IORING_OP_ASYNC_CANCEL"}};
  f.ops_basic = true;
  for (const auto& n : needed) {
    if (!io_uring_opcode_supported(probe, n.op)) {
      f.ops_basic = false;
      f.missing_op = n.name;
      break;
    }
  }
  io_uring_free_probe(probe);
}

// Registers a small buffer ring, then tries multishot accept and multishot recv on loopback.
void probe_multishot(io_uring& ring, features& f) {
  constexpr unsigned kEntries = 8;
  constexpr unsigned kBufSize = 64;
  const size_t ring_bytes = kEntries * sizeof(io_uring_buf);
  void* mem = ::mmap(nullptr, ring_bytes + kEntries * kBufSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    io_uring_queue_exit(&ring);
    return;
  }
  auto* br = static_cast<io_uring_buf_ring*>(mem);
  char* bufs = static_cast<char*>(mem) + ring_bytes;
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uintptr_t>(br);
  reg.ring_entries = kEntries;
  reg.bgid = 0;
  if (io_uring_register_buf_ring(&ring, &reg, 0) == 0) {
    f.buf_ring = true;
    io_uring_buf_ring_init(br);
    for (unsigned i = 0; i < kEntries; ++i) {
      io_uring_buf_ring_add(br, bufs + i * kBufSize, kBufSize, static_cast<unsigned short>(i),
                            io_uring_buf_ring_mask(kEntries), static_cast<int>(i));
    }
    io_uring_buf_ring_advance(br, kEntries);
  }

  loopback_pair pair;
  if (pair.open()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_multishot_accept(sqe, pair.listener, nullptr, nullptr, SOCK_CLOEXEC);
    sqe->user_data = 1;
    io_uring_cqe cqe{};
    int server_fd = -1;
    if (wait_one(ring, cqe)) {
      if (cqe.res >= 0) {
        server_fd = cqe.res;
        f.multishot_accept = (cqe.flags & IORING_CQE_F_MORE) != 0;
      }
    }
    if (server_fd < 0) {  // single-shot accept to get the server end for the recv probe
      sqe = io_uring_get_sqe(&ring);
      io_uring_prep_accept(sqe, pair.listener, nullptr, nullptr, SOCK_CLOEXEC);
      sqe->user_data = 2;
      if (wait_one(ring, cqe) && cqe.res >= 0) {
        server_fd = cqe.res;
      }
    }
    if (server_fd >= 0 && f.buf_ring) {
      const char byte = 'x';
      if (::send(pair.client, &byte, 1, MSG_NOSIGNAL) == 1) {
        sqe = io_uring_get_sqe(&ring);
        io_uring_prep_recv_multishot(sqe, server_fd, nullptr, 0, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = 0;
        sqe->user_data = 3;
        // Skip any late CQE of the accept; the recv's is the one with user_data 3.
        for (int i = 0; i < 4 && wait_one(ring, cqe); ++i) {
          if (cqe.user_data == 3) {
            f.multishot_recv = cqe.res == 1 && (cqe.flags & IORING_CQE_F_MORE) != 0;
            break;
          }
        }
      }
    }
    if (server_fd >= 0) {
      ::close(server_fd);
    }
  }
  // Tearing the ring down cancels whatever is still armed; unmap only after that.
  io_uring_queue_exit(&ring);
  ::munmap(mem, ring_bytes + kEntries * kBufSize);
}

features do_probe() {
  features f;
  utsname u{};
  if (::uname(&u) == 0) {
    f.kernel = u.release;
  }
  io_uring ring{};
  int rc = io_uring_queue_init(16, &ring, 0);
  if (rc < 0) {
    f.io_uring_error = std::strerror(-rc);
    return f;
  }
  f.io_uring = true;
  probe_ops(ring, f);
  f.coop_taskrun = try_setup(IORING_SETUP_COOP_TASKRUN);
  f.single_issuer = try_setup(IORING_SETUP_SINGLE_ISSUER);
  f.defer_taskrun =
      f.single_issuer && try_setup(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
  f.submit_all = try_setup(IORING_SETUP_SUBMIT_ALL);
  probe_multishot(ring, f);  // tears the ring down
  return f;
}

}  // namespace

std::string features::unusable_reason() const {
  if (!io_uring) {
    return fmt::format(
        "io_uring is not available ({}); tollgate needs io_uring on Linux 5.19 or later (check "
        "the kernel.io_uring_disabled sysctl and seccomp profiles); kernel is {}",
        io_uring_error, kernel);
  }
  if (!ops_basic) {
    return fmt::format("io_uring lacks {} (needs Linux 5.6 or later); kernel is {}", missing_op,
                       kernel);
  }
  if (!buf_ring) {
    return fmt::format(
        "io_uring lacks provided buffer rings (IORING_REGISTER_PBUF_RING, needs Linux 5.19 or "
        "later); kernel is {}",
        kernel);
  }
  return {};
}

const features& probe_features() {
  static const features f = do_probe();
  return f;
}

}  // namespace tollgate::net
