// Verifies the engine's own HTTPS listener (issue 32) against the real binary and real clients:
// curl and the official MCP SDK client over HTTPS (its CA given by NODE_EXTRA_CA_CERTS), the
// stdio bridge with --cacert, TLS 1.0/1.1 refused, a non-TLS byte stream and a truncated
// handshake closed while established connections keep being served, a certificate reload
// (SIGHUP) under load with no failed request, a bad pair that changes nothing (SIGHUP and
// POST /admin/reload), the start-up checks (missing, mismatched, expired pair: exit 2 naming
// the file), /metrics, resumption by ticket and the access log. Certificates are ECDSA P-256,
// made by openssl in a temp dir per run (never committed).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { start, cleanup, runCli, eventually, tempDir, findStory, restGet, request } from './harness.mjs';
import { v1Bridge, closeBridge } from './remote_util.mjs';
import { successText } from './common.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const haveOpenssl = spawnSync('openssl', ['version']).status === 0;
const haveCurl = spawnSync('curl', ['--version']).status === 0;

let dir;       // temp dir of this run's certificates
let server;    // the HTTPS-enabled server
let tlsPort;
let pair;      // the pair in use: {cert, key} (files the server was started with)
let access;    // access log path
let adminUrl;  // the admin listener (/metrics, POST /admin/reload)

