#!/usr/bin/env python3
"""TLS client helper for perf/tls/compare-tls.sh (issue 32): handshakes per second and
memory per idle TLS connection. Standard library only (ssl is CPython's OpenSSL binding).

  tls-client.py handshakes HOST PORT --cafile F [--resume] [--seconds S]
      Closed loop, one connection at a time: TCP connect, TLS handshake, close. With --resume
      every handshake offers the session (ticket) a first connection received after one
      request, so the server resumes instead of signing. Prints one JSON line:
      {"connections", "resumed", "seconds", "cipher", "version"}.
  tls-client.py idle HOST PORT --cafile F --pid PID [--count N] [--path P]
      Reads VmRSS of PID, opens N connections (handshake + one GET of P, the answer read, the
      connection left open, idle in keep-alive), waits 1 s, reads VmRSS again, closes them all.
      Prints {"count", "opened", "rss_before_kb", "rss_after_kb", "kb_per_conn"}.

The cipher suite is whatever the OpenSSL configuration allows: compare-tls.sh points
OPENSSL_CONF at a file whose system_default section allows only TLS 1.3 TLS_AES_128_GCM_SHA256.
"""
import argparse
import json
import resource
import socket
import ssl
import sys
import time


def make_ctx(cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def connect(ctx, host, port, session=None):
    raw = socket.create_connection((host, port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return ctx.wrap_socket(raw, server_hostname="localhost", session=session)


def get(sock, path):
    """One keep-alive GET; reads until the answer's head and Content-Length body arrived."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the answer's head")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the answer's body")
        body += chunk
    return head.split(b"\r\n", 1)[0]


def handshakes(a):
    ctx = make_ctx(a.cafile)
    session = None
    if a.resume:
        s = connect(ctx, a.host, a.port)
        get(s, "/")  # TLS 1.3 tickets arrive after the handshake: read an answer to get one
        session = s.session
        s.close()
    n = resumed = 0
    cipher = version = ""
    t0 = time.monotonic()
    deadline = t0 + a.seconds
    while time.monotonic() < deadline:
        s = connect(ctx, a.host, a.port, session)
        n += 1
        resumed += 1 if s.session_reused else 0
        if n == 1:
            cipher, version = s.cipher()[0], s.version()
        s.close()
    elapsed = time.monotonic() - t0
    print(json.dumps({"connections": n, "resumed": resumed, "seconds": round(elapsed, 3),
                      "cipher": cipher, "version": version}))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def idle(a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.count + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    ctx = make_ctx(a.cafile)
    time.sleep(0.5)
    before = rss_kb(a.pid)
    socks = []
    try:
        for _ in range(a.count):
            s = connect(ctx, a.host, a.port)
            status = get(s, a.path)
            if b" 200 " not in status + b" ":
                raise RuntimeError(f"unexpected answer {status!r}")
            socks.append(s)
    except (OSError, RuntimeError) as e:
        print(f"tls-client: stopped after {len(socks)} connections: {e}", file=sys.stderr)
    time.sleep(1.0)
    after = rss_kb(a.pid)
    opened = len(socks)
    for s in socks:
        s.close()
    per = (after - before) / opened if opened else 0.0
    print(json.dumps({"count": a.count, "opened": opened, "rss_before_kb": before,
                      "rss_after_kb": after, "kb_per_conn": round(per, 2)}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("handshakes")
    i = sub.add_parser("idle")
    for q in (h, i):
        q.add_argument("host")
        q.add_argument("port", type=int)
        q.add_argument("--cafile", required=True)
    h.add_argument("--resume", action="store_true")
    h.add_argument("--seconds", type=float, default=5.0)
    i.add_argument("--pid", type=int, required=True)
    i.add_argument("--count", type=int, default=2000)
    i.add_argument("--path", default="/healthz")
    a = p.parse_args()
    handshakes(a) if a.mode == "handshakes" else idle(a)


if __name__ == "__main__":
    main()
