// Verifies the fleet (issue 5, "Remote shards" and its fault tests) end to end with real
// processes: shard nodes (`serve --role shard`) each serving a disjoint slice of a generated
// corpus, gateways fanning out to them, and a reference node serving the whole corpus in-process.
//   - equivalence: a gateway over 3 shard nodes, and a mixed gateway (local part + remotes),
//     answer exactly like the reference (pages by date and by relevance, get_story byte for
//     byte);
//   - faults: one shard killed -> partial (billed); all killed -> unavailable over MCP (SDK
//     client) and REST 503 + Retry-After (not billed); restarted on the same ports -> recovered;
//     a shard that hangs past deadline_ms, or answers garbage -> partial, the deadline holds;
//   - the fleet secret: wrong/missing -> 401; --role shard without one -> exit 2;
//   - get_story: an id nowhere -> not_found; with a shard down and the id not local ->
//     unavailable; a shard node's story whose text is not in the page cache is parked while
//     the node's ring reads it (tollgate_story_read_aheads_total), then answered byte for byte.
// Every process listens on 127.0.0.1 (port 0, or its old port on restart), is ended by its PID,
// every wait is bounded.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import net from 'node:net';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { execFileSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  start, restart, prepare, cleanup, runCli, request, restGet, usageOf, eventually, tempDir,
} from './harness.mjs';
import { toolError, successText } from './common.mjs';

// ------------------------------------------------------------------ expectations (adjust here)

const SECRET = 's3cret';
const SECRET_HEADER = 'X-Tollgate-Fleet-Secret';
const CORPUS_COUNT = 3000;
const CORPUS_SEED = 7;
const PARTS = 3;                   // shard nodes; story on line i lives on part i % PARTS
const SHARD_THREADS = 1;
const GATEWAY_THREADS = 2;
const EQUIV_DEADLINE_MS = 2000;    // generous: equivalence must not turn partial on a loaded box
const FAULT_DEADLINE_MS = 250;
const HANG_DEADLINE_MS = 200;
const HANG_WALL_BOUND_MS = 3000;   // the deadline is enforced: a hanging shard does not hold a call
const RECOVER_WITHIN_MS = 15000;   // down ~2 s, then probed: back within a few seconds
const NO_SUCH_ID = 'no-such-story-4242424242';
const RETRY_AFTER_RE = /^[1-9][0-9]*$/;

const KEYS = { main: { account: 'acct-fleet', plan: 'big' } };
const FAULT_KEYS = {
  main: { account: 'acct-fault', plan: 'big' },
  partial: { account: 'acct-partial', plan: 'big' },
  unavail: { account: 'acct-unavail', plan: 'big' },
};

// ------------------------------------------------------------------------------------ helpers

/** The [fleet] table; only the keys given. */
function fleetToml({ role, secret, shards, deadlineMs, local } = {}) {
  const l = ['[fleet]'];
  if (role !== undefined) l.push(`role = "${role}"`);
  if (secret !== undefined) l.push(`secret = "${secret}"`);
  if (shards !== undefined) l.push(`shards = [${shards.map((s) => JSON.stringify(s)).join(', ')}]`);
  if (deadlineMs !== undefined) l.push(`deadline_ms = ${deadlineMs}`);
  if (local !== undefined) l.push(`local = ${local}`);
  return l.join('\n') + '\n';
}

/** A shard node serving `file`. */
async function shardNode(file) {
  const prepared = await prepare({ extraConfig: fleetToml({ role: 'shard', secret: SECRET }) });
  return start({ prepared, threads: SHARD_THREADS, corpusArgs: ['--corpus', file], extraArgs: ['--role', 'shard'] });
}

/** A gateway over `shards` ("127.0.0.1:PORT"); with `corpus` it also serves that file itself. */
function gateway({ shards, local, corpus, deadlineMs, keys = KEYS }) {
  return start({
    keys,
    threads: GATEWAY_THREADS,
    extraConfig: fleetToml({ secret: SECRET, shards, deadlineMs, local }),
    corpusArgs: corpus ? ['--corpus', corpus] : [],
  });
}

const addr = (s) => `127.0.0.1:${s.port}`;

const killed = new Set();  // servers this suite SIGKILLed on purpose

/** kill -9 a node (a crash), remembered so that stopAll does not hold its exit against it. */
async function crash(server) {
  killed.add(server);
  return server.kill9();
}

/** SIGTERM every server; each one not crashed on purpose must exit 0 (a clean drain: no
 * sanitizer report, no shutdown hang escalated to SIGKILL). */