/** A self-signed ECDSA P-256 pair for 127.0.0.1 under `dir`/name-{cert,key}.pem. */
function makePair(name, { days = 2 } = {}) {
  const key = path.join(dir, `${name}-key.pem`);
  const cert = path.join(dir, `${name}-cert.pem`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-keyout', key, '-out', cert, '-days', String(days), '-subj', `/CN=127.0.0.1/O=${name}`,
    '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'pipe' });
  return { cert, key };
}

/** A pair whose certificate expired in 2020 (openssl ca with explicit dates). */
function expiredPair() {
  const d = path.join(dir, 'ca');
  fs.mkdirSync(d, { recursive: true });
  const key = path.join(d, 'key.pem');
  const csr = path.join(d, 'req.csr');
  const cert = path.join(d, 'cert.pem');
  execFileSync('openssl', ['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-keyout', key, '-out', csr, '-subj', '/CN=127.0.0.1'], { stdio: 'pipe' });
  fs.writeFileSync(path.join(d, 'index.txt'), '');
  fs.writeFileSync(path.join(d, 'serial'), '01\n');
  fs.writeFileSync(path.join(d, 'ca.cnf'), `[ca]\ndefault_ca = d\n[d]\ndatabase = ${d}/index.txt\n` +
    `new_certs_dir = ${d}\nserial = ${d}/serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n`);
  execFileSync('openssl', ['ca', '-batch', '-config', path.join(d, 'ca.cnf'), '-selfsign', '-keyfile', key, '-in', csr,
    '-out', cert, '-startdate', '20200101000000Z', '-enddate', '20200102000000Z'], { stdio: 'pipe' });
  return { cert, key };
}

/** One HTTPS request trusting `ca` (PEM path); resolves {status, body, cert (peer's DER fingerprint), protocol}. */
function httpsRequest(port, p, { method = 'GET', headers = { Authorization: `Bearer ${server.keys.main}` }, body, agent, ca = pair.cert, timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, path: p, method, headers, agent, ca: fs.readFileSync(ca) }, (res) => {
      const chunks = [];
      const sock = res.socket;
      const fp = sock.getPeerCertificate?.()?.fingerprint256;
      const protocol = sock.getProtocol?.();
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), fp, protocol }));
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${p} timed out`)));
    req.on('error', reject);
    if (body !== undefined) req.end(body); else req.end();
  });
}

function fingerprint(certPath) {
  return new X509Certificate(fs.readFileSync(certPath)).fingerprint256;
}

/** Reads /metrics (admin listener). */
async function metrics() {
  const r = await request(`${adminUrl}/metrics`);
  assert.equal(r.status, 200);
  return r.body;
}
function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.slice(name.length + 1)) : NaN;
}

/** Resolves once `sock` is closed by the server; rejects after timeoutMs. */
function closedWithin(sock, timeoutMs) {
  return new Promise((resolve, reject) => {
    if (sock.destroyed) { resolve(); return; }
    const t = setTimeout(() => reject(new Error(`socket still open after ${timeoutMs} ms`)), timeoutMs);
    sock.on('close', () => { clearTimeout(t); resolve(); });
    sock.on('error', () => {});
  });
}

before(async () => {
  if (!haveOpenssl) return;
  dir = tempDir('tollgate-https-');
  const first = makePair('first');
  // The server reads these two paths on every reload; tests swap their contents.
  pair = { cert: path.join(dir, 'live-cert.pem'), key: path.join(dir, 'live-key.pem') };
  fs.copyFileSync(first.cert, pair.cert);
  fs.copyFileSync(first.key, pair.key);
  access = path.join(dir, 'access.log');
  server = await start({
    keys: { main: { account: 'https-main', plan: 'big' } },
    extraConfig: `[server]\nheader_timeout_ms = 1500\n[log]\naccess = ${JSON.stringify(access)}\n`,
    extraArgs: ['--tls-listen', '127.0.0.1:0', '--tls-cert', pair.cert, '--tls-key', pair.key,
      '--admin-listen', '127.0.0.1:0'],
  });
  const m = await eventually(() => /listening on https:\/\/127\.0\.0\.1:(\d+)/.exec(server.stderr()), 10000, 'the https line');
  tlsPort = Number(m[1]);
  const a = /admin .* on (http:\/\/127\.0\.0\.1:\d+)/.exec(server.stderr());
  assert.ok(a, server.stderr());
  adminUrl = a[1];
});

after(async () => {
  if (server) {
    await server.stop();
    cleanup(server);
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('curl over HTTPS: /mcp initialize and REST search answer as over plain HTTP', { skip: !haveOpenssl || !haveCurl }, async () => {
  const key = server.keys.main;
  const init = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {
    protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } } });
  const mcp = spawnSync('curl', ['-sS', '--cacert', pair.cert, '-H', `Authorization: Bearer ${key}`,
    '-H', 'Content-Type: application/json', '-H', 'Accept: application/json, text/event-stream',
    '--data', init, `https://127.0.0.1:${tlsPort}/mcp`], { encoding: 'utf8', timeout: 20000 });
  assert.equal(mcp.status, 0, mcp.stderr);
  const j = JSON.parse(mcp.stdout);
  assert.equal(j.result.serverInfo.name.length > 0, true, mcp.stdout);

  const { query } = await findStory(server, key);
  const rest = spawnSync('curl', ['-sS', '--tlsv1.3', '--cacert', pair.cert, '-H', `Authorization: Bearer ${key}`,
    `https://127.0.0.1:${tlsPort}/v1/stories?q=${encodeURIComponent(query)}`], { encoding: 'utf8', timeout: 20000 });
  assert.equal(rest.status, 0, rest.stderr);
  const plain = await restGet(server, `/v1/stories?q=${encodeURIComponent(query)}`, { key });
  assert.equal(rest.stdout, plain.body, 'the same body over HTTPS and HTTP');
  // TLS 1.2 (ECDHE + AEAD) works too.
  const v12 = spawnSync('curl', ['-sS', '--tlsv1.2', '--tls-max', '1.2', '--cacert', pair.cert, '-o', '/dev/null',
    '-w', '%{http_code}', '-H', `Authorization: Bearer ${server.keys.main}`, `https://127.0.0.1:${tlsPort}/v1/usage`], { encoding: 'utf8', timeout: 20000 });
  assert.equal(v12.stdout, '200', v12.stderr);
});

