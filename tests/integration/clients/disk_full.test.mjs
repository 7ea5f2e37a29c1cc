// Verifies a full data dir does not silence the server (design §6, issue 14 item 1): the real
// server runs with its data dir on a small tmpfs, which the test fills. Billed calls are then
// refused as `unavailable` (REST 503 + Retry-After, MCP tool error) within a bounded time and
// not billed; unbilled answers (tools/list, /v1/usage, 401, /healthz) keep flowing; /readyz says
// not ready and /metrics shows the journal errors and refusals. Once space is freed the server
// recovers by itself, and the usage it reports, before and after a restart, is exactly the
// billed successes the client saw.
//
// Needs root to mount the tmpfs (CI runs as root). Where mounting is impossible the test says so
// and is skipped: the engine and quota tests inject the same write failures (/dev/full, a failed
// write reported to the journal) without a mount (net_journal_test, quota_disk_fault_test).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  start, restart, prepare, eventually, request, restGet, mcpPost, toolCall, findStory, usageOf,
  parseToolText, loadAgent, DEFAULT_PLANS,
} from './harness.mjs';

const MNT = fs.mkdtempSync(path.join(os.tmpdir(), 'tollgate-full-'));
const ANSWER_MS = 3000;  // every answer, refused or not, comes within this

let mounted = false;
let server;
let agent;
try {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', MNT], { stdio: 'pipe' });
  mounted = true;
} catch (e) {
  process.stdout.write(`SKIPPED: cannot mount a tmpfs at ${MNT} (${String(e.stderr ?? e.message).trim()}); ` +
    'the injected write failures of net_journal_test and quota_disk_fault_test cover the engine and quota core\n');
}

after(async () => {
  agent?.destroy();
  await server?.stop();
  if (mounted) {
    try { execFileSync('umount', ['-l', MNT], { stdio: 'pipe' }); } catch { /* already gone */ }
  }
  fs.rmSync(MNT, { recursive: true, force: true });
});

/** Writes a filler file until the tmpfs is full; returns its path. */
function fill(dir) {
  const p = path.join(dir, 'filler');
  const fd = fs.openSync(p, 'w');
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    for (;;) fs.writeSync(fd, chunk);
  } catch (e) {
    assert.equal(e.code, 'ENOSPC', `filling the tmpfs: ${e.message}`);
  }
  try {
    for (;;) fs.writeSync(fd, chunk, 0, 512);  // the last partial pages too
  } catch { /* full */ }
  fs.closeSync(fd);
  return p;
}

