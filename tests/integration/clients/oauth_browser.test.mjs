// The consent page in a real browser (issue #31): headless Chromium, driven over the DevTools
// protocol on a pipe (--remote-debugging-pipe), opens tollgate's authorize URL, finds the key
// field on the server-rendered page, types the key, presses Allow and follows the 302 to the
// client's loopback redirect URI, where this test reads the code and redeems it. No script of
// the page's own is needed (its CSP allows none); the protocol's evaluation is the user's hands.
// A screenshot of the page is left at $TMPDIR/tollgate-oauth-consent.png.
// Needs Chromium (Debian package `chromium`); without it the test is skipped, saying so.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { start, cleanup, tempDir, request } from './harness.mjs';

function findChromium() {
  for (const name of ['chromium', 'chromium-browser']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || null;
    } catch { /* not this one */ }
  }
  return null;
}
const CHROMIUM = findChromium();
if (!CHROMIUM) process.stdout.write('SKIPPED: chromium not found on PATH\n');

let server;
let callback;
after(async () => {
  await server?.stop();
  if (server) cleanup(server);
  await callback?.close();
});

/** A loopback redirect URI: resolves `hit` with the query of the first GET /callback. */
function callbackServer() {
  return new Promise((resolve) => {
    let deliver;
    const hit = new Promise((r) => { deliver = r; });
    const srv = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('connected');
      if (req.url.startsWith('/callback')) deliver(new URL(req.url, 'http://x').searchParams);
    });
    srv.listen(0, '127.0.0.1', () => resolve({
      uri: `http://127.0.0.1:${srv.address().port}/callback`, hit,
      close: () => new Promise((r) => { srv.closeAllConnections?.(); srv.close(() => r()); }),
    }));
  });
}

/** Headless Chromium with the DevTools protocol on fds 3 (in) and 4 (out). */
function browser() {
  const profile = tempDir('tollgate-chromium-');
  const child = spawn(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--remote-debugging-pipe',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
    '--disable-dev-shm-usage', `--user-data-dir=${profile}`, 'about:blank'],
  { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'], detached: true });
  child.stderr.on('data', () => {});
  const exited = new Promise((r) => child.once('exit', r));
  let id = 0;
  let buf = '';
  const waiting = new Map();
  child.stdio[4].on('data', (d) => {
    buf += d;
    for (let i = buf.indexOf('\0'); i >= 0; i = buf.indexOf('\0')) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (msg.id !== undefined && waiting.has(msg.id)) {
        waiting.get(msg.id)(msg);
        waiting.delete(msg.id);
      }
    }
  });
  const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
    const m = { id: ++id, method, params };
    if (sessionId) m.sessionId = sessionId;
    waiting.set(m.id, (r) => (r.error ? reject(new Error(`${method}: ${JSON.stringify(r.error)}`)) : resolve(r.result)));
    child.stdio[3].write(`${JSON.stringify(m)}\0`);
  });
  const close = async () => {
    try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    await exited;
    fs.rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  return { send, close };
}

async function evaluate(b, session, expression) {
  const r = await b.send('Runtime.evaluate', { expression, returnByValue: true }, session);
  return r.result?.value;
}

test('the consent page in headless Chromium: type the key, Allow, land on the redirect URI with a code',
  { skip: CHROMIUM ? false : 'chromium not found on PATH', timeout: 120000 }, async () => {
    server = await start({ keys: { main: { account: 'acct-b', plan: 'big' } }, extraArgs: ['--oauth'] });
    callback = await callbackServer();
    const reg = await request(`${server.url}/register`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ client_name: 'Browser test', redirect_uris: [callback.uri] }) });
    assert.equal(reg.status, 201, reg.body);
    const clientId = JSON.parse(reg.body).client_id;
    const verifier = crypto.randomBytes(32).toString('base64url');
    const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
    const authUrl = `${server.url}/authorize?${new URLSearchParams({ response_type: 'code', client_id: clientId,
      redirect_uri: callback.uri, code_challenge: challenge, code_challenge_method: 'S256', state: 'b-1',
      resource: `${server.url}/mcp` })}`;

    const b = browser();
    try {
      const { targetId } = await b.send('Target.createTarget', { url: 'about:blank' });
      const { sessionId } = await b.send('Target.attachToTarget', { targetId, flatten: true });
      await b.send('Page.navigate', { url: authUrl }, sessionId);
      const end = Date.now() + 30000;
      while (!(await evaluate(b, sessionId, "document.readyState === 'complete' && !!document.getElementById('api_key')"))) {
        assert.ok(Date.now() < end, 'the consent page did not load');
        await new Promise((r) => setTimeout(r, 100));
      }
      const shown = await evaluate(b, sessionId, 'document.body.innerText');
      assert.match(shown, /Browser test/);
      assert.match(shown, /127\.0\.0\.1:\d+/);
      const shot = await b.send('Page.captureScreenshot', { format: 'png' }, sessionId);
      // For a person to look at (overwritten by each run): what the user sees before Allow.
      fs.writeFileSync(path.join(os.tmpdir(), 'tollgate-oauth-consent.png'), Buffer.from(shot.data, 'base64'));
      await evaluate(b, sessionId, `document.getElementById('api_key').value = ${JSON.stringify(server.keys.main)};
        document.querySelector('button.allow').click(); true`);
      let timer;
      const q = await Promise.race([callback.hit, new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('no redirect within 30 s')), 30000);
      })]).finally(() => clearTimeout(timer));
      assert.equal(q.get('state'), 'b-1');
      assert.equal(q.get('iss'), server.url);
      const code = q.get('code');
      assert.ok(code);
      const t = await request(`${server.url}/token`, { method: 'POST',
        headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'authorization_code', code, code_verifier: verifier,
          redirect_uri: callback.uri, client_id: clientId }).toString() });
      assert.equal(t.status, 200, t.body);
      assert.match(JSON.parse(t.body).access_token, /^tgat_/);
    } finally {
      await b.close();
    }
  });