test('the official MCP SDK client over HTTPS (NODE_EXTRA_CA_CERTS) calls a tool', { skip: !haveOpenssl }, async () => {
  const { query } = await findStory(server, server.keys.main);
  // NODE_EXTRA_CA_CERTS is read when node starts: the client runs in a child node process.
  const script = `
    import { Client } from '@modelcontextprotocol/sdk/client/index.js';
    import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
    const t = new StreamableHTTPClientTransport(new URL(process.env.URL),
      { requestInit: { headers: { Authorization: 'Bearer ' + process.env.KEY } } });
    const c = new Client({ name: 'https-it', version: '1.0.0' });
    await c.connect(t);
    const r = await c.callTool({ name: 'search_stories', arguments: { query: process.env.Q } });
    process.stdout.write(JSON.stringify(r));
    await c.close();`;
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: HERE, encoding: 'utf8', timeout: 60000,
    env: { ...process.env, NODE_EXTRA_CA_CERTS: pair.cert, URL: `https://127.0.0.1:${tlsPort}/mcp`, KEY: server.keys.main, Q: query },
  });
  assert.equal(child.status, 0, child.stderr);
  const text = successText(JSON.parse(child.stdout));
  const rest = await restGet(server, `/v1/stories?q=${encodeURIComponent(query)}`, { key: server.keys.main });
  assert.equal(text, rest.body);
});

test('tollgate stdio --remote https://... --cacert: the bridge against the HTTPS listener', { skip: !haveOpenssl }, async () => {
  const b = await v1Bridge(`https://127.0.0.1:${tlsPort}/mcp`, server.keys.main, ['--cacert', pair.cert]);
  try {
    const { query } = await findStory(server, server.keys.main);
    const text = successText(await b.client.callTool({ name: 'search_stories', arguments: { query } }));
    const rest = await restGet(server, `/v1/stories?q=${encodeURIComponent(query)}`, { key: server.keys.main });
    assert.equal(text, rest.body);
  } finally {
    await closeBridge(b);
  }
});

test('TLS 1.0 and 1.1 are refused (protocol_version), the server goes on', { skip: !haveOpenssl }, async () => {
  const before = await metrics();
  for (const v of ['-tls1', '-tls1_1']) {
    const r = spawnSync('openssl', ['s_client', '-connect', `127.0.0.1:${tlsPort}`, v, '-cipher', 'DEFAULT@SECLEVEL=0'],
      { input: '', encoding: 'utf8', timeout: 15000 });
    assert.notEqual(r.status, 0, `${v} must fail: ${r.stdout}`);
    assert.match(r.stderr, /alert protocol version/, r.stderr);
  }
  const now = await metrics();
  const name = 'tollgate_tls_handshakes_failed_total{reason="protocol_version"}';
  assert.ok(metric(now, name) >= metric(before, name) + 2, now);
  const ok = await httpsRequest(tlsPort, '/v1/usage');
  assert.equal(ok.status, 200);
});

test('a non-TLS byte stream and a truncated handshake are closed; an established connection is served throughout', { skip: !haveOpenssl }, async () => {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: fs.readFileSync(pair.cert) });
  const first = await httpsRequest(tlsPort, '/v1/usage', { agent });
  assert.equal(first.status, 200);

  // Plain HTTP to the TLS port.
  const plain = net.connect(tlsPort, '127.0.0.1');
  plain.on('error', () => {});
  plain.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  await closedWithin(plain, 5000);
  // Random garbage.
  const junk = net.connect(tlsPort, '127.0.0.1');
  junk.on('error', () => {});
  junk.write(Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) & 0xff)));
  await closedWithin(junk, 5000);
  // A ClientHello cut short: the header timeout (1.5 s here) reaps it.
  const hello = await captureClientHello();
  const cut = net.connect(tlsPort, '127.0.0.1');
  cut.on('error', () => {});
  cut.write(hello.subarray(0, Math.floor(hello.length / 2)));
  const t0 = Date.now();
  // Meanwhile the established connection is answered.
  const mid = await httpsRequest(tlsPort, '/v1/usage', { agent });
  assert.equal(mid.status, 200);
  await closedWithin(cut, 6000);
  assert.ok(Date.now() - t0 >= 1000, 'reaped by the header timeout, not before');
  // A handshake that stalls after connecting (no byte at all) goes the same way.
  const silent = net.connect(tlsPort, '127.0.0.1');
  silent.on('error', () => {});
  await closedWithin(silent, 6000);

  const last = await httpsRequest(tlsPort, '/v1/usage', { agent });
  assert.equal(last.status, 200);
  agent.destroy();
  const m = await metrics();
  assert.ok(metric(m, 'tollgate_tls_handshakes_failed_total{reason="not_tls"}') >= 1, m);
  assert.ok(metric(m, 'tollgate_tls_handshakes_failed_total{reason="incomplete"}') >= 2, m);
});