function metric(text, name) {
  const m = new RegExp(`^${name}\\{core="0"\\} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `/metrics has ${name}: ${text.slice(0, 400)}`);
  return Number(m[1]);
}

test('a full data dir: billed calls unavailable, the rest flows, recovery is exact', { skip: !mounted }, async () => {
  const prep = await prepare({
    dataDir: path.join(MNT, 'data'),
    keys: { main: { account: 'acct-main', plan: 'big' } },
    plans: DEFAULT_PLANS,
    quota: { reconcile_ms: 100, fsync_ms: 50 },
  });
  server = await start({ prepared: prep, threads: 1 });
  const key = server.keys.main;
  agent = loadAgent(1);
  const { query, id } = await findStory(server, key);
  let successes = 1;  // findStory's search was billed

  // One billed call, alternating REST and MCP; returns 'ok' or 'unavailable' (asserting its shape).
  let n = 0;
  async function billed() {
    n++;
    const t0 = Date.now();
    if (n % 2) {
      const r = await request(`${server.url}/v1/stories?q=${encodeURIComponent(query)}&limit=1`,
        { headers: { Authorization: `Bearer ${key}` }, agent, timeoutMs: ANSWER_MS });
      assert.ok(Date.now() - t0 < ANSWER_MS);
      if (r.status === 200) return 'ok';
      assert.equal(r.status, 503, r.body);
      assert.ok(Number(r.headers['retry-after']) >= 1, `Retry-After: ${r.headers['retry-after']}`);
      const j = JSON.parse(r.body);
      assert.equal(j.code, 'unavailable');
      assert.match(j.message, /cannot be recorded/);
      return 'unavailable';
    }
    const r = await request(server.mcpUrl, {
      method: 'POST', agent, timeoutMs: ANSWER_MS,
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${key}` },
      body: JSON.stringify(toolCall(n, 'get_story', { id })),
    });
    assert.equal(r.status, 200, r.body);
    const res = JSON.parse(r.body).result;
    if (res.isError === false) return 'ok';
    const err = parseToolText(res);
    assert.equal(err.code, 'unavailable', r.body);
    assert.match(err.message, /cannot be recorded/);
    assert.ok(err.retry_after_secs >= 1);
    return 'unavailable';
  }

  const filler = fill(MNT);
  // The journal spends the space it reserved ahead, then refuses: within a bounded number of calls.
  let refused = 0;
  for (let i = 0; i < 20000 && refused === 0; i++) {
    if ((await billed()) === 'ok') successes++;
    else refused++;
  }
  assert.equal(refused, 1, `a billed call was refused as unavailable after ${successes} successes`);
  for (let i = 0; i < 6; i++) {
    assert.equal(await billed(), 'unavailable', 'billed calls stay refused while the disk is full');
  }

  // Unbilled answers never wait on the journal.
  const list = await mcpPost(server, { jsonrpc: '2.0', id: 'l', method: 'tools/list' }, { key });
  assert.equal(list.status, 200);
  assert.ok(JSON.parse(list.body).result.tools.length >= 3);
  assert.equal((await restGet(server, '/v1/usage', { key })).status, 200);
  assert.equal((await restGet(server, '/v1/usage', { key: 'tg_live_not_a_key' })).status, 401);
  assert.equal((await request(`${server.url}/healthz`, { timeoutMs: ANSWER_MS })).status, 200);
  const ready = await request(`${server.url}/readyz`, { timeoutMs: ANSWER_MS });
  assert.equal(ready.status, 503, `readyz while the journal is failing: ${ready.body}`);
  const m = (await request(`${server.url}/metrics`, { timeoutMs: ANSWER_MS })).body;
  assert.ok(metric(m, 'tollgate_journal_write_errors_total') >= 1);
  assert.ok(metric(m, 'tollgate_journal_refused_total') >= 7);
  assert.equal(metric(m, 'tollgate_journal_failing'), 1);
  assert.ok(metric(m, 'tollgate_journal_oldest_unwritten_seconds') >= 0);
  assert.ok(metric(m, 'tollgate_journal_held_responses') >= 0);
  assert.ok(Number(/^tollgate_snapshot_write_errors_total (\d+)$/m.exec(m)?.[1]) >= 1,
    'the snapshot written every reconcile_ms fails too, and is counted');
  assert.ok((server.stderr().match(/usage snapshot not written/g) ?? []).length === 1,
    'a failing snapshot is logged once, not every reconcile_ms');
  // Refused calls are not billed: usage is exactly the successes.
  await eventually(async () => (await usageOf(server, key)).used === successes, 3000,
    `usage equals the ${successes} successes while full`);

  // Space returns: the server recovers by itself.
  fs.rmSync(filler);
  await eventually(async () => (await request(`${server.url}/readyz`)).status === 200, 3000, 'ready again');
  for (let i = 0; i < 50; i++) {
    assert.equal(await billed(), 'ok', 'billed calls are answered again');
    successes++;
  }
  await eventually(async () => (await usageOf(server, key)).used === successes, 3000,
    `usage equals the ${successes} successes after recovery`);

  // Nothing answered as billed was lost, and nothing refused was counted, across a restart.
  agent.destroy();
  agent = loadAgent(1);
  await server.stop();
  server = await restart(server);
  assert.equal((await usageOf(server, key)).used, successes);
});

/** The size of core 0's current usage journal. */
function journalSize(dataDir) {
  const dir = path.join(dataDir, 'usage');
  const gens = fs.readdirSync(dir).map((n) => /^journal-0-(\d+)\.bin$/.exec(n)?.[1]).filter(Boolean).map(Number);
  return fs.statSync(path.join(dir, `journal-0-${Math.max(...gens)}.bin`)).size;
}