async function stopAll(servers) {
  const live = servers.filter(Boolean);
  const results = await Promise.all(live.map((s) => s.stop().catch((e) => ({ error: e }))));
  for (const s of live) cleanup(s);
  live.forEach((s, i) => {
    if (killed.has(s)) return;
    assert.deepEqual([results[i].code, results[i].signal ?? null], [0, null],
      `pid ${s.pid} (port ${s.port}) exits 0 on SIGTERM: ${JSON.stringify(results[i])}; stderr: ${s.stderr().slice(-2000)}`);
  });
}

/** GET /v1/stories with `params` (repeated tags allowed); resolves {status, headers, body, json}. */
async function search(server, key, params) {
  const qs = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    for (const x of Array.isArray(v) ? v : [v]) qs.push(`${k}=${encodeURIComponent(String(x))}`);
  }
  const r = await restGet(server, `/v1/stories?${qs.join('&')}`, { key });
  let json;
  try { json = JSON.parse(r.body); } catch { json = undefined; }
  return { ...r, json };
}

async function getStory(server, key, id) {
  return restGet(server, `/v1/stories/${encodeURIComponent(id)}`, { key });
}

/** A 200 answer from every shard: no "partial" in the payload. */
function full(r, what) {
  assert.equal(r.status, 200, `${what}: ${r.status} ${r.body}`);
  assert.ok(!('partial' in r.json) && !('shards' in r.json), `${what}: a full answer carries no partial/shards: ${r.body.slice(0, 300)}`);
  return r.json;
}

/** A 200 answer marked partial with these counts. */
function partial(r, answered, total, what) {
  assert.equal(r.status, 200, `${what}: ${r.status} ${r.body}`);
  assert.equal(r.json.partial, true, `${what}: "partial":true: ${r.body.slice(0, 300)}`);
  assert.deepEqual(r.json.shards, { answered, total }, `${what}: shards counts: ${r.body.slice(0, 300)}`);
  assert.ok(Array.isArray(r.json.stories), `${what}: stories array`);
  return r.json;
}

/** REST 503 unavailable with Retry-After equal to the body's retry_after_secs. */
function restUnavailable(r, what) {
  assert.equal(r.status, 503, `${what}: ${r.status} ${r.body}`);
  assert.match(r.headers['retry-after'] ?? '', RETRY_AFTER_RE, `${what}: Retry-After: ${JSON.stringify(r.headers)}`);
  const j = JSON.parse(r.body);
  assert.equal(j.code, 'unavailable', `${what}: ${r.body}`);
  assert.equal(typeof j.message, 'string');
  assert.ok(Number.isInteger(j.retry_after_secs) && j.retry_after_secs >= 1, `${what}: retry_after_secs: ${r.body}`);
  assert.equal(r.headers['retry-after'], String(j.retry_after_secs), `${what}: Retry-After == retry_after_secs`);
  assert.equal(j.stories, undefined, `${what}: never an empty result`);
  return j;
}

/** A story payload without the fleet's partial/shards fields (for comparing with the reference). */
function storyFields(body) {
  const j = JSON.parse(body);
  delete j.partial;
  delete j.shards;
  return j;
}