/** The bytes of a real ClientHello (a local TCP server records what node's TLS client sends). */
function captureClientHello() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer((s) => {
      s.once('data', (d) => { resolve(d); s.destroy(); srv.close(); });
    });
    srv.listen(0, '127.0.0.1', () => {
      const c = tls.connect({ host: '127.0.0.1', port: srv.address().port, rejectUnauthorized: false });
      c.on('error', () => {});
    });
    srv.on('error', reject);
  });
}

test('reload under load: SIGHUP with a new pair, no request fails, new connections see the new certificate', { skip: !haveOpenssl }, async () => {
  const oldFp = fingerprint(pair.cert);
  const second = makePair('second');
  const newFp = fingerprint(second.cert);
  assert.notEqual(oldFp, newFp);
  // Both certificates are trusted by the clients while the pair changes.
  const bundle = path.join(dir, 'both.pem');
  fs.writeFileSync(bundle, fs.readFileSync(pair.cert, 'utf8') + fs.readFileSync(second.cert, 'utf8'));
  const keep = new https.Agent({ keepAlive: true, maxSockets: 4, ca: fs.readFileSync(bundle) });
  let stop = false;
  let ok = 0;
  const failures = [];
  const seen = new Set();
  const worker = async (fresh) => {
    while (!stop) {
      try {
        const r = await httpsRequest(tlsPort, `/v1/stories?q=the&limit=1`, {
          headers: { Authorization: `Bearer ${server.keys.main}` }, ca: bundle,
          agent: fresh ? new https.Agent({ keepAlive: false, ca: fs.readFileSync(bundle) }) : keep,
        });
        if (r.status !== 200) failures.push(`status ${r.status}`);
        else ok++;
        if (fresh && r.fp) seen.add(r.fp);
      } catch (e) {
        failures.push(e.message);
      }
    }
  };
  const workers = [worker(false), worker(false), worker(true), worker(true)];
  await new Promise((r) => setTimeout(r, 700));
  fs.copyFileSync(second.key, pair.key + '.tmp');
  fs.copyFileSync(second.cert, pair.cert + '.tmp');
  fs.renameSync(pair.key + '.tmp', pair.key);
  fs.renameSync(pair.cert + '.tmp', pair.cert);
  server.reload();
  await eventually(() => /SIGHUP: reloaded: .*TLS certificate/.test(server.stderr()), 5000, 'the reload line');
  await new Promise((r) => setTimeout(r, 700));
  stop = true;
  await Promise.all(workers);
  keep.destroy();
  assert.deepEqual(failures, [], `${failures.length} request(s) failed`);
  assert.ok(ok > 20, `requests flowed (${ok})`);
  assert.ok(seen.has(newFp), 'new connections see the new certificate');
  const after = await httpsRequest(tlsPort, '/v1/usage', { ca: second.cert });
  assert.equal(after.fp, newFp);

  // A pair that does not match changes nothing and says why.
  const third = makePair('third');
  fs.copyFileSync(third.key, pair.key);  // the key of another certificate
  server.reload();
  await eventually(() => /SIGHUP: nothing reloaded.*does not match certificate/.test(server.stderr()), 5000, 'the refusal');
  const still = await httpsRequest(tlsPort, '/v1/usage', { ca: second.cert });
  assert.equal(still.fp, newFp, 'the previous pair stays in force');
  // POST /admin/reload says the same in its answer, then takes the pair once it matches.
  const refused = await request(`${adminUrl}/admin/reload`, { method: 'POST' });
  assert.equal(refused.status, 422, refused.body);
  assert.match(JSON.parse(refused.body).message, /does not match certificate/);
  fs.copyFileSync(second.key, pair.key);
  const taken = await request(`${adminUrl}/admin/reload`, { method: 'POST' });
  assert.equal(taken.status, 200, taken.body);
  assert.equal((await httpsRequest(tlsPort, '/v1/usage', { ca: second.cert })).fp, newFp);
  const m = await metrics();
  assert.ok(metric(m, 'tollgate_tls_reloads_total') >= 1, m);
});

