// Helpers for the `tollgate stdio --remote URL` tests: the bridge launched by the real clients'
// StdioClientTransport or driven line by line, a free loopback port, a throwaway self-signed
// certificate, an HTTPS endpoint in front of a server, and a misbehaving HTTP server.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { BIN, StdioSession, tempDir } from './harness.mjs';

/** The bridge's arguments. */
export function bridgeArgs(url, extra = []) {
  return ['stdio', '--remote', url, ...extra];
}

/** A raw bridge session (send() resolves with the answer carrying the message's id). */
export function bridgeSession(url, key, extra = []) {
  return new StdioSession(null, key, { args: bridgeArgs(url, extra) });
}

/** The v1 SDK client connected through a bridge. Resolves {client, transport, stderr()}. */
export async function v1Bridge(url, key, extra = [], name = 'tollgate-it-remote') {
  const transport = new StdioClientTransport({
    command: BIN, args: bridgeArgs(url, extra), env: { TOLLGATE_API_KEY: key }, stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d) => { err += d; });
  const client = new Client({ name, version: '1.0.0' });
  await client.connect(transport, { timeout: 30000 });
  return { client, transport, stderr: () => err };
}

/** Closes a client and makes sure its bridge process is gone (it exits on EOF by itself). */
export async function closeBridge(b) {
  if (!b) return;
  const pid = b.transport?.pid;
  await b.client?.close().catch(() => {});
  if (pid) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* already exited */ }
  }
}

/** A loopback port nothing listens on (bound and released). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** A self-signed certificate for 127.0.0.1 made with the openssl CLI: {dir, key, cert} (paths),
 * or null when openssl is not on PATH. */
export function selfSignedCert() {
  const dir = tempDir('tollgate-tls-');
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
      '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'pipe' });
  } catch (e) {
    if (e.code === 'ENOENT') return null;
    throw e;
  }
  return { dir, key, cert };
}

/** An HTTPS endpoint on a free loopback port forwarding every request to `server` (plain
 * HTTP), with `tls` = {key, cert} paths. Resolves {url, close()}. */
export function httpsFront(server, tls) {
  return new Promise((resolve, reject) => {
    const agent = new http.Agent({ keepAlive: true });
    const front = https.createServer({ key: fs.readFileSync(tls.key), cert: fs.readFileSync(tls.cert) }, (req, res) => {
      const up = http.request({ host: '127.0.0.1', port: server.port, path: req.url, method: req.method, headers: req.headers, agent },
        (ur) => {
          res.writeHead(ur.statusCode, ur.headers);
          ur.pipe(res);
        });
      up.on('error', (e) => {
        if (!res.headersSent) res.writeHead(502, { 'Content-Type': 'text/plain' });
        res.end(`front: ${e.message}`);
      });
      req.pipe(up);
    });
    front.on('error', reject);
    // TLS handshakes the bridge gives up on (a certificate it refuses) are not this server's
    // errors to report.
    front.on('tlsClientError', () => {});
    front.listen(0, '127.0.0.1', () => {
      resolve({
        url: `https://127.0.0.1:${front.address().port}/mcp`,
        close: () => new Promise((r) => { agent.destroy(); front.closeAllConnections?.(); front.close(() => r()); }),
      });
    });
  });
}

/**
 * An HTTP server that misbehaves as told: set `.mode` to
 *   'ok'      202 to everything (so the start-up key check passes)
 *   '503'     503 with Retry-After: 7 and a text body
 *   '413'     413 with a text/plain body (a proxy's size limit)
 *   'garbage' 200 application/json whose body is not JSON
 *   'html'    200 text/html (a login page, a wrong URL)
 *   'reset'   the connection destroyed without an answer
 *   'hang'    no answer at all (the bridge's --timeout-ms ends the wait)
 * Resolves {url, port, close(), seen} (seen: requests received).
 */
export function faultyServer(mode = 'ok') {
  return new Promise((resolve, reject) => {
    const state = { mode, seen: 0 };
    const hung = new Set();
    const srv = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        state.seen++;
        switch (state.mode) {
          case '503':
            res.writeHead(503, { 'Content-Type': 'text/plain', 'Retry-After': '7' });
            res.end('upstream is down');
            return;
          case '413':
            res.writeHead(413, { 'Content-Type': 'text/plain' });
            res.end('request entity too large');
            return;
          case 'garbage':
            res.writeHead(200, { 'Content-Type': 'application/json' });
            res.end('{"jsonrpc":"2.0","id":');
            return;
          case 'html':
            res.writeHead(200, { 'Content-Type': 'text/html' });
            res.end('<html>sign in</html>');
            return;
          case 'reset':
            req.socket.destroy();
            return;
          case 'hang':
            hung.add(res);
            return;
          default:
            res.writeHead(202);
            res.end();
        }
      });
    });
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = srv.address().port;
      resolve({
        url: `http://127.0.0.1:${port}/mcp`,
        port,
        get seen() { return state.seen; },
        set mode(m) { state.mode = m; },
        get mode() { return state.mode; },
        close: () => new Promise((r) => { srv.closeAllConnections?.(); srv.close(() => r()); }),
      });
    });
  });
}