// Verifies a journal whose space is reserved but whose writes then fail does not hold billed
// answers for ever. The failure is injected without a mount: the running server's file size
// limit is lowered to its journal's size (prlimit). The server ignores SIGXFSZ itself (issue 29:
// it used to be killed by it), so the write past the limit fails with EFBIG and the server
// lives on. The answer waiting for the failed write gets 503 +
// Retry-After ("usage cannot be recorded") within a bounded time and is not billed; no billed
// call is answered as a success while writes fail, and unbilled answers flow. Once the limit
// is lifted the server recovers by itself, and usage, before and after a restart, is exactly
// the successes the client saw.
test('journal writes failing after the space was reserved: held answers become unavailable, not billed', async () => {
  const prep = await prepare({
    keys: { main: { account: 'acct-efbig', plan: 'big' } },
    plans: DEFAULT_PLANS,
    quota: { reconcile_ms: 100, fsync_ms: 50 },
  });
  const srv = await start({ prepared: prep, threads: 1 });  // SIGXFSZ at its default action
  const ag = loadAgent(1);
  try {
    const key = srv.keys.main;
    const { query, id } = await findStory(srv, key);
    let successes = 1;
    const rest = () => request(`${srv.url}/v1/stories?q=${encodeURIComponent(query)}&limit=1`,
      { headers: { Authorization: `Bearer ${key}` }, agent: ag, timeoutMs: ANSWER_MS });
    const mcp = (n) => request(srv.mcpUrl, {
      method: 'POST', agent: ag, timeoutMs: ANSWER_MS,
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${key}` },
      body: JSON.stringify(toolCall(n, 'get_story', { id })),
    });
    // A refusal of either form: 503 + Retry-After, or MCP's tool error.
    const refused = (r) => {
      let err;
      if (r.status === 503) {
        assert.ok(Number(r.headers['retry-after']) >= 1, `Retry-After: ${r.headers['retry-after']}`);
        err = JSON.parse(r.body);
      } else {
        assert.equal(r.status, 200, r.body);
        const res = JSON.parse(r.body).result;
        assert.equal(res?.isError, true, `a billed call answered as a success: ${r.body}`);
        err = parseToolText(res);
      }
      assert.equal(err.code, 'unavailable', r.body);
      assert.match(err.message, /cannot be recorded/);
    };
    for (let i = 0; i < 5; i++) {
      assert.equal((await rest()).status, 200);
      successes++;
    }
    await eventually(async () => (await usageOf(srv, key)).used === successes, 3000, 'usage settled');

    execFileSync('prlimit', ['--pid', String(srv.pid), `--fsize=${journalSize(srv.dataDir)}:unlimited`]);
    try {
      const t0 = Date.now();
      const held = await rest();
      assert.ok(Date.now() - t0 < ANSWER_MS, `answered after ${Date.now() - t0} ms`);
      assert.equal(held.status, 503, held.body);
      refused(held);
      for (let i = 0; i < 4; i++) {
        const t1 = Date.now();
        refused(i % 2 ? await rest() : await mcp(10 + i));
        assert.ok(Date.now() - t1 < ANSWER_MS);
      }
      const list = await mcpPost(srv, { jsonrpc: '2.0', id: 'l', method: 'tools/list' }, { key });
      assert.equal(list.status, 200);
      assert.equal((await request(`${srv.url}/healthz`, { timeoutMs: ANSWER_MS })).status, 200);
      assert.equal(srv.child.exitCode, null, 'the server lives past its file size limit');
      assert.equal(srv.child.signalCode, null, 'no SIGXFSZ');
      assert.match(srv.stderr(), /File too large|file size limit/);
      const m = (await request(`${srv.url}/metrics`, { timeoutMs: ANSWER_MS })).body;
      assert.ok(metric(m, 'tollgate_journal_write_errors_total') >= 1);
      await eventually(async () => (await usageOf(srv, key)).used === successes, 3000,
        `usage equals the ${successes} successes while the journal fails`);
    } finally {
      execFileSync('prlimit', ['--pid', String(srv.pid), '--fsize=unlimited:unlimited']);
    }

    let ok = 0;
    for (let i = 0; i < 40 && ok < 10; i++) {
      const r = await rest();
      if (r.status === 200) {
        ok++;
        successes++;
      } else {
        refused(r);  // the back-off after the failures may take a moment
        await new Promise((res) => setTimeout(res, 100));
      }
    }
    assert.equal(ok, 10, 'billed calls are answered again');
    await eventually(async () => (await usageOf(srv, key)).used === successes, 3000,
      `usage equals the ${successes} successes after recovery`);
    await srv.stop();
    const again = await restart(srv);
    try {
      assert.equal((await usageOf(again, key)).used, successes);
    } finally {
      await again.stop();
    }
  } finally {
    ag.destroy();
    await srv.stop();
  }
});

// Verifies the start on a data dir that is already full (README, "The data dir's disk
// faults"): the server starts, as it keeps serving when a disk fills while it runs (an operator
// frees space without a restart loop): /readyz says not ready, billed calls are `unavailable`
// and not billed, unbilled answers flow, and once space is freed it is ready and bills again.
test('a data dir full before the start: the server starts not ready, and recovers when space returns', { skip: !mounted }, async () => {
  const prep = await prepare({
    dataDir: path.join(MNT, 'data-full-at-start'),
    keys: { main: { account: 'acct-full-start', plan: 'big' } },
    plans: DEFAULT_PLANS,
    quota: { reconcile_ms: 100, fsync_ms: 50 },
  });
  const filler = fill(MNT);
  const srv = await start({ prepared: prep, threads: 1 });
  try {
    const key = srv.keys.main;
    assert.equal((await request(`${srv.url}/readyz`, { timeoutMs: ANSWER_MS })).status, 503);
    const r = await request(`${srv.url}/v1/stories?q=the&limit=1`,
      { headers: { Authorization: `Bearer ${key}` }, timeoutMs: ANSWER_MS });
    assert.equal(r.status, 503, r.body);
    assert.match(JSON.parse(r.body).message, /cannot be recorded/);
    assert.equal((await restGet(srv, '/v1/usage', { key })).status, 200);
    assert.equal((await usageOf(srv, key)).used, 0);
    fs.rmSync(filler);
    await eventually(async () => (await request(`${srv.url}/readyz`)).status === 200, 3000, 'ready once space returns');
    const ok = await request(`${srv.url}/v1/stories?q=the&limit=1`,
      { headers: { Authorization: `Bearer ${key}` }, timeoutMs: ANSWER_MS });
    assert.equal(ok.status, 200, ok.body);
    await eventually(async () => (await usageOf(srv, key)).used === 1, 3000, 'the one success is billed');
  } finally {
    if (fs.existsSync(filler)) fs.rmSync(filler);
    await srv.stop();
  }
});
