// Cluster mode through ordinary Redis faults (issue 28), end to end with real tollgate nodes and a
// real redis-server without persistence (started here on a free port, ended by PID):
//   - Redis paused (SIGSTOP): a request waiting for quota units never holds up another key's
//     requests on the same core (completion order), and is answered `unavailable` at its bound
//   - Redis restarted empty, then `keys create`: every old key still works on every node
//   - Redis restarted empty while a stop key is spent across nodes: never more than its quota
//   - idle keys cost Redis nothing: its own command count over a quiet interval
//   - a fresh key's first second across three busy nodes: within burst + rate x t
//   - a refused Redis password is named in the log; `config check` refuses an unset password_env
//   - `cluster import` refuses a key whose plan the cluster's config lacks (exit 2, nothing copied)
//   - Redis paused: a Stripe event delivered to the public listener is acted on off the core, so
//     /healthz on the same core completes before it (completion order)
//   - OAuth across nodes: a client registered on one node authorizes on another, the consent form
//     made by one is accepted by the other, a code is redeemed once across the cluster, a token
//     works on every node within 1 s, a refresh token's reuse on another node revokes the grant
//     everywhere within 1 s, `tollgate oauth` lists and revokes from Redis; Redis restarted
//     empty and an empty reader starting a new log first: tokens keep working, the nodes add
//     their grants to the new log, refresh and registration go on
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import Stripe from 'stripe';
import fs from 'node:fs';
import net from 'node:net';
import http from 'node:http';
import {
  prepare, start, runCli, restGet, eventually, loadAgent, cleanup, tempDir, stopProcess, request,
} from './harness.mjs';

const REDIS_BIN = '/usr/bin/redis-server';
const REDIS_CLI = '/usr/bin/redis-cli';
const haveRedis = fs.existsSync(REDIS_BIN) && fs.existsSync(REDIS_CLI);
const skip = !haveRedis && 'redis-server / redis-cli not installed';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// A redis-server without persistence: a kill -9 and a start make an empty Redis.
class Redis {
  constructor(port, extra = []) { this.port = port; this.extra = extra; this.dir = tempDir('tollgate-redis-'); this.child = null; }
  async start() {
    this.child = spawn(REDIS_BIN, ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir,
      '--save', '', '--appendonly', 'no', '--loglevel', 'warning', ...this.extra], { stdio: 'ignore' });
    this.exited = new Promise((r) => this.child.once('exit', r));
    await eventually(() => this.cli(['PING']).startsWith('PONG') || this.cli(['PING']).includes('NOAUTH'), 10000, `redis-server on ${this.port}`);
  }
  cli(args) {
    try {
      return execFileSync(REDIS_CLI, ['-p', String(this.port), ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) { return String(e.stdout ?? '') + String(e.stderr ?? ''); }
  }
  signal(sig) { process.kill(this.child.pid, sig); }
  async stop(signal = 'SIGKILL') {
    if (!this.child) return;
    try { process.kill(this.child.pid, signal); } catch { /* gone */ }
    await this.exited;
    this.child = null;
  }
  // Calls as Redis counts them (calls inside scripts included), by command.
  commandstats() {
    const out = {};
    for (const line of this.cli(['INFO', 'commandstats']).split('\n')) {
      const m = /^cmdstat_([a-z|_-]+):calls=(\d+)/.exec(line.trim());
      if (m) out[m[1]] = Number(m[2]);
    }
    return out;
  }
}

const PLANS = {
  roomy: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 100000000, overage: 'stop' },
  capped: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 3000, overage: 'stop' },
  paced: { rate_per_sec: 200, burst: 50, monthly_quota: 100000000, overage: 'stop' },
};
const QUOTA = { reconcile_ms: 200, fsync_ms: 50 };

const servers = [];
const redises = [];
after(async () => {
  for (const n of servers) { await n.stop().catch(() => {}); cleanup(n); }
  for (const r of redises) { await r.stop('SIGKILL'); fs.rmSync(r.dir, { recursive: true, force: true }); }
});

async function newRedis(extra = []) {
  const r = new Redis(await freePort(), extra);
  redises.push(r);
  await r.start();
  return r;
}