async function sdkClient(server, key) {
  const c = new Client({ name: 'tollgate-it-fleet', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(server.mcpUrl),
    { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
  await c.connect(transport, { timeout: 10000 });
  return c;
}

const callTool = (c, name, args) => c.callTool({ name, arguments: args }, undefined, { timeout: 10000 });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The gateway's tollgate_fleet_shard_up gauges from /metrics: {"127.0.0.1:PORT": 0|1}. */
async function shardUp(server) {
  const r = await request(`${server.url}/metrics`);
  assert.equal(r.status, 200, r.body);
  const up = {};
  for (const m of r.body.matchAll(/^tollgate_fleet_shard_up\{shard="([^"]+)"\} ([01])$/gm)) up[m[1]] = Number(m[2]);
  return up;
}

function tokens(s) {
  return s.toLowerCase().split(/[^a-z0-9]+/).filter(Boolean);
}

/** Queries over the generated corpus, from its own vocabulary (whatever the generator makes). */
function chooseQueries(stories) {
  const df = new Map();
  for (const s of stories) {
    for (const w of new Set(tokens(`${s.title} ${s.text}`))) df.set(w, (df.get(w) ?? 0) + 1);
  }
  const words = [...df.entries()].filter(([w]) => /^[a-z]{3,}$/.test(w))
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const near = (n) => words.reduce((best, e) => (Math.abs(e[1] - n) < Math.abs(best[1] - n) ? e : best))[0];
  const n = stories.length;
  let phrase;
  for (const s of stories) {
    const t = tokens(s.title).filter((w) => /^[a-z]{3,}$/.test(w));
    if (t.length >= 2 && t[0] !== t[1]) { phrase = `"${t[0]} ${t[1]}"`; break; }
  }
  const times = stories.map((s) => s.time).sort((a, b) => a - b);
  const tagCount = new Map();
  for (const s of stories) for (const t of s.tags) tagCount.set(t, (tagCount.get(t) ?? 0) + 1);
  const topTag = [...tagCount.entries()].sort((a, b) => b[1] - a[1])[0][0];
  const common = words[0][0];
  const queries = [
    { q: common },
    { q: near(n * 0.1) },
    { q: near(30) },
    { q: `${near(n * 0.3)} ${near(n * 0.1)}` },
    { q: phrase },
    { q: near(n * 0.2), since: times[Math.floor(n / 2)], until: times[Math.floor((n * 3) / 4)] },
    { q: common, tags: topTag },
  ];
  return queries.filter((x) => x.q);
}

// ---------------------------------------------------------------------- corpus and reference

let corpusDir;
let wholeFile;
let partFiles = [];
let stories = [];
let idsByPart = [];
let queries = [];
let reference;

before(async () => {
  corpusDir = tempDir('tollgate-fleet-corpus-');
  const g = await runCli(['corpus', 'generate', '--count', String(CORPUS_COUNT), '--seed', String(CORPUS_SEED)]);
  assert.equal(g.code, 0, `corpus generate: ${g.stderr}`);
  const lines = g.stdout.split('\n').filter((l) => l.trim());
  assert.equal(lines.length, CORPUS_COUNT);
  stories = lines.map((l) => JSON.parse(l));
  wholeFile = path.join(corpusDir, 'whole.jsonl');
  fs.writeFileSync(wholeFile, lines.join('\n') + '\n');
  for (let p = 0; p < PARTS; p++) {
    const mine = lines.filter((_, i) => i % PARTS === p);
    partFiles.push(path.join(corpusDir, `part${p}.jsonl`));
    fs.writeFileSync(partFiles[p], mine.join('\n') + '\n');
    idsByPart.push(stories.filter((_, i) => i % PARTS === p).map((s) => String(s.id)));
  }
  queries = chooseQueries(stories);
  reference = await start({ keys: KEYS, threads: 2, corpusArgs: ['--corpus', wholeFile] });
});

after(async () => {
  await stopAll([reference]);
  if (corpusDir) fs.rmSync(corpusDir, { recursive: true, force: true });
});

test('the reference node serves the whole generated corpus and finds every chosen query', async () => {
  for (const q of queries) {
    const r = await search(reference, reference.keys.main, { ...q, sort: 'date', limit: 50 });
    const j = full(r, `reference ${JSON.stringify(q)}`);
    assert.ok(j.total > 0, `the query ${JSON.stringify(q)} matches something`);
  }
  for (const p of idsByPart) {
    const r = await getStory(reference, reference.keys.main, p[0]);
    assert.equal(r.status, 200, r.body);
  }
});

/** Compares `node` to the reference over every chosen query: the same totals, ids in order and
 * story summaries, sorted by date and by relevance (a gateway ranks with the fleet's global idf
 * and average length, so its scores are the reference's bit for bit), on two pages each. */
async function compareWithReference(node, key) {
  for (const q of queries) {
    const what = `${JSON.stringify(q)}`;
    for (const sort of ['date', 'relevance']) {
      for (const page of [{ offset: 0, limit: 10 }, { offset: 100, limit: 50 }]) {
        const how = `sort=${sort} ${what} ${JSON.stringify(page)}`;
        const want = full(await search(reference, reference.keys.main, { ...q, sort, ...page }), `reference ${how}`);
        const got = full(await search(node, key, { ...q, sort, ...page }), `fleet ${how}`);
        assert.equal(got.total, want.total, `${how}: total`);
        assert.deepEqual(got.stories.map((s) => String(s.id)), want.stories.map((s) => String(s.id)),
          `${how}: ids in order`);
        assert.deepEqual(got.stories, want.stories, `${how}: the same story summaries`);
      }
    }
  }
}

/** get_story of ids on every part: the gateway's body equals the reference's, byte for byte. */
async function compareStories(node, key) {
  for (const [p, ids] of idsByPart.entries()) {
    for (const id of [ids[0], ids[Math.floor(ids.length / 2)], ids[ids.length - 1]]) {
      const want = await getStory(reference, reference.keys.main, id);
      const got = await getStory(node, key, id);
      assert.equal(got.status, 200, `part ${p} id ${id}: ${got.body}`);
      assert.equal(got.body, want.body, `part ${p} id ${id}: the same story bytes as the reference`);
    }
  }
}

// --------------------------------------------------------------- equivalence, mixed, secret

describe('a gateway over three shard nodes', () => {
  let shards = [];
  let gw;
  let mixed;
  let client;

  before(async () => {
    for (const f of partFiles) shards.push(await shardNode(f));
    gw = await gateway({ shards: shards.map(addr), local: false, deadlineMs: EQUIV_DEADLINE_MS });
  });

  after(async () => {
    await client?.close().catch(() => {});
    await stopAll([gw, mixed, ...shards]);
  });

  test('equivalence: the reference\'s pages exactly, by date and by relevance', async () => {
    await compareWithReference(gw, gw.keys.main);
  });

  test('equivalence: get_story of ids on each shard returns the reference bytes (REST and MCP)', async () => {
    await compareStories(gw, gw.keys.main);
    client = await sdkClient(gw, gw.keys.main);
    for (const ids of idsByPart) {
      const text = successText(await callTool(client, 'get_story', { id: ids[1] }));
      const want = await getStory(reference, reference.keys.main, ids[1]);
      assert.equal(text, want.body, `MCP get_story ${ids[1]} == reference REST body`);
    }
    const q = queries[1];
    const text = successText(await callTool(client, 'search_stories', { query: q.q, sort: 'date', limit: 20 }));
    const rest = await search(gw, gw.keys.main, { q: q.q, sort: 'date', limit: 20 });
    assert.equal(text, rest.body, 'search_stories text == REST body on a gateway');
  });

  test('mixed: local part 0 + two remote shards: the reference\'s pages exactly, get_story everywhere', async () => {
    mixed = await gateway({ shards: shards.slice(1).map(addr), local: true, corpus: partFiles[0], deadlineMs: EQUIV_DEADLINE_MS });
    await compareWithReference(mixed, mixed.keys.main);
    await compareStories(mixed, mixed.keys.main);
  });

  test('get_story of an id that exists nowhere: not_found tool error / 404 (every shard answered)', async () => {
    const r = await getStory(gw, gw.keys.main, NO_SUCH_ID);
    assert.equal(r.status, 404, r.body);
    const rest = JSON.parse(r.body);
    assert.equal(rest.code, 'not_found', r.body);
    client ??= await sdkClient(gw, gw.keys.main);
    const e = toolError(await callTool(client, 'get_story', { id: NO_SUCH_ID }), 'not_found');
    assert.deepEqual(e, rest, 'the same JSON object on both surfaces');
    if (mixed) {
      const m = await getStory(mixed, mixed.keys.main, NO_SUCH_ID);
      assert.equal(m.status, 404, `mixed gateway: ${m.body}`);
    }
  });

  test('a shard node\'s story whose text is not in the page cache: read on its ring, the same bytes', async () => {
    const s = shards[1];
    const files = [partFiles[1], partFiles[1] + '.tollgate-index'].filter((f) => fs.existsSync(f));
    // Drops the files' pages from the page cache (dd's nocache: POSIX_FADV_DONTNEED); the bytes
    // of the corpus still cached after it (fincore), or null without the tools.
    const evict = () => {
      try {
        for (const f of files) execFileSync('dd', [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none']);
        return Number(execFileSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', files[0]]).toString().trim());
      } catch {
        return null;
      }
    };
    const readAheads = async () => {
      const m = (await request(s.url + '/metrics')).body;
      const line = m.split('\n').find((l) => l.startsWith('tollgate_story_read_aheads_total '));
      return line ? Number(line.split(' ')[1]) : -1;
    };
    const before = await readAheads();
    assert.ok(before >= 0, 'the shard node counts its read-aheads');
    const headers = { [SECRET_HEADER]: SECRET };
    let cold = 0;
    for (const k of [5, 205, 405, 605, 805]) {
      const id = idsByPart[1][k];
      const left = evict();
      if (left === null || left > 0) continue;  // nothing to wait for here (tmpfs, no tools)
      cold++;
      const first = await request(s.url + `/fleet/v1/stories/${id}`, { headers });
      const again = await request(s.url + `/fleet/v1/stories/${id}`, { headers });
      assert.equal(first.status, 200, first.body);
      assert.equal(String(JSON.parse(first.body).id), id);
      assert.equal(first.body, again.body, `story ${id}: the cold read answers the cached bytes`);
    }
    if (cold > 0) assert.ok(await readAheads() > before, 'a cold story was read on the node\'s ring');
  });

  test('secret: a shard node refuses a missing or wrong X-Tollgate-Fleet-Secret with 401', async () => {
    const s = shards[0];
    const body = JSON.stringify({ terms: ['the'] });
    const json = { 'Content-Type': 'application/json' };
    const cases = [
      ['POST', '/fleet/v1/df', body], ['POST', '/fleet/v1/search', JSON.stringify({ terms: ['the'], k: 10 })],
      ['GET', `/fleet/v1/stories/${idsByPart[0][0]}`, undefined],
    ];
    for (const [method, p, b] of cases) {
      const none = await request(s.url + p, { method, headers: json, body: b });
      assert.equal(none.status, 401, `${method} ${p} without the secret: ${none.status} ${none.body}`);
      const wrong = await request(s.url + p, { method, headers: { ...json, [SECRET_HEADER]: 'not-the-secret' }, body: b });
      assert.equal(wrong.status, 401, `${method} ${p} with a wrong secret: ${wrong.status} ${wrong.body}`);
      const prefix = await request(s.url + p, { method, headers: { ...json, [SECRET_HEADER]: SECRET.slice(0, -1) }, body: b });
      assert.equal(prefix.status, 401, `${method} ${p} with a prefix of the secret: ${prefix.status}`);
    }
    // the right secret, no API key: answered (a shard node never bills)
    const df = await request(s.url + '/fleet/v1/df', { method: 'POST', headers: { ...json, [SECRET_HEADER]: SECRET }, body });
    assert.equal(df.status, 200, df.body);
    assert.equal(JSON.parse(df.body).docs, idsByPart[0].length, `docs = stories in part 0: ${df.body}`);
    const st = await request(s.url + `/fleet/v1/stories/${idsByPart[0][0]}`, { headers: { [SECRET_HEADER]: SECRET } });
    assert.equal(st.status, 200, st.body);
    assert.equal(String(JSON.parse(st.body).id), idsByPart[0][0]);
    const other = await request(s.url + `/fleet/v1/stories/${idsByPart[1][0]}`, { headers: { [SECRET_HEADER]: SECRET } });
    assert.equal(other.status, 404, `a story of another part is not on shard 0: ${other.body}`);
    assert.equal((await request(s.url + '/healthz')).status, 200, '/healthz needs no secret');
  });
});

describe('fleet config', () => {
  async function exitsNamingSecret(extraConfig, args, what) {
    const dir = tempDir('tollgate-fleet-cfg-');
    const cfg = `${dir}.toml`;
    fs.writeFileSync(cfg, extraConfig);
    try {
      const r = await runCli(['serve', '--config', cfg, '--listen', '127.0.0.1:0', '--threads', '1',
        '--data-dir', dir, '--sample', ...args], { timeoutMs: 20000 });
      assert.equal(r.code, 2, `${what}: exit 2 (got ${r.code}); stderr: ${r.stderr}`);
      assert.match(r.stderr, /fleet\.secret/, `${what}: the message names fleet.secret: ${r.stderr}`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmSync(cfg, { force: true });
    }
  }

  test('--role shard without fleet.secret: exit 2 naming fleet.secret', async () => {
    await exitsNamingSecret('', ['--role', 'shard'], '--role shard, no [fleet]');
    await exitsNamingSecret(fleetToml({ role: 'shard' }), [], 'role = "shard", no secret');
  });

  test('a gateway listing shards without fleet.secret: exit 2 naming fleet.secret', async () => {
    await exitsNamingSecret(fleetToml({ shards: ['127.0.0.1:9'] }), [], 'shards, no secret');
  });
});

// --------------------------------------------------------------------------- kill and restart

describe('faults: kill one shard, kill all, restart', () => {
  let shards = [];
  let gw;       // local = false over the three shards
  let mixed;    // local part 0 + remote shards 1 and 2
  let client;

  before(async () => {
    for (const f of partFiles) shards.push(await shardNode(f));
    gw = await gateway({ shards: shards.map(addr), local: false, deadlineMs: FAULT_DEADLINE_MS, keys: FAULT_KEYS });
    mixed = await gateway({ shards: shards.slice(1).map(addr), local: true, corpus: partFiles[0],
      deadlineMs: FAULT_DEADLINE_MS, keys: FAULT_KEYS });
    client = await sdkClient(gw, gw.keys.main);
  });

  after(async () => {
    await client?.close().catch(() => {});
    await stopAll([gw, mixed, ...shards]);
  });

  const q = () => queries[0].q;

  test('all up: full answers equal to the reference', async () => {
    const want = full(await search(reference, reference.keys.main, { q: q(), sort: 'date' }), 'reference');
    const got = full(await search(gw, gw.keys.main, { q: q(), sort: 'date' }), 'gateway');
    assert.equal(got.total, want.total);
    successText(await callTool(client, 'search_stories', { query: q() }));
  });

  test('one shard killed: partial, answered 2 of 3, only stories of the live parts; billed', async () => {
    await crash(shards[1]);
    const ref = full(await search(reference, reference.keys.main, { q: q(), sort: 'date', limit: 50 }), 'reference');
    const dead = new Set(idsByPart[1]);
    // a few times: past the failures that mark it down, the answer stays partial, never short
    for (let i = 0; i < 6; i++) {
      const j = partial(await search(gw, gw.keys.main, { q: q(), sort: 'date', limit: 50 }), 2, 3, `REST #${i}`);
      assert.ok(j.total > 0 && j.total < ref.total, `total ${j.total} counts the live parts only (reference ${ref.total})`);
      for (const s of j.stories) assert.ok(!dead.has(String(s.id)), `story ${s.id} of the killed shard in a partial answer`);
    }
    // marked down after failing queries in a row: /metrics says so (polled, each poll a query)
    const want = { [addr(shards[0])]: 1, [addr(shards[1])]: 0, [addr(shards[2])]: 1 };
    let up;
    await eventually(async () => {
      await search(gw, gw.keys.main, { q: q() });
      up = await shardUp(gw);
      return JSON.stringify(up) === JSON.stringify(want);
    }, 5000, 'the killed shard marked down in /metrics').catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(up)}`); });

    // MCP: the same payload as REST
    const text = successText(await callTool(client, 'search_stories', { query: q(), sort: 'date', limit: 50 }));
    const rest = await search(gw, gw.keys.main, { q: q(), sort: 'date', limit: 50 });
    assert.equal(text, rest.body, 'partial: tool text == REST body');
    partial({ status: 200, json: JSON.parse(text), body: text }, 2, 3, 'MCP');

    // billed: one REST and one MCP partial answer on a key of their own
    const key = gw.keys.partial;
    const before0 = (await usageOf(gw, key)).used;
    partial(await search(gw, key, { q: q() }), 2, 3, 'billing REST');
    const c2 = await sdkClient(gw, key);
    try {
      const t2 = successText(await callTool(c2, 'search_stories', { query: q() }));
      assert.equal(JSON.parse(t2).partial, true);
    } finally {
      await c2.close().catch(() => {});
    }
    let seen;
    await eventually(async () => { seen = (await usageOf(gw, key)).used; return seen === before0 + 2; }, 5000,
      'two partial answers billed').catch((e) => { throw new Error(`${e.message}: used ${before0} -> ${seen}`); });
  });

  test('one shard down: get_story of an id not local -> unavailable; found elsewhere -> the story', async () => {
    // id on the dead shard, and an id nowhere: neither can be told apart from "not found"
    for (const id of [idsByPart[1][0], NO_SUCH_ID]) {
      restUnavailable(await getStory(gw, gw.keys.main, id), `REST get_story ${id}`);
      const e = toolError(await callTool(client, 'get_story', { id }), 'unavailable');
      assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, JSON.stringify(e));
      restUnavailable(await getStory(mixed, mixed.keys.main, id), `mixed REST get_story ${id}`);
    }
    // ids on a live remote shard, and (mixed) on the local part: found, the reference's story
    for (const [node, id] of [[gw, idsByPart[0][0]], [gw, idsByPart[2][0]], [mixed, idsByPart[0][0]], [mixed, idsByPart[2][0]]]) {
      const r = await getStory(node, node.keys.main, id);
      assert.equal(r.status, 200, `${id}: ${r.body}`);
      const want = await getStory(reference, reference.keys.main, id);
      assert.deepEqual(storyFields(r.body), storyFields(want.body), `${id}: the reference's story`);
    }
    // the mixed gateway's search: partial (its remote shard 1 is down)
    const m = await search(mixed, mixed.keys.main, { q: q() });
    assert.equal(m.status, 200, m.body);
    assert.equal(m.json.partial, true, `mixed gateway with a remote down: partial: ${m.body.slice(0, 200)}`);
  });

  test('all shards killed: unavailable over MCP and REST 503 + Retry-After, never empty; not billed', async () => {
    await crash(shards[0]);
    await crash(shards[2]);
    const key = gw.keys.unavail;
    const before0 = (await usageOf(gw, key)).used;
    const c2 = await sdkClient(gw, key);
    try {
      for (let i = 0; i < 4; i++) {
        const e = toolError(await callTool(c2, 'search_stories', { query: q() }), 'unavailable');
        assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, `retry_after_secs: ${JSON.stringify(e)}`);
        const r = await search(gw, key, { q: q() });
        const rest = restUnavailable(r, `REST search #${i}`);
        assert.equal(rest.code, e.code);
        const noDigits = (m) => m.replace(/[0-9]+/g, 'N');
        assert.equal(noDigits(rest.message), noDigits(e.message), 'the same message on both surfaces');
      }
      toolError(await callTool(c2, 'get_story', { id: idsByPart[0][0] }), 'unavailable');
      restUnavailable(await getStory(gw, key, idsByPart[0][0]), 'REST get_story');
    } finally {
      await c2.close().catch(() => {});
    }
    // the mixed gateway still has its local part: partial, not unavailable
    const m = await search(mixed, mixed.keys.main, { q: q() });
    assert.equal(m.status, 200, `mixed gateway, remotes all down: ${m.body}`);
    assert.equal(m.json.partial, true, m.body.slice(0, 200));
    assert.ok(m.json.total > 0, 'the local part answers');
    await sleep(500);  // several reconcile intervals (100 ms): any billing would show by now
    assert.equal((await usageOf(gw, key)).used, before0, 'unavailable answers are not billed');
  });

  test('shards restarted on the same ports: the gateway recovers (no "partial") within the bounded wait', async () => {
    for (let i = 0; i < shards.length; i++) shards[i] = await restart(shards[i]);
    const want = full(await search(reference, reference.keys.main, { q: q(), sort: 'date', limit: 20 }), 'reference');
    let last;
    await eventually(async () => {
      last = await search(gw, gw.keys.main, { q: q(), sort: 'date', limit: 20 });
      return last.status === 200 && !('partial' in last.json);
    }, RECOVER_WITHIN_MS, 'gateway recovered').catch((e) => { throw new Error(`${e.message}; last: ${last?.status} ${last?.body.slice(0, 200)}`); });
    const got = full(last, 'recovered');
    let up;
    await eventually(async () => {
      await search(gw, gw.keys.main, { q: q() });
      up = await shardUp(gw);
      return Object.keys(up).length === 3 && Object.values(up).every((v) => v === 1);
    }, RECOVER_WITHIN_MS, 'every shard up again in /metrics').catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(up)}`); });
    assert.equal(got.total, want.total);
    assert.deepEqual(got.stories.map((s) => s.id), want.stories.map((s) => s.id));
    await eventually(async () => {
      const r = await search(mixed, mixed.keys.main, { q: q() });
      return r.status === 200 && !('partial' in r.json);
    }, RECOVER_WITHIN_MS, 'mixed gateway recovered');
    const text = successText(await callTool(client, 'search_stories', { query: q(), sort: 'date', limit: 20 }));
    assert.equal(text, (await search(gw, gw.keys.main, { q: q(), sort: 'date', limit: 20 })).body);
    assert.equal((await getStory(gw, gw.keys.main, idsByPart[1][0])).status, 200);
    assert.equal((await getStory(gw, gw.keys.main, NO_SUCH_ID)).status, 404);
  });
});

// ----------------------------------------------------------------- hanging and garbage shards

/** A TCP server that accepts connections and never answers. */
function hangingServer() {
  return new Promise((resolve, reject) => {
    const sockets = new Set();
    let accepted = 0;
    const srv = net.createServer((sock) => {
      accepted++;
      sockets.add(sock);
      sock.on('data', () => {});
      sock.on('error', () => {});
      sock.on('close', () => sockets.delete(sock));
    });
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => resolve({
      port: srv.address().port,
      accepted: () => accepted,
      close: () => new Promise((r) => { for (const s of sockets) s.destroy(); srv.close(() => r()); }),
    }));
  });
}

/** An HTTP server answering every request with 200 and `body`. */
function garbageServer(body, contentType) {
  return new Promise((resolve, reject) => {
    let requests = 0;
    const srv = http.createServer((req, res) => {
      requests++;
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'Content-Type': contentType });
        res.end(body);
      });
    });
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => resolve({
      port: srv.address().port,
      requests: () => requests,
      close: () => new Promise((r) => { srv.closeAllConnections?.(); srv.close(() => r()); }),
    }));
  });
}

describe('a shard that hangs past the deadline, shards that answer garbage', () => {
  let shards = [];
  let hang;
  let notJson;
  let wrongShape;
  const gws = {};

  before(async () => {
    for (const f of partFiles) shards.push(await shardNode(f));
    hang = await hangingServer();
    notJson = await garbageServer('this is not JSON {{{', 'text/plain');
    wrongShape = await garbageServer('{"hello":"world"}', 'application/json');
    const live = shards.map(addr);
    gws.hang = await gateway({ shards: [...live, `127.0.0.1:${hang.port}`], local: false, deadlineMs: HANG_DEADLINE_MS });
    gws.notJson = await gateway({ shards: [...live, `127.0.0.1:${notJson.port}`], local: false, deadlineMs: HANG_DEADLINE_MS });
    gws.wrongShape = await gateway({ shards: [...live, `127.0.0.1:${wrongShape.port}`], local: false, deadlineMs: HANG_DEADLINE_MS });
  });

  after(async () => {
    await stopAll([...Object.values(gws), ...shards]);
    await Promise.all([hang, notJson, wrongShape].filter(Boolean).map((s) => s.close()));
  });

  test(`hanging shard, deadline_ms = ${HANG_DEADLINE_MS}: partial 3 of 4 with the full total, each call well under ${HANG_WALL_BOUND_MS} ms`, async () => {
    const gw = gws.hang;
    const before0 = hang.accepted();
    for (const q of queries.slice(0, 3)) {
      const want = full(await search(reference, reference.keys.main, { q: q.q, sort: 'date' }), 'reference');
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const r = await search(gw, gw.keys.main, { q: q.q, sort: 'date' });
        const ms = performance.now() - t0;
        const j = partial(r, 3, 4, `${q.q} #${i}`);
        assert.ok(ms < HANG_WALL_BOUND_MS, `the deadline holds: the call took ${Math.round(ms)} ms`);
        // the three real shards hold the whole corpus: nothing is missing
        assert.equal(j.total, want.total, `${q.q}: total`);
        assert.deepEqual(j.stories.map((s) => s.id), want.stories.map((s) => s.id), `${q.q}: ids`);
      }
    }
    assert.ok(hang.accepted() > before0, 'the gateway did ask the hanging shard');
    // get_story: found on a live shard -> the story; an id nowhere -> unavailable (the hanging
    // shard might hold it), both within the bound
    for (const [id, status] of [[idsByPart[2][0], 200], [NO_SUCH_ID, 503]]) {
      const t0 = performance.now();
      const r = await getStory(gw, gw.keys.main, id);
      const ms = performance.now() - t0;
      assert.equal(r.status, status, `get_story ${id}: ${r.body}`);
      if (status === 503) restUnavailable(r, `get_story ${id}`);
      assert.ok(ms < HANG_WALL_BOUND_MS, `get_story ${id}: the deadline holds: ${Math.round(ms)} ms`);
    }
  });

  test('a rate-limited call is answered 429 without asking any shard', async () => {
    // A plan with burst 2 and a very slow refill: the third call in a row is rate limited.
    const counting = await garbageServer('{"hello":"world"}', 'application/json');
    const gw = await start({
      keys: { tight: { account: 'acct-tight', plan: 'tight' } },
      plans: { tight: { rate_per_sec: 0.01, burst: 2, monthly_quota: 1000, overage: 'stop' } },
      threads: 1,
      extraConfig: fleetToml({ secret: SECRET, shards: [`127.0.0.1:${counting.port}`], local: true }),
    });
    try {
      const statuses = [];
      for (let i = 0; i < 5; i++) {
        const r = await search(gw, gw.keys.tight, { q: queries[0].q });
        statuses.push(r.status);
      }
      assert.deepEqual(statuses, [200, 200, 429, 429, 429], 'burst 2, then rate limited');
      // Each admitted call asks the shard for its document frequencies once (the garbage answer
      // ends that query's fan-out); the three 429s ask nothing.
      assert.equal(counting.requests(), 2, 'only the admitted calls reached the shard');
    } finally {
      await stopAll([gw]);
      await counting.close();
    }
  });

  for (const [name, label] of [['notJson', 'a non-JSON body'], ['wrongShape', 'JSON of the wrong shape']]) {
    test(`a shard answering 200 with ${label}: partial 3 of 4 with the full total`, async () => {
      const gw = gws[name];
      const garbage = name === 'notJson' ? notJson : wrongShape;
      const before0 = garbage.requests();
      for (const q of queries.slice(0, 3)) {
        const want = full(await search(reference, reference.keys.main, { q: q.q, sort: 'date' }), 'reference');
        for (let i = 0; i < 2; i++) {
          const j = partial(await search(gw, gw.keys.main, { q: q.q, sort: 'date' }), 3, 4, `${q.q} #${i}`);
          assert.equal(j.total, want.total, `${q.q}: total`);
          assert.deepEqual(j.stories.map((s) => s.id), want.stories.map((s) => s.id), `${q.q}: ids`);
        }
      }
      assert.ok(garbage.requests() > before0, 'the gateway did ask the garbage shard');
      // an id nowhere: the garbage shard's 200 is not a story, so nobody said "not here" for it
      restUnavailable(await getStory(gw, gw.keys.main, NO_SUCH_ID), 'get_story of an id nowhere');
    });
  }
});