test('/metrics counts handshakes and TLS connections; the access log names the TLS version', { skip: !haveOpenssl }, async () => {
  const r = await httpsRequest(tlsPort, '/v1/stories?q=the&limit=1', { headers: { Authorization: `Bearer ${server.keys.main}` }, ca: pair.cert });
  assert.equal(r.status, 200);
  assert.equal(r.protocol, 'TLSv1.3');
  const m = await metrics();
  assert.ok(metric(m, 'tollgate_tls_handshakes_total{kind="full"}') >= 1, m);
  assert.ok(metric(m, 'tollgate_tls_protocol_total{version="TLSv1.3"}') >= 1, m);
  assert.ok(metric(m, 'tollgate_tls_connections_open') >= 0, m);
  assert.match(m, /tollgate_tls_handshakes_total\{kind="resumed"\} \d+/);
  await eventually(() => fs.existsSync(access) && /"tls":"TLSv1\.3"/.test(fs.readFileSync(access, 'utf8')), 5000, 'a TLS line in the access log');
  // Resumption with a ticket from an earlier connection.
  const s1 = spawnSync('openssl', ['s_client', '-ign_eof', '-connect', `127.0.0.1:${tlsPort}`, '-sess_out', path.join(dir, 'sess.pem')],
    { input: `GET /v1/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.keys.main}\r\nConnection: close\r\n\r\n`, encoding: 'utf8', timeout: 15000 });
  assert.match(s1.stdout, /HTTP\/1\.1 200/);
  const s2 = spawnSync('openssl', ['s_client', '-ign_eof', '-connect', `127.0.0.1:${tlsPort}`, '-sess_in', path.join(dir, 'sess.pem')],
    { input: `GET /v1/usage HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.keys.main}\r\nConnection: close\r\n\r\n`, encoding: 'utf8', timeout: 15000 });
  assert.match(s2.stdout, /Reused, TLSv1\.3/);
  const m2 = await metrics();
  assert.ok(metric(m2, 'tollgate_tls_handshakes_total{kind="resumed"}') >= 1, m2);
});

test('start-up: a missing, mismatched or expired pair exits 2 naming the file; config check agrees', { skip: !haveOpenssl }, async () => {
  const good = makePair('good');
  const other = makePair('other');
  const old = expiredPair();
  const cases = [
    [{ cert: path.join(dir, 'nope.pem'), key: good.key }, /cannot read TLS certificate .*nope\.pem/],
    [{ cert: good.cert, key: other.key }, new RegExp(`TLS key ${other.key.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} does not match`)],
    [{ cert: old.cert, key: old.key }, /TLS certificate .*cert\.pem expired on 2020-01-02/],
  ];
  const data = path.join(dir, 'startup-data');
  for (const [p, re] of cases) {
    const r = await runCli(['serve', '--listen', '127.0.0.1:0', '--data-dir', data, '--sample',
      '--tls-listen', '127.0.0.1:0', '--tls-cert', p.cert, '--tls-key', p.key], { timeoutMs: 30000 });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, re);
    const cfg = path.join(dir, 'tls.toml');
    fs.writeFileSync(cfg, `[tls]\nlisten = "127.0.0.1:0"\ncert = ${JSON.stringify(p.cert)}\nkey = ${JSON.stringify(p.key)}\n`);
    const c = await runCli(['config', 'check', '--config', cfg]);
    assert.equal(c.code, 2, c.stderr);
    assert.match(c.stderr, re);
  }
  const cfg = path.join(dir, 'tls.toml');
  fs.writeFileSync(cfg, `[tls]\nlisten = "127.0.0.1:0"\ncert = ${JSON.stringify(good.cert)}\nkey = ${JSON.stringify(good.key)}\nmin_version = "1.3"\n`);
  const c = await runCli(['config', 'check', '--config', cfg]);
  assert.equal(c.code, 0, c.stderr);
  fs.writeFileSync(cfg, `[tls]\nlisten = "127.0.0.1:0"\ncert = ${JSON.stringify(good.cert)}\n`);
  const partial = await runCli(['config', 'check', '--config', cfg]);
  assert.equal(partial.code, 2);
  assert.match(partial.stderr, /tls\.key/);
});
