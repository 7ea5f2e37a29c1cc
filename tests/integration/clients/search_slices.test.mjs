// Verifies that a long search does not hold its core ([corpus] search_slice_postings): on a
// one-core server, heavy search_stories calls (common words, a filter, date sort, a deep offset)
// run in slices between the core's other requests, so light requests sent after them are
// answered first (order of completion, not time); the heavy answers are exactly the unsliced
// ones (REST runs every search whole), each call is billed once, and a client that leaves
// mid-search leaves the server healthy.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import {
  start, cleanup, mcpPost, restGet, toolCall, findStory, usageOf, eventually, parseToolText, BIN,
} from './harness.mjs';

let server;
let story;
const logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tollgate-slices-log-'));
const accessLog = path.join(logDir, 'access.log');
// Larger than the embedded sample (10,000 stories): a loop pass costs ~2 µs, so the heavy calls
// must take tens of thousands of passes to outlast the light calls' round trips. At 60,000
// stories they took 15-30 ms on a quick host, barely more than the light calls after them; at
// 150,000, 55-70 ms against 15-30.
const corpus = path.join(logDir, 'corpus.jsonl');

before(async () => {
  const fd = fs.openSync(corpus, 'w');
  const g = spawnSync(BIN, ['corpus', 'generate', '--count', '150000', '--seed', '33'],
    { stdio: ['ignore', fd, 'pipe'], timeout: 120000 });
  fs.closeSync(fd);
  assert.equal(g.status, 0, String(g.stderr));
  server = await start({
    corpusArgs: ['--corpus', corpus],
    threads: 1,
    keys: { main: { account: 'acct-main', plan: 'big' } },
    // one posting of work per loop pass, and no answer cache: the heavy calls take thousands of
    // passes however fast the machine is
    extraConfig: `[corpus]\nsearch_slice_postings = 1\nsearch_cache_entries = 0\n[log]\naccess = "${accessLog}"\n`,
  });
  story = await findStory(server, server.keys.main);
});

after(async () => {
  const r = await server?.stop();
  cleanup(server);
  fs.rmSync(logDir, { recursive: true, force: true });
  if (r) assert.equal(r.code, 0, `SIGTERM exits 0 (got ${JSON.stringify(r)})`);
});

const HEAVY = [
  // by date: a phrase of three common words keeps its position checks (a conjunction of
  // common words alone by date is a quick time walk over the bitsets)
  { query: 'the "of the a"', sort: 'date', offset: 200, limit: 10, since: 1 },
  // a phrase beside a term (searched through its pair term, docs/design.md §8): still
  // thousands of passes at one posting each
  { query: 'the "of the"', sort: 'relevance', offset: 990, limit: 10 },
  { query: 'the to', sort: 'relevance', offset: 500, limit: 50, since: 1 },
];

function restPath(a) {
  const p = new URLSearchParams({ q: a.query, sort: a.sort, offset: String(a.offset), limit: String(a.limit) });
  if (a.since !== undefined) p.set('since', String(a.since));
  return `/v1/stories?${p}`;
}

/** The server's event-loop passes so far, from /metrics (summed over its cores). */
async function loopPasses() {
  const r = await restGet(server, '/metrics');
  assert.equal(r.status, 200, r.body);
  let n = 0;
  for (const m of r.body.matchAll(/^tollgate_loop_passes_total(?:\{[^}]*\})? (\d+)$/gm)) n += Number(m[1]);
  return n;
}

/**
 * Resolves once the core is running the heavy calls just sent: between two reads of /metrics
 * (light requests, answered between slices) its loop made more than `passes` passes, which only
 * a search going on at one posting per pass does. Waiting for that, rather than for a fixed
 * time, keeps the test about order: a fast machine finished the heavy calls within the 20 ms the
 * test used to wait.
 */
async function heavyRunning(passes = 200) {
  let last = await loopPasses();
  for (let i = 0; i < 500; ++i) {
    const now = await loopPasses();
    if (now - last > passes) return;
    last = now;
  }
  assert.fail('the heavy calls never kept the loop busy');
}

/** The text payload of a successful tools/call answer. */
function payloadOf(r) {
  assert.equal(r.status, 200, r.body);
  const j = JSON.parse(r.body);
  assert.equal(j.result?.isError, false, r.body);
  return j.result.content[0].text;
}

