#!/usr/bin/env python3
"""Closed-loop keep-alive MCP client for perf/gate/run: sends N POST /mcp tools/call
search_stories requests over one connection, one at a time, and checks every response
(HTTP 200, framing, JSON-RPC id, isError false, a payload with a total). Exits 1 on the first
wrong answer. `mcp_client.py healthz PORT` instead asks GET /healthz once and exits 0 on a 200
(the gate's start-up probe). Loopback only; standard library only."""
import json
import socket
import sys

QUERIES = ["rust", "linux kernel scheduler", '"the kernel"', "memory", "go security"]


def request_bytes(i, port, key):
    body = json.dumps({
        "jsonrpc": "2.0", "id": i, "method": "tools/call",
        "params": {"name": "search_stories",
                   "arguments": {"query": QUERIES[i % len(QUERIES)], "limit": 10}},
    }, separators=(",", ":")).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Accept: application/json, text/event-stream\r\n"
            "Content-Type: application/json\r\n"
            f"Authorization: Bearer {key}\r\n"
            "MCP-Protocol-Version: 2025-06-18\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body


def read_response(sock, buf):
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before a response head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None:
        raise RuntimeError("response without Content-Length: " + lines[0])
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed inside a response body")
        rest += chunk
    return status, rest[:length], rest[length:]


def healthz(port):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        status, _, _ = read_response(sock, b"")
        sock.close()
    except (OSError, RuntimeError, ValueError, IndexError):
        return 1
    return 0 if status == 200 else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "healthz":
        sys.exit(healthz(int(sys.argv[2])))
    if len(sys.argv) != 5:
        sys.exit("usage: mcp_client.py PORT KEY N FIRST_ID")
    port, key, n, first = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    for i in range(first, first + n):
        sock.sendall(request_bytes(i, port, key))
        status, body, buf = read_response(sock, buf)
        try:
            msg = json.loads(body)
            ok = (status == 200 and msg.get("id") == i and "result" in msg
                  and msg["result"].get("isError") is False
                  and "total" in json.loads(msg["result"]["content"][0]["text"]))
        except (ValueError, KeyError, IndexError, TypeError):
            ok = False
        if not ok:
            sys.exit(f"mcp_client: request {i}: wrong answer: HTTP {status}: {body[:300]!r}")
    if buf:
        sys.exit("mcp_client: unexpected bytes after the last response")
    sock.close()
    print(f"mcp_client: {n} requests answered correctly")


if __name__ == "__main__":
    main()
