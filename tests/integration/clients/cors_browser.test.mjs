// Verifies CORS for browser MCP clients (issue 29 item 9), from a real headless Chromium: a page
// served by this test from an origin in [mcp] allowed_origins (http://127.0.0.2:PORT, a loopback
// address that is not one of the loopback origins tollgate allows by default) fetch()es tollgate
// on another origin: the preflight is answered, initialize and a tools/call succeed, the rate and
// quota headers and Mcp-Session-Id are readable, a bad key's 401 and its WWW-Authenticate are
// readable; a page from an origin not on the list gets nothing (403, no CORS headers). The pages
// report what they saw by POSTing it back to this test's server.
//
// Needs Chromium (Debian package `chromium`, installed by tools/install-deps.sh). Without it the
// test prints SKIPPED with the reason, which ctest reports as Skipped.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { start, cleanup, tempDir } from './harness.mjs';

function findChromium() {
  for (const name of ['chromium', 'chromium-browser']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || null;
    } catch { /* not this one */ }
  }
  return null;
}

const CHROMIUM = findChromium();
if (!CHROMIUM) {
  process.stdout.write('SKIPPED: chromium not found on PATH (Debian: apt-get install chromium; tools/install-deps.sh does)\n');
}

const pages = [];
let server;

after(async () => {
  for (const p of pages) await p.close();
  await server?.stop();
  if (server) cleanup(server);
});

/** A page server on `host`: GET / serves `html`; POST /report resolves `report`. */
function pageServer(host, htmlOf) {
  return new Promise((resolve, reject) => {
    let deliver;
    const report = new Promise((r) => { deliver = r; });
    const srv = http.createServer((req, res) => {
      if (req.method === 'POST' && req.url === '/report') {
        let body = '';
        req.on('data', (d) => { body += d; });
        req.on('end', () => { res.writeHead(204); res.end(); deliver(JSON.parse(body)); });
        return;
      }
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(htmlOf(`http://${host}:${srv.address().port}`));
    });
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const p = {
        origin: `http://${host}:${srv.address().port}`,
        report,
        close: () => new Promise((r) => { srv.closeAllConnections?.(); srv.close(() => r()); }),
      };
      pages.push(p);
      resolve(p);
    });
  });
}

// The page: initialize (a preflighted POST: Authorization, MCP-Protocol-Version), a tools/call,
// a bad key; each result with the headers a browser client needs to read.
function pageHtml(mcpUrl, key) {
  return () => `<!doctype html><html><body><pre id="out">running</pre><script>
const MCP = ${JSON.stringify(mcpUrl)};
const headers = (k) => ({ 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
  Authorization: 'Bearer ' + k, 'MCP-Protocol-Version': '2025-06-18' });
const seen = (r) => ({ status: r.status, remaining: r.headers.get('X-RateLimit-Remaining'),
  quotaLimit: r.headers.get('X-Quota-Limit'), rateLimit: r.headers.get('RateLimit'),
  session: r.headers.get('Mcp-Session-Id'), challenge: r.headers.get('WWW-Authenticate') });
async function one(name, key, body) {
  try {
    const r = await fetch(MCP, { method: 'POST', headers: headers(key), body: JSON.stringify(body) });
    const s = seen(r);
    s.body = await r.text();
    return s;
  } catch (e) {
    return { error: String(e) };
  }
}
(async () => {
  const out = {};
  out.init = await one('init', ${JSON.stringify(key)}, { jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'browser', version: '1' } } });
  out.call = await one('call', ${JSON.stringify(key)}, { jsonrpc: '2.0', id: 2, method: 'tools/call',
    params: { name: 'get_usage', arguments: {} } });
  out.badKey = await one('bad', 'tg_live_not_a_key', { jsonrpc: '2.0', id: 3, method: 'ping' });
  document.getElementById('out').textContent = JSON.stringify(out);
  await fetch('/report', { method: 'POST', body: JSON.stringify(out) });
})();
</script></body></html>`;
}

/** Runs headless Chromium on `url` until `report` settles (bounded), then ends it: its own
 * process group (Chromium's renderer and utility processes with it), by that group's id. */
async function browse(url, report) {
  const profile = tempDir('tollgate-chromium-');
  const child = spawn(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--no-first-run', '--disable-dev-shm-usage', `--user-data-dir=${profile}`, url],
  { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((r) => child.once('exit', r));
  let timer;
  try {
    return await Promise.race([
      report,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no report from the page within 60 s; chromium stderr: ${err.slice(-2000)}`)), 60000);
      }),
      exited.then((code) => { throw new Error(`chromium exited (${code}) before the page reported; stderr: ${err.slice(-2000)}`); }),
    ]);
  } finally {
    clearTimeout(timer);
    try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    await exited;
    child.stderr.destroy();
    // The group's last processes may still be going away: retry the removal a little.
    fs.rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
}

test('a browser page on an allowed origin uses tollgate cross-origin; another origin is refused', { skip: CHROMIUM ? false : 'chromium not found on PATH' }, async () => {
  // The pages' servers first: the allowed origin goes into the server's config.
  let mcpUrl = '';
  let key = '';
  const allowed = await pageServer('127.0.0.2', (origin) => pageHtml(mcpUrl, key)(origin));
  const foreign = await pageServer('127.0.0.3', (origin) => pageHtml(mcpUrl, key)(origin));
  server = await start({
    keys: { main: { account: 'acct-browser', plan: 'big' } },
    extraConfig: `[mcp]\nallowed_origins = ["${allowed.origin}"]\n`,
  });
  mcpUrl = server.mcpUrl;
  key = server.keys.main;

  const ok = await browse(`${allowed.origin}/`, allowed.report);
  assert.equal(ok.init.status, 200, JSON.stringify(ok.init));
  assert.equal(JSON.parse(ok.init.body).result.serverInfo.name, 'tollgate');
  assert.match(String(ok.init.remaining), /^\d+$/, `X-RateLimit-Remaining is readable: ${JSON.stringify(ok.init)}`);
  assert.match(String(ok.init.quotaLimit), /^\d+$/, 'X-Quota-Limit is readable');
  assert.ok(ok.init.rateLimit, 'RateLimit is readable');
  assert.equal(ok.call.status, 200, JSON.stringify(ok.call));
  assert.equal(JSON.parse(ok.call.body).result.isError, false);
  assert.equal(ok.badKey.status, 401, JSON.stringify(ok.badKey));
  assert.match(String(ok.badKey.challenge), /^Bearer realm="tollgate"/, 'WWW-Authenticate is readable');

  const no = await browse(`${foreign.origin}/`, foreign.report);
  for (const r of [no.init, no.call]) {
    assert.match(String(r.error), /TypeError|Failed to fetch/, `refused: ${JSON.stringify(r)}`);
  }
});