test('light requests sent after heavy searches on the same core are answered first', async () => {
  const key = server.keys.main;
  const done = [];
  const agent = () => new http.Agent({ keepAlive: false });
  const heavy = HEAVY.map((a, i) => mcpPost(server, toolCall(10 + i, 'search_stories', a), { key, agent: agent() })
    .then((r) => { done.push(`heavy${i}`); return r; }));
  // The heavy requests are on the server first; then light ones, one after another, each on
  // its own connection of the same (only) core.
  await heavyRunning();
  for (let i = 0; i < 3; ++i) {
    const r = await mcpPost(server, toolCall(20 + i, 'get_story', { id: story.id }), { key, agent: agent() });
    payloadOf(r);
    done.push(`light${i}`);
  }
  const light = await mcpPost(server, toolCall(30, 'search_stories', { query: 'zzqqxxnomatch' }), { key, agent: agent() });
  assert.equal(JSON.parse(payloadOf(light)).total, 0);
  done.push('light-search');
  const answers = await Promise.all(heavy);
  assert.deepEqual(done.slice(0, 4), ['light0', 'light1', 'light2', 'light-search'],
    `completion order: ${done.join(', ')}`);
  // exactness: each heavy answer is the whole (REST, unsliced) answer, byte for byte
  for (let i = 0; i < HEAVY.length; ++i) {
    const rest = await restGet(server, restPath(HEAVY[i]), { key });
    assert.equal(rest.status, 200, rest.body);
    assert.equal(payloadOf(answers[i]), rest.body, `heavy ${i} sliced == whole`);
    const total = JSON.parse(rest.body).total;
    assert.ok(total > HEAVY[i].offset, `heavy ${i} matches more stories than it skips (${total})`);
  }
});

test('a sliced search is billed once', async () => {
  const key = server.keys.main;
  const before = (await usageOf(server, key)).used;
  payloadOf(await mcpPost(server, toolCall(40, 'search_stories', HEAVY[0]), { key }));
  const afterOne = (await usageOf(server, key)).used;
  assert.equal(afterOne - before, 1, 'one unit for one call, however many slices it took');
});

test('a call cancelled (notifications/cancelled, another connection) while its search runs is dropped, not billed', async () => {
  // Issue 29 item 3: over stateless HTTP the cancellation is a POST of its own; the call, whose
  // search is going on in slices, is dropped before its next admission, and the access log says
  // so. A call with another id beside it is answered and billed as usual.
  const key = server.keys.main;
  const agent = () => new http.Agent({ keepAlive: false });
  const before = (await usageOf(server, key)).used;
  const cancelled = mcpPost(server, toolCall('doomed-1', 'search_stories', HEAVY[0]), { key, agent: agent() });
  const kept = mcpPost(server, toolCall('kept-1', 'search_stories', HEAVY[2]), { key, agent: agent() });
  await heavyRunning();
  const note = await mcpPost(server, { jsonrpc: '2.0', method: 'notifications/cancelled',
    params: { requestId: 'doomed-1', reason: 'the user moved on' } }, { key, agent: agent() });
  assert.equal(note.status, 202, note.body);
  const r = await cancelled;
  assert.equal(r.status, 200, r.body);
  const j = JSON.parse(r.body);
  assert.equal(j.id, 'doomed-1');
  assert.equal(j.result?.isError, true, r.body);
  const err = parseToolText(j.result);
  assert.equal(err.code, 'unavailable');
  assert.match(err.message, /cancelled by its client/);
  payloadOf(await kept);
  await eventually(async () => (await usageOf(server, key)).used === before + 1, 3000,
    'only the call that was not cancelled is billed');
  await eventually(() => fs.existsSync(accessLog) &&
    /"tool":"search_stories"[^\n]*"outcome":"cancelled"/.test(fs.readFileSync(accessLog, 'utf8')), 3000,
    'the access log says the call was cancelled');
});

test('a client leaving mid-search leaves the core serving', async () => {
  const key = server.keys.main;
  const body = JSON.stringify(toolCall(50, 'search_stories', HEAVY[1]));
  await new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: server.port, path: '/mcp', method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
        Authorization: `Bearer ${key}` } });
    req.on('error', () => resolve());
    req.end(body);
    setTimeout(() => { req.destroy(); resolve(); }, 5);
  });
  for (let i = 0; i < 3; ++i) {
    payloadOf(await mcpPost(server, toolCall(60 + i, 'search_stories', HEAVY[2]), { key }));
  }
  payloadOf(await mcpPost(server, toolCall(70, 'get_story', { id: story.id }), { key }));
});