function clusterToml(redis, name, prefix, extra = '') {
  return `[cluster]\nredis = "127.0.0.1:${redis.port}"\nnode = "${name}"\nprefix = "${prefix}"\n${extra}`;
}

async function startNode(redis, name, prefix, { threads = 2, extra = '', extraArgs = [] } = {}) {
  const prepared = await prepare({ plans: PLANS, quota: QUOTA, extraConfig: clusterToml(redis, name, prefix, extra) });
  const n = await start({ prepared, threads, extraArgs });
  servers.push(n);
  return n;
}

async function createKey(node, account, plan) {
  const r = await runCli(['keys', 'create', '--account', account, '--plan', plan, '--config', node.configPath]);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout.trim();
}

async function known(nodes, keys) {
  const all = await Promise.all(nodes.flatMap((n) => keys.map((key) => restGet(n, '/v1/usage', { key }))));
  return all.every((r) => r.status === 200);
}

// One GET on its own connection; resolves with its status, body and when it completed.
// One request on a connection of its own; resolves {status, body, headers, at}, `at` being when its
// answer ended (process.hrtime), for the completion-order checks.
function timedRequest(port, { method = 'GET', path, headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method, agent: false, headers }, (res) => {
      let b = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { b += d; });
      res.on('end', () => resolve({ status: res.statusCode, body: b, headers: res.headers, at: process.hrtime.bigint() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function timedGet(node, path, key) {
  return timedRequest(node.port, { path, headers: { authorization: `Bearer ${key}` } });
}

test('redis paused: a request waiting for units never holds up another key on its core, and is answered unavailable at its bound', { skip }, async () => {
  const redis = await newRedis();
  // One core, so both keys' requests share it; a generous bound, so the order below does not
  // depend on how fast a loaded machine answers.
  const node = await startNode(redis, 'p1', 'pz:', { threads: 1, extra: 'lease_wait_ms = 800\n' });
  const other = await createKey(node, 'acct-other', 'roomy');
  const waiting = await createKey(node, 'acct-wait', 'roomy');
  await eventually(() => known([node], [other, waiting]), 3000, 'keys loaded');
  // `waiting` has never been billed here: its node holds no units of it, so its first billed
  // call needs Redis.
  await stopProcess(redis.child.pid);
  try {
    const slow = timedGet(node, '/v1/stories?q=the&limit=1', waiting);
    await new Promise((r) => setTimeout(r, 50));
    const fast = [];
    for (let i = 0; i < 5; i++) fast.push(await timedGet(node, '/v1/usage', other));
    const bad = await timedGet(node, '/v1/usage', 'tg_live_0000000000000000000000000000000000000000');
    const s = await slow;
    for (const f of fast) {
      assert.equal(f.status, 200);
      assert.ok(f.at < s.at, 'another key\'s request on the same core completed after the parked one');
    }
    assert.equal(bad.status, 401);
    assert.ok(bad.at < s.at, 'a 401 waited for the parked request');
    assert.equal(s.status, 503, s.body);
    const j = JSON.parse(s.body);
    assert.equal(j.code, 'unavailable');
    assert.ok(Number(s.headers['retry-after']) >= 1);
  } finally {
    redis.signal('SIGCONT');
  }
  // Redis answers again: the same call is served.
  await eventually(async () => (await restGet(node, '/v1/stories?q=the&limit=1', { key: waiting })).status === 200, 5000, 'served after SIGCONT');
});

test('redis restarted empty, then keys create: every old key still works on every node', { skip }, async () => {
  const redis = await newRedis();
  const n1 = await startNode(redis, 'e1', 'ez:');
  const n2 = await startNode(redis, 'e2', 'ez:');
  const old = [];
  for (let i = 0; i < 6; i++) old.push(await createKey(n1, `acct-old-${i}`, 'roomy'));
  await eventually(() => known([n1, n2], old), 3000, 'old keys on both nodes');
  await redis.stop('SIGKILL');
  await redis.start();  // empty: no persistence
  const fresh = await createKey(n1, 'acct-after', 'roomy');
  await eventually(() => known([n1, n2], [fresh]), 3000, 'the new key on both nodes');
  // The old keys were never revoked, on any node, at any time after the new one arrived.
  for (let round = 0; round < 5; round++) {
    assert.ok(await known([n1, n2], old), 'an old key was refused after the empty restart');
    await new Promise((r) => setTimeout(r, 200));
  }
  const listed = await runCli(['keys', 'list', '--config', n1.configPath]);
  assert.equal(listed.code, 0, listed.stderr);
  const ids = listed.stdout.match(/key_[0-9a-f]{16}/g) ?? [];
  assert.equal(new Set(ids).size, 7, listed.stdout);
  assert.match(n1.stderr() + n2.stderr(), /put back this node's copy/);
});

test('redis restarted empty while a stop key is spent across nodes: never more than its quota', { skip }, async () => {
  const redis = await newRedis();
  const n1 = await startNode(redis, 'q1', 'qz:');
  const n2 = await startNode(redis, 'q2', 'qz:');
  const key = await createKey(n1, 'acct-capped', 'capped');
  await eventually(() => known([n1, n2], [key]), 3000, 'key on both nodes');
  const drive = (node) => {
    const agent = loadAgent(4);
    const st = { ok: 0, other: {}, stopped: false, lastOk: Date.now() };
    const one = async () => {
      while (!st.stopped) {
        try {
          const r = await restGet(node, '/v1/stories?q=the&limit=1', { key, agent });
          if (r.status === 200) { st.ok++; st.lastOk = Date.now(); } else {
            st.other[r.status] = (st.other[r.status] ?? 0) + 1;
            await new Promise((res) => setTimeout(res, 10));
          }
        } catch { await new Promise((res) => setTimeout(res, 20)); }
      }
    };
    const workers = Array.from({ length: 4 }, one);
    st.stop = async () => { st.stopped = true; await Promise.all(workers); agent.destroy(); };
    return st;
  };
  const d = [drive(n1), drive(n2)];
  await eventually(() => d[0].ok + d[1].ok >= 1500, 30000, 'half the quota spent');
  await redis.stop('SIGKILL');
  await new Promise((r) => setTimeout(r, 300));
  await redis.start();
  // Spend on until nothing was admitted anywhere for 3 s (bounded).
  const t0 = Date.now();
  while (Date.now() - Math.max(d[0].lastOk, d[1].lastOk) < 3000 && Date.now() - t0 < 40000) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await Promise.all(d.map((x) => x.stop()));
  const total = d[0].ok + d[1].ok;
  assert.ok(total <= 3000, `admitted ${total} calls of a stop key with quota 3000 (${JSON.stringify(d.map((x) => x.other))})`);
  assert.ok(total >= 2500, `only ${total} of 3000 admitted: the recovery stranded units`);
});

test('idle keys cost redis nothing: its own command count over a quiet interval', { skip }, async () => {
  const redis = await newRedis();
  const node = await startNode(redis, 'i1', 'iz:');
  const keys = await Promise.all(Array.from({ length: 60 }, (_, i) => createKey(node, `acct-idle-${i}`, 'roomy')));
  await eventually(() => known([node], keys.slice(-3)), 5000, 'keys loaded');
  // Each key billed once, then left alone: every one has usage and a claim in Redis.
  for (const key of keys) assert.equal((await restGet(node, '/v1/stories?q=the&limit=1', { key })).status, 200);
  // Pushes settle, units go back, demand decays, and a key quiet for 3 s falls silent.
  await new Promise((r) => setTimeout(r, 5000));
  redis.cli(['CONFIG', 'RESETSTAT']);
  await new Promise((r) => setTimeout(r, 3000));
  const stats = redis.commandstats();
  const total = Object.entries(stats).filter(([c]) => c !== 'info' && c !== 'config|resetstat' && c !== 'config').reduce((a, [, v]) => a + v, 0);
  // A node's own cost with no traffic: its key-version poll (5/s) and heartbeat (2 commands/s),
  // whatever the number of keys; the key pushes (scripts) are gone.
  assert.equal(stats.evalsha ?? 0, 0, JSON.stringify(stats));
  assert.ok(total <= 40, `${total} commands in 3 quiet seconds with 60 idle keys: ${JSON.stringify(stats)}`);
});

test('a fresh key hit on three nodes at once: its first second stays within burst + rate x t', { skip }, async (t) => {
  const redis = await newRedis();
  const ns = [];
  for (let i = 0; i < 3; i++) ns.push(await startNode(redis, `f${i}`, 'fz:'));
  const key = await createKey(ns[0], 'acct-fresh', 'paced');
  // Not probed (a probe is rated): the nodes poll the key version every 200 ms.
  await new Promise((r) => setTimeout(r, 1500));
  const arrivals = [];
  let stop = false;
  const t0 = process.hrtime.bigint();
  const workers = ns.flatMap((n) => Array.from({ length: 6 }, async () => {
    const agent = loadAgent(1);
    while (!stop) {
      const r = await restGet(n, '/v1/usage', { key, agent });
      if (r.status === 200) arrivals.push(Number(process.hrtime.bigint() - t0) / 1e6);
      else assert.equal(r.status, 429, r.body);
    }
    agent.destroy();
  }));
  await new Promise((r) => setTimeout(r, 1300));
  stop = true;
  await Promise.all(workers);
  const within = (ms) => arrivals.filter((a) => a <= ms).length;
  t.diagnostic(`admitted: ${within(250)} in 0.25 s, ${within(1000)} in 1 s`);
  // rate 200/s, burst 50: burst + rate x t, plus one per node past the first (each node's burst
  // share is at least 1).
  assert.ok(within(250) <= 50 + 200 * 0.25 + 2, `first 0.25 s: ${within(250)} admitted (bound 102)`);
  assert.ok(within(1000) <= 50 + 200 + 2, `first second: ${within(1000)} admitted (bound 252)`);
  assert.ok(within(1000) >= 150, `first second: only ${within(1000)} admitted`);
});

test('a refused redis password is named in the log, and config check refuses an unset password_env', { skip }, async () => {
  const redis = await newRedis(['--requirepass', 'right-secret']);
  process.env.TG_TEST_REDIS_PW = 'wrong-secret';
  try {
    const node = await startNode(redis, 'w1', 'wz:', { extra: 'password_env = "TG_TEST_REDIS_PW"\n' });
    await eventually(() => /password was refused/.test(node.stderr()), 5000, 'the refused password in the log');
    const r = await restGet(node, '/v1/usage', { key: 'tg_live_0000000000000000000000000000000000000000' });
    assert.equal(r.status, 503);
    delete process.env.TG_TEST_REDIS_PW;
    const check = await runCli(['config', 'check', '--config', node.configPath]);
    assert.equal(check.code, 2, check.stdout + check.stderr);
    assert.match(check.stderr, /TG_TEST_REDIS_PW is not set/);
  } finally {
    delete process.env.TG_TEST_REDIS_PW;
  }
});

test('cluster import refuses a key on a plan the cluster config lacks, naming it, and copies nothing', { skip }, async () => {
  const redis = await newRedis();
  // A single node whose key is on plan `legacy`, which the cluster's config does not define.
  const solo = await prepare({
    plans: { ...PLANS, legacy: PLANS.roomy }, quota: QUOTA,
    keys: { k: { account: 'acct-legacy', plan: 'legacy' } },
  });
  const cfg = `${solo.dataDir}-cluster.toml`;
  const prepared = await prepare({ plans: PLANS, quota: QUOTA, extraConfig: clusterToml(redis, 'imp', 'mz:') });
  fs.copyFileSync(prepared.configPath, cfg);
  try {
    const r = await runCli(['cluster', 'import', '--config', cfg, '--data-dir', solo.dataDir]);
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.match(r.stderr, /key_[0-9a-f]{16} \(account acct-legacy\) is on plan "legacy"/);
    assert.match(r.stderr, /nothing imported/);
    assert.equal(redis.cli(['HLEN', 'mz:{keys}:keys']).trim(), '0');
  } finally {
    fs.rmSync(cfg, { force: true });
  }
});

test('redis paused: a Stripe event on the public listener is acted on off the core, never holding up /healthz', { skip }, async () => {
  const redis = await newRedis();
  process.env.STRIPE_WEBHOOK_SECRET = 'whsec_cluster_pause_4d2a';
  try {
    const node = await startNode(redis, 'w1', 'wz:', {
      threads: 1,
      extra: '[stripe]\nwebhook_secret_env = "STRIPE_WEBHOOK_SECRET"\npublic_webhook = true\n',
    });
    const stripe = new Stripe('sk_test_not_used_offline');
    const deliver = (id) => {
      const body = JSON.stringify({ id, object: 'event', type: 'charge.refunded', created: Math.floor(Date.now() / 1000),
        data: { object: { id: 'ch_1', object: 'charge' } } });
      return timedRequest(node.port, { method: 'POST', path: '/admin/webhooks/stripe', body, headers: {
        'content-type': 'application/json',
        'stripe-signature': stripe.webhooks.generateTestHeaderString({ payload: body, secret: process.env.STRIPE_WEBHOOK_SECRET }),
      } });
    };
    const before = await deliver('evt_pause_0');
    assert.equal(before.status, 200, before.body);
    await stopProcess(redis.child.pid);
    let slow;
    try {
      slow = deliver('evt_pause_1');  // its duplicate check waits for Redis (up to the timeout)
      await new Promise((r) => setTimeout(r, 100));
      const fast = [];
      for (let i = 0; i < 3; i++) fast.push(await timedGet(node, '/healthz', ''));
      const w = await slow;
      for (const f of fast) {
        assert.equal(f.status, 200);
        assert.ok(f.at < w.at, '/healthz on the same core completed after the webhook waiting for Redis');
      }
    } finally {
      redis.signal('SIGCONT');
    }
    // Redis back: the next event is acted on, and a redelivery of the first is a duplicate.
    const after1 = await eventually(async () => { const r = await deliver('evt_pause_2'); return r.status === 200 ? r : null; }, 5000, 'an event after the pause');
    assert.equal(JSON.parse(after1.body).action, 'none');
    assert.equal((await deliver('evt_pause_0')).status, 409);
  } finally {
    delete process.env.STRIPE_WEBHOOK_SECRET;
  }
});

test('redis paused: an admin change waits off the admin listener\'s core, never holding up its /healthz and /metrics', { skip }, async () => {
  const redis = await newRedis();
  process.env.TOLLGATE_ADMIN_TOKEN = 'adm_cluster_pause_7c1e';
  try {
    const node = await startNode(redis, 'a1', 'az:', {
      threads: 1,
      extra: '[admin]\ntoken_env = "TOLLGATE_ADMIN_TOKEN"\n',
      extraArgs: ['--admin-listen', '127.0.0.1:0'],
    });
    const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(node.stderr())?.[1]);
    assert.ok(port > 0, node.stderr());
    const adminNode = { port };
    const call = (method, path, body) => timedRequest(port, { method, path,
      headers: { authorization: `Bearer ${process.env.TOLLGATE_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body) });
    const made = await call('POST', '/admin/accounts', { id: 'acme-p' });
    assert.equal(made.status, 201, made.body);
    await stopProcess(redis.child.pid);
    let slow;
    try {
      slow = call('POST', '/admin/keys', { account: 'acme-p', plan: 'roomy' });  // waits for Redis
      await new Promise((r) => setTimeout(r, 100));
      const fast = [];
      for (let i = 0; i < 3; i++) fast.push(await timedGet(adminNode, i === 1 ? '/metrics' : '/healthz', ''));
      const w = await slow;
      for (const f of fast) {
        assert.equal(f.status, 200);
        assert.ok(f.at < w.at, 'an ops route on the admin listener completed after the admin change waiting for Redis');
      }
    } finally {
      redis.signal('SIGCONT');
    }
    // Redis back: the next change is made, and its key works on the public listener.
    const key = await eventually(async () => {
      const r = await call('POST', '/admin/keys', { account: 'acme-p', plan: 'roomy' });
      return r.status === 201 ? JSON.parse(r.body).key : null;
    }, 5000, 'a key made after the pause');
    await eventually(async () => (await restGet(node, '/v1/usage', { key })).status === 200, 3000, 'the new key in force');
  } finally {
    delete process.env.TOLLGATE_ADMIN_TOKEN;
  }
});

// ------------------------------------------------------------------------------------ OAuth

const REDIRECT = 'http://127.0.0.1:9/callback';  // never fetched: the test reads the 302

function postForm(url, fields) {
  return request(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
  });
}

function hiddenFields(html) {
  const un = (v) => v.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
  const out = {};
  for (const m of html.matchAll(/<input type="hidden" name="([^"]*)" value="([^"]*)">/g)) out[un(m[1])] = un(m[2]);
  return out;
}

// A code for `clientId`: the consent page from node `pageFrom`, the form posted to `postTo`.
async function codeAcross(pageFrom, postTo, clientId, key) {
  const verifier = crypto.randomBytes(32).toString('base64url');
  const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
  const q = new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: REDIRECT, state: 's',
    code_challenge: challenge, code_challenge_method: 'S256' });
  const page = await request(`${pageFrom.url}/authorize?${q}`);
  assert.equal(page.status, 200, page.body);
  const answer = await postForm(`${postTo.url}/authorize`, { ...hiddenFields(page.body), api_key: key, action: 'allow' });
  assert.equal(answer.status, 302, answer.body);
  const code = new URL(answer.headers.location).searchParams.get('code');
  assert.ok(code, answer.headers.location);
  return { code, verifier };
}

async function tokenAt(node, fields) {
  const r = await postForm(`${node.url}/token`, fields);
  return { status: r.status, json: JSON.parse(r.body) };
}

async function registerAt(node) {
  const r = await request(`${node.url}/register`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ client_name: 'cluster client', redirect_uris: [REDIRECT] }),
  });
  assert.equal(r.status, 201, r.body);
  return JSON.parse(r.body).client_id;
}

const statusWith = async (node, token) => (await restGet(node, '/v1/usage', { key: token })).status;
const everywhere = async (nodes, token, status) => (await Promise.all(nodes.map((n) => statusWith(n, token)))).every((s) => s === status);

test('OAuth across nodes: codes once, tokens and revocations everywhere within 1 s, and through an empty Redis', { skip }, async () => {
  const redis = await newRedis();
  const extra = '[oauth]\nenabled = true\n';
  const n1 = await startNode(redis, 'o1', 'oz:', { extra });
  const n2 = await startNode(redis, 'o2', 'oz:', { extra });
  const key = await createKey(n1, 'acct-oauth', 'roomy');
  await eventually(() => known([n1, n2], [key]), 3000, 'the key on both nodes');

  // Registered on n1, authorized through n2's page and n1's form (one form key cluster-wide).
  const clientId = await registerAt(n1);
  const { code, verifier } = await codeAcross(n2, n1, clientId, key);
  const redeem = { grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: REDIRECT, client_id: clientId };
  const [a, b] = await Promise.all([tokenAt(n2, redeem), tokenAt(n1, redeem)]);  // at once, on two nodes
  assert.deepEqual([a.status, b.status].sort(), [200, 400], JSON.stringify([a.json, b.json]));
  const tok = (a.status === 200 ? a : b).json;
  assert.equal((a.status === 400 ? a : b).json.error, 'invalid_grant');
  await eventually(() => everywhere([n1, n2], tok.access_token, 200), 1000, 'the token on both nodes within 1 s');

  // A refresh on n2; the spent refresh token presented to n1 revokes the grant on both nodes.
  const fresh = await tokenAt(n2, { grant_type: 'refresh_token', refresh_token: tok.refresh_token, client_id: clientId });
  assert.equal(fresh.status, 200, JSON.stringify(fresh.json));
  await eventually(() => everywhere([n1, n2], fresh.json.access_token, 200), 1000, 'the refreshed token on both nodes');
  const reuse = await tokenAt(n1, { grant_type: 'refresh_token', refresh_token: tok.refresh_token, client_id: clientId });
  assert.equal(reuse.status, 400);
  assert.match(reuse.json.error_description, /already used/);
  await eventually(() => everywhere([n1, n2], fresh.json.access_token, 401), 1000, 'the grant revoked on both nodes within 1 s');

  // A second grant, then `tollgate oauth` from Redis: listed, and revoked by key everywhere.
  const c2 = await codeAcross(n1, n2, clientId, key);
  const t2 = await tokenAt(n1, { grant_type: 'authorization_code', code: c2.code, code_verifier: c2.verifier, redirect_uri: REDIRECT, client_id: clientId });
  assert.equal(t2.status, 200, JSON.stringify(t2.json));
  const listed = await runCli(['oauth', 'list', '--config', n2.configPath]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.equal((listed.stdout.match(/tgg_[0-9a-f]+/g) ?? []).length, 2, listed.stdout);
  const keyId = /key_[0-9a-f]{16}/.exec(listed.stdout)[0];
  await eventually(() => everywhere([n1, n2], t2.json.access_token, 200), 1000, 'the second token on both nodes');

  // Redis restarted empty, and an empty reader (the CLI) starts a new log before either node
  // notices (both held still meanwhile): the nodes add what they hold to it, so nothing is lost;
  // the tokens in force stay in force, and the grant goes on (refresh, registration).
  await stopProcess(n1.pid);
  await stopProcess(n2.pid);
  try {
    await redis.stop('SIGKILL');
    await redis.start();
    const early = await runCli(['oauth', 'list', '--config', n2.configPath]);
    assert.equal(early.code, 0, early.stderr);
    assert.equal((early.stdout.match(/tgg_[0-9a-f]+/g) ?? []).length, 0, early.stdout);
  } finally {
    process.kill(n1.pid, 'SIGCONT');
    process.kill(n2.pid, 'SIGCONT');
  }
  await eventually(async () => {
    const l = await runCli(['oauth', 'list', '--config', n2.configPath]);
    // The live grant (the first was revoked by the reuse: nothing of it is put back).
    return (l.stdout.match(/tgg_[0-9a-f]+/g) ?? []).length === 1 && /\bactive\b/.test(l.stdout);
  }, 5000, 'the live grant back in Redis').catch((e) => {
    throw new Error(`${e.message}\n${[n1, n2].map((n) => n.stderr().split('\n').filter((x) => /oauth/.test(x)).join('\n')).join('\n====\n')}`);
  });
  for (let i = 0; i < 5; i++) {
    assert.ok(await everywhere([n1, n2], t2.json.access_token, 200), 'a token refused after the empty restart');
    await new Promise((r) => setTimeout(r, 200));
  }
  const again = await eventually(async () => {
    const r = await tokenAt(n2, { grant_type: 'refresh_token', refresh_token: t2.json.refresh_token, client_id: clientId });
    return r.status === 200 ? r : null;
  }, 5000, 'a refresh after the empty restart');
  await eventually(() => everywhere([n1, n2], again.json.access_token, 200), 1000, 'the refreshed token on both nodes');
  assert.match(n1.stderr() + n2.stderr(), /lines this node held added to it/);
  const other = await registerAt(n2);
  const c3 = await codeAcross(n1, n1, other, key);
  assert.equal((await tokenAt(n2, { grant_type: 'authorization_code', code: c3.code, code_verifier: c3.verifier, redirect_uri: REDIRECT, client_id: other })).status, 200);

  const revoked = await runCli(['oauth', 'revoke', '--key', keyId, '--config', n1.configPath]);
  assert.equal(revoked.code, 0, revoked.stderr);
  await eventually(() => everywhere([n1, n2], again.json.access_token, 401), 1000, 'revoked by key on both nodes within 1 s');

  // `tollgate keys revoke` ends the key's tokens on every node within 1 s, and its grants.
  const c4 = await codeAcross(n2, n2, other, key);
  const t4 = await tokenAt(n1, { grant_type: 'authorization_code', code: c4.code, code_verifier: c4.verifier, redirect_uri: REDIRECT, client_id: other });
  assert.equal(t4.status, 200, JSON.stringify(t4.json));
  await eventually(() => everywhere([n1, n2], t4.json.access_token, 200), 1000, 'the last token on both nodes');
  const gone = await runCli(['keys', 'revoke', keyId, '--config', n2.configPath]);
  assert.equal(gone.code, 0, gone.stderr);
  assert.match(gone.stdout, /revoked 1 OAuth grant/);
  await eventually(() => everywhere([n1, n2], t4.json.access_token, 401), 1000, 'the key\'s token refused on both nodes within 1 s');
  const late = await tokenAt(n1, { grant_type: 'refresh_token', refresh_token: t4.json.refresh_token, client_id: other });
  assert.equal(late.status, 400, JSON.stringify(late.json));
});
