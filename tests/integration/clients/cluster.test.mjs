// Cluster mode (issue 15) end to end: tollgate nodes on one host share keys, accounts and monthly
// quotas through a real redis-server (started here on a free port with AOF on, ended by PID).
//   - three nodes hammer one stop key of quota Q at once: exactly Q admitted, every node reports Q
//   - a suspension and a revocation reach every node within 1 s, with no signal
//   - one key's rate limit across three nodes: at most burst + rate x t, and within 10% of it
//   - kill -9 of a node under load, restart: the cluster's usage equals the answered calls
//   - Redis killed and restarted under load: bill keys served throughout and counted exactly; a
//     stop key whose lease runs out meanwhile gets 503 `unavailable`, never quota_exceeded
//   - a node started while Redis is down: /readyz 503 and requests 503 until it loads keys
//   - the admin API on one node: an account with a customer id, a key, a plan change and a
//     rotation in force on another node within its poll; the usage export sums every node
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import {
  prepare, start, restart, runCli, restGet, usageOf, eventually, loadAgent, cleanup, tempDir, request,
} from './harness.mjs';
import { exposedMetrics, deployFiles, isClusterMetric } from './deploy_metrics.mjs';
import Stripe from 'stripe';

const REDIS_BIN = '/usr/bin/redis-server';
const haveRedis = fs.existsSync(REDIS_BIN);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    let buf = '';
    const done = (v) => { c.destroy(); resolve(v); };
    c.setTimeout(300, () => done(false));
    c.on('error', () => done(false));
    c.on('data', (d) => { buf += d; if (buf.includes('\r\n')) done(buf.startsWith('+PONG')); });
    c.on('connect', () => c.write('PING\r\n'));
  });
}

// A redis-server with its own dir (AOF on, fsync always: a kill -9 loses nothing written).
class Redis {
  constructor(port) { this.port = port; this.dir = tempDir('tollgate-redis-'); this.child = null; }
  async start() {
    this.child = spawn(REDIS_BIN, ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir,
      '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--loglevel', 'warning'], { stdio: 'ignore' });
    this.exited = new Promise((r) => this.child.once('exit', r));
    await eventually(() => ping(this.port), 10000, `redis-server on port ${this.port}`);
  }
  async stop(signal = 'SIGTERM') {
    if (!this.child) return;
    try { process.kill(this.child.pid, signal); } catch { /* gone */ }
    await this.exited;
    this.child = null;
  }
}

const PLANS = {
  capped: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 400, overage: 'stop' },
  roomy: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 100000000, overage: 'stop' },
  billed: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 100, overage: 'bill' },
  paced: { rate_per_sec: 40, burst: 40, monthly_quota: 100000000, overage: 'stop' },
};
const QUOTA = { reconcile_ms: 200, fsync_ms: 50 };

let redis;
const nodes = [];
after(async () => {
  for (const n of nodes) { await n.stop().catch(() => {}); cleanup(n); }
  await redis?.stop('SIGKILL');
  if (redis) fs.rmSync(redis.dir, { recursive: true, force: true });
});

function clusterToml(name, prefix) {
  return `[cluster]\nredis = "127.0.0.1:${redis.port}"\nnode = "${name}"\nprefix = "${prefix}"\n`;
}

async function startNode(name, prefix, keys = {}) {
  const prepared = await prepare({ plans: PLANS, quota: QUOTA, extraConfig: clusterToml(name, prefix), keys });
  const n = await start({ prepared, threads: 2 });
  nodes.push(n);
  return n;
}

// Keeps `conns` requests in flight against `node` until stop(); counts answers by status.
function drive(node, key, { conns = 8, path = '/v1/stories?q=the&limit=1' } = {}) {
  const agent = loadAgent(conns);
  const st = { ok: 0, byStatus: {}, bodies: [], inFlight: 0, stopped: false, lastOk: Date.now() };
  const one = async () => {
    while (!st.stopped) {
      st.inFlight++;
      try {
        const r = await restGet(node, path, { key, agent });
        st.byStatus[r.status] = (st.byStatus[r.status] ?? 0) + 1;
        if (r.status === 200) { st.ok++; st.lastOk = Date.now(); } else if (st.bodies.length < 50) st.bodies.push([r.status, r.body, r.headers['retry-after']]);
        if (r.status !== 200) await new Promise((res) => setTimeout(res, 5));
      } catch {
        st.errors = (st.errors ?? 0) + 1;
        await new Promise((res) => setTimeout(res, 20));
      } finally { st.inFlight--; }
    }
  };
  const workers = Array.from({ length: conns }, one);
  st.stop = async () => { st.stopped = true; await Promise.all(workers); agent.destroy(); };
  st.stopNow = () => { st.stopped = true; const f = st.inFlight; return f; };
  st.done = () => Promise.all(workers).then(() => agent.destroy());
  return st;
}

async function keyId(prepared, name) {
  return /created\s+(key_[0-9a-f]+)/.exec(prepared.keyOutputs[name])[1];
}

test('three nodes, one stop key of quota Q: exactly Q admitted, every node reports Q', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  redis = new Redis(await freePort());
  await redis.start();
  const n1 = await startNode('n1', 'it1:', { capped: { account: 'acct-capped', plan: 'capped' } });
  const n2 = await startNode('n2', 'it1:');
  const n3 = await startNode('n3', 'it1:');
  const key = n1.keys.capped;
  const drives = [n1, n2, n3].map((n) => drive(n, key));
  // Until nothing was admitted anywhere for 1.5 s (unused leases go back within that).
  await eventually(() => drives.every((d) => Date.now() - d.lastOk > 1500), 60000, 'the quota spent');
  await Promise.all(drives.map((d) => d.stop()));
  const total = drives.reduce((a, d) => a + d.ok, 0);
  const statuses = drives.map((d) => d.byStatus);
  assert.equal(total, PLANS.capped.monthly_quota, `admitted ${total}: ${JSON.stringify(statuses)}`);
  for (const d of drives) {
    for (const s of Object.keys(d.byStatus)) assert.ok(s === '200' || s === '429', `status ${s}: ${JSON.stringify(d.bodies.slice(0, 3))}`);
    for (const [, body] of d.bodies) assert.equal(JSON.parse(body).code, 'quota_exceeded');
  }
  for (const n of [n1, n2, n3]) {
    await eventually(async () => (await usageOf(n, key)).used === PLANS.capped.monthly_quota, 3000, `node ${n.port} reporting Q`);
  }
});

test('a suspension and a revocation reach every node within 1 s, with no signal', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const [n1, n2, n3] = nodes;
  const made = await runCli(['keys', 'create', '--account', 'acct-live', '--plan', 'roomy', '--config', n1.configPath]);
  assert.equal(made.code, 0, made.stderr);
  const key = made.stdout.trim();
  const id = /created\s+(key_[0-9a-f]+)/.exec(made.stderr)[1];
  const statusEverywhere = async () => Promise.all([n1, n2, n3].map(async (n) => (await restGet(n, '/v1/stories?q=the&limit=1', { key })).status));
  await eventually(async () => (await statusEverywhere()).every((s) => s === 200), 1000, 'the new key known on every node');

  const list = await runCli(['keys', 'list', '--config', n2.configPath]);
  assert.match(list.stdout, new RegExp(`${id}\\s+acct-live\\s+roomy`));

  let r = await runCli(['accounts', 'suspend', 'acct-live', '--config', n1.configPath]);
  assert.equal(r.code, 0, r.stderr);
  let t0 = Date.now();
  await eventually(async () => (await statusEverywhere()).every((s) => s === 403), 2000, 'suspension on every node');
  assert.ok(Date.now() - t0 <= 1000, `suspension took ${Date.now() - t0} ms`);

  r = await runCli(['accounts', 'resume', 'acct-live', '--config', n1.configPath]);
  assert.equal(r.code, 0, r.stderr);
  await eventually(async () => (await statusEverywhere()).every((s) => s === 200), 2000, 'resumed on every node');

  r = await runCli(['keys', 'revoke', id, '--config', n3.configPath]);
  assert.equal(r.code, 0, r.stderr);
  t0 = Date.now();
  await eventually(async () => (await statusEverywhere()).every((s) => s === 401), 2000, 'revocation on every node');
  assert.ok(Date.now() - t0 <= 1000, `revocation took ${Date.now() - t0} ms`);
});

test('the rate limit holds across three nodes: burst + rate x t at most, and close to it', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const [n1, n2, n3] = nodes;
  const made = await runCli(['keys', 'create', '--account', 'acct-rate', '--plan', 'paced', '--config', n1.configPath]);
  assert.equal(made.code, 0, made.stderr);
  const key = made.stdout.trim();
  await eventually(async () => {
    const all = await Promise.all([n1, n2, n3].map((n) => restGet(n, '/v1/usage', { key })));
    return all.every((r) => r.status === 200);
  }, 2000, 'key known on every node');
  await new Promise((r) => setTimeout(r, 1500));  // the probes above spent some burst: refill
  const seconds = 5;
  const drives = [n1, n2, n3].map((n) => drive(n, key, { conns: 6, path: '/v1/usage' }));
  const t0 = Date.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  await Promise.all(drives.map((d) => d.stop()));
  const elapsed = (Date.now() - t0) / 1000;
  const admitted = drives.reduce((a, d) => a + d.ok, 0);
  const { rate_per_sec: rate, burst } = PLANS.paced;
  // README (cluster mode, rate limits): burst + rate x t, + 1 per extra node (each node's burst
  // is at least 1), + what share moves add while they settle (at most 0.1 per growing node per
  // sync): allowed 5% here.
  const bound = (burst + rate * elapsed) * 1.05 + 2;
  const perNode = drives.map((d) => d.ok);
  assert.ok(admitted <= bound, `admitted ${admitted} > ${bound.toFixed(0)} (${perNode})`);
  assert.ok(admitted >= 0.9 * (burst + rate * seconds), `admitted ${admitted} < 90% of ${burst + rate * seconds} (${perNode})`);
  for (const d of drives) for (const s of Object.keys(d.byStatus)) assert.ok(s === '200' || s === '429', s);
});

test('a key served by one node of three (sticky sessions) gets close to its whole rate there', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const [n1, n2, n3] = nodes;
  const made = await runCli(['keys', 'create', '--account', 'acct-sticky', '--plan', 'paced', '--config', n1.configPath]);
  assert.equal(made.code, 0, made.stderr);
  const key = made.stdout.trim();
  await eventually(async () => (await restGet(n1, '/v1/usage', { key })).status === 200, 2000, 'key known on n1');
  // Every node serves the key for a while (so each reports a demand for it), then only n1 does.
  const all = [n1, n2, n3].map((n) => drive(n, key, { conns: 2, path: '/v1/usage' }));
  await new Promise((r) => setTimeout(r, 1500));
  await Promise.all(all.map((x) => x.stop()));
  const d = drive(n1, key, { conns: 6, path: '/v1/usage' });
  await new Promise((r) => setTimeout(r, 3000));  // shares follow demand: 0.1 per sync
  const ok0 = d.ok;
  const t0 = Date.now();
  await new Promise((r) => setTimeout(r, 5000));
  const admitted = d.ok - ok0;
  const elapsed = (Date.now() - t0) / 1000;
  await d.stop();
  const { rate_per_sec: rate } = PLANS.paced;
  // README: the idle nodes keep a floor of 1/(10C) each and no more, so n1 converges to
  // 1 - 2/30 = 0.93 of the rate with three nodes; the issue asks for within 10% over 5 s.
  console.error(`# sticky: ${admitted} in ${elapsed}s = ${(admitted / (rate * elapsed)).toFixed(3)} of the rate`);
  assert.ok(admitted >= 0.9 * rate * elapsed, `admitted ${admitted} in ${elapsed}s < 90% of ${rate}/s`);
  assert.ok(admitted <= rate * elapsed + 2, `admitted ${admitted} in ${elapsed}s > ${rate}/s`);
});

test('kill -9 of a node under load, restart: the cluster usage equals the answered calls', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const [n1, n2] = nodes;
  const made = await runCli(['keys', 'create', '--account', 'acct-crash', '--plan', 'roomy', '--config', n1.configPath]);
  const key = made.stdout.trim();
  await eventually(async () => (await restGet(n1, '/v1/usage', { key })).status === 200, 2000, 'key known');
  const d = drive(n1, key, { conns: 16 });
  await new Promise((r) => setTimeout(r, 1500));
  const inFlight = d.stopNow();
  await n1.kill9();
  await d.done();
  const answered = d.ok;
  assert.ok(answered > 0);
  const again = await restart(n1);
  nodes[0] = again;
  // The restarted node pushes what its journal holds; the other node sees the sum.
  const used = await eventually(async () => {
    const u = (await usageOf(n2, key)).used;
    return u >= answered ? u : false;
  }, 5000, 'usage pushed after the restart');
  assert.ok(used <= answered + inFlight, `usage ${used} > answered ${answered} + in flight ${inFlight}`);
  assert.equal((await usageOf(again, key)).used, used);
});

test('redis killed and restarted under load: bill keys served and counted exactly, stop keys get unavailable', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const [n1, n2, n3] = nodes;
  let made = await runCli(['keys', 'create', '--account', 'acct-bill', '--plan', 'billed', '--config', n1.configPath]);
  const billKey = made.stdout.trim();
  made = await runCli(['keys', 'create', '--account', 'acct-stop', '--plan', 'roomy', '--config', n1.configPath]);
  const stopKey = made.stdout.trim();
  await eventually(async () => {
    const all = await Promise.all([n1, n2, n3].flatMap((n) => [billKey, stopKey].map((key) => restGet(n, '/v1/usage', { key }))));
    return all.every((r) => r.status === 200);
  }, 2000, 'keys known on every node');
  const bills = [n1, n2].map((n) => drive(n, billKey, { conns: 4 }));
  const stop = drive(n3, stopKey, { conns: 4 });
  await new Promise((r) => setTimeout(r, 700));
  await redis.stop('SIGKILL');
  // The stop key's node runs out of its lease: 503 unavailable (never 429 quota_exceeded).
  await eventually(() => (stop.byStatus[503] ?? 0) > 0, 15000, 'a 503 for the stop key during the outage');
  await new Promise((r) => setTimeout(r, 500));
  await redis.start();
  await new Promise((r) => setTimeout(r, 1500));
  await Promise.all([...bills, stop].map((d) => d.stop()));
  for (const d of bills) assert.deepEqual(Object.keys(d.byStatus), ['200'], JSON.stringify(d.bodies.slice(0, 3)));
  assert.equal(stop.byStatus[429], undefined, JSON.stringify(stop.bodies.slice(0, 3)));
  const [status, body, retryAfter] = stop.bodies.find(([s]) => s === 503);
  assert.equal(status, 503);
  const j = JSON.parse(body);
  assert.equal(j.code, 'unavailable');
  assert.match(j.message, /quota service cannot be reached/);
  assert.ok(Number(retryAfter) >= 1);
  const billed = bills.reduce((a, d) => a + d.ok, 0);
  for (const n of [n1, n2, n3]) {
    await eventually(async () => (await usageOf(n, billKey)).used === billed, 5000, `node ${n.port} reporting ${billed}`);
  }
  await eventually(async () => (await usageOf(n3, stopKey)).used === stop.ok, 5000, 'stop key usage exact');
});

test('a node started while redis is down is not ready and answers 503 until it loads keys', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const key = nodes[1].keys.capped ?? (await runCli(['keys', 'create', '--account', 'acct-late', '--plan', 'roomy', '--config', nodes[1].configPath])).stdout.trim();
  await redis.stop('SIGTERM');
  const n4 = await startNode('n4', 'it1:');
  let r = await request(`${n4.url}/readyz`);
  assert.equal(r.status, 503);
  r = await restGet(n4, '/v1/stories?q=the', { key });
  assert.equal(r.status, 503);
  assert.equal(JSON.parse(r.body).code, 'unavailable');
  assert.ok(Number(r.headers['retry-after']) >= 1);
  await redis.start();
  await eventually(async () => (await request(`${n4.url}/readyz`)).status === 200, 5000, 'ready once redis is back');
  r = await restGet(n4, '/v1/usage', { key });
  assert.equal(r.status, 200);
  // Every node heartbeats again within a couple of seconds of Redis coming back.
  await eventually(async () => {
    const st = await runCli(['cluster', 'status', '--config', n4.configPath, '--json']);
    const j = JSON.parse(st.stdout);
    return st.code === 0 && j.reachable === true &&
      ['n1', 'n2', 'n3', 'n4'].every((n) => j.nodes.some((x) => x.node === n && x.state === 'up'));
  }, 5000, 'cluster status listing n1-n4 up');
});

test('cluster import moves a single node\'s keys and usage into redis, once; its dir is then refused as a node\'s', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  const solo = await start({ plans: PLANS, quota: QUOTA, keys: { solo: { account: 'acct-solo', plan: 'roomy' } } });
  nodes.push(solo);
  const key = solo.keys.solo;
  for (let i = 0; i < 5; i++) assert.equal((await restGet(solo, '/v1/stories?q=the&limit=1', { key })).status, 200);
  await solo.stop();
  const clusterConfig = `${solo.dataDir}-cluster.toml`;
  fs.writeFileSync(clusterConfig, fs.readFileSync(nodes[1].configPath, 'utf8'));
  try {
    let r = await runCli(['cluster', 'import', '--config', clusterConfig, '--data-dir', solo.dataDir]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /imported 1 new key\(s\) of 1 and 1 account\(s\); this month's usage of 1 key\(s\) \(5 billed call\(s\)\)/);
    const n2 = nodes[1];
    await eventually(async () => {
      const res = await restGet(n2, '/v1/usage', { key });
      return res.status === 200 && Number(res.headers['x-quota-used']) === 5;
    }, 3000, 'the imported key and its usage on a cluster node');
    r = await runCli(['cluster', 'import', '--config', clusterConfig, '--data-dir', solo.dataDir]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /imported 0 new key\(s\) of 1/);
    await new Promise((res) => setTimeout(res, 500));
    assert.equal((await usageOf(n2, key)).used, 5);
    const list = await runCli(['keys', 'list', '--config', clusterConfig]);
    assert.match(list.stdout, /acct-solo\s+roomy/);
    r = await runCli(['serve', '--config', clusterConfig, '--data-dir', solo.dataDir, '--listen', '127.0.0.1:0', '--sample']);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /imported into redis/);
    const st = await runCli(['cluster', 'status', '--config', clusterConfig]);
    assert.equal(st.code, 0, st.stderr);
    assert.match(st.stdout, /reachable/);
    assert.match(st.stdout, /NODE\s+LAST HEARTBEAT\s+UNITS HELD\s+STATE/);
  } finally {
    fs.rmSync(clusterConfig, { force: true });
  }
});

test('the admin API in cluster mode: accounts with a customer, plan changes, rotation, and the export of the cluster\'s totals', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  process.env.TOLLGATE_ADMIN_TOKEN = 'adm-cluster-token-31c';
  if (!redis) { redis = new Redis(await freePort()); await redis.start(); }  // run alone
  const prepared = await prepare({ plans: PLANS, quota: QUOTA,
    extraConfig: `${clusterToml('adm1', 'it9:')}[admin]\ntoken_env = "TOLLGATE_ADMIN_TOKEN"\n` });
  const a1 = await start({ prepared, threads: 2, extraArgs: ['--admin-listen', '127.0.0.1:0'] });
  nodes.push(a1);
  const a2 = await startNode('adm2', 'it9:');
  const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(a1.stderr())?.[1]);
  assert.ok(port > 0, a1.stderr());
  const admin = async (method, p, body) => {
    const r = await request(`http://127.0.0.1:${port}${p}`, { method,
      headers: { authorization: `Bearer ${process.env.TOLLGATE_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, json: r.body ? JSON.parse(r.body) : null };
  };
  let r = await admin('POST', '/admin/accounts', { id: 'acme-c', stripe_customer: 'cus_cluster9' });
  assert.equal(r.status, 201, JSON.stringify(r.json));
  r = await admin('POST', '/admin/accounts', { id: 'other-c', stripe_customer: 'cus_cluster9' });
  assert.equal(r.status, 409, JSON.stringify(r.json));
  r = await admin('GET', '/admin/accounts/acme-c');
  assert.equal(r.status, 200);
  assert.equal(r.json.stripe_customer, 'cus_cluster9');
  r = await admin('POST', '/admin/keys', { account: 'acme-c', plan: 'roomy' });
  assert.equal(r.status, 201, JSON.stringify(r.json));
  const { id, key } = r.json;
  const path = '/v1/stories?q=the&limit=1';
  const answered = new Map();  // key -> searches answered 200 (each one billed)
  const search = async (n, k) => {
    const res = await restGet(n, path, { key: k });
    if (res.status === 200) answered.set(k, (answered.get(k) ?? 0) + 1);
    return res.status;
  };
  const t0 = Math.floor(Date.now() / 1000);  // before the key's first billed call
  await eventually(async () => (await search(a2, key)) === 200, 1500, 'the new key on the other node');
  r = await admin('PATCH', `/admin/keys/${id}`, { plan: 'billed' });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  await eventually(async () => (await restGet(a2, '/v1/usage', { key })).headers['x-quota-limit'] === String(PLANS.billed.monthly_quota),
    1500, 'the plan change on the other node');
  r = await admin('POST', `/admin/keys/${id}/rotate`, { grace_secs: 3600 });
  assert.equal(r.status, 201, JSON.stringify(r.json));
  const rotated = r.json.key;
  await eventually(async () => (await search(a2, rotated)) === 200, 1500, 'the rotated key on the other node');
  // The old key, in its grace period, billed on both nodes (/v1/usage bills nothing).
  for (const n of [a1, a2]) {
    for (let i = 0; i < 3; i++) assert.equal(await search(n, key), 200);
  }
  const billed = answered.get(key);
  const t1 = Math.ceil(Date.now() / 1000);  // after its last
  const now = new Date();
  const month = `${now.getUTCFullYear()}-${String(now.getUTCMonth() + 1).padStart(2, '0')}`;
  let row;
  await eventually(async () => {
    const e = await admin('GET', `/admin/usage/export?month=${month}`);
    row = e.json?.keys?.find((k) => k.key_id === id);
    return e.status === 200 && row?.used === billed && row.first_call !== null && row.last_call !== null;
  }, 3000, `the cluster's ${billed} billed calls, and their first and last call, in the export`);
  // Both nodes billed it: the earliest first call and the latest last call of the two.
  const first = Date.parse(row.first_call) / 1000;
  const last = Date.parse(row.last_call) / 1000;
  assert.ok(t0 <= first && first <= last && last <= t1, `${t0} <= ${first} <= ${last} <= ${t1}`);
  assert.equal(row.account, 'acme-c');
  assert.equal(row.stripe_customer, 'cus_cluster9');
  assert.equal(row.plan, 'billed');
  const cli = await runCli(['usage', 'export', '--month', month, '--config', a2.configPath, '--format', 'json']);
  assert.equal(cli.code, 0, cli.stderr);
  const rows = JSON.parse(cli.stdout).keys;
  assert.equal(rows.find((k) => k.key_id === id).used, billed);
  assert.equal(rows.find((k) => k.key_id === r.json.id).used, answered.get(rotated));
});

test('the admin API in cluster mode: an Idempotency-Key and a Stripe event id hold across nodes', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  // A portal's retry, or Stripe's redelivery, may reach another node behind the load balancer:
  // the answer kept for the key and the event ids acted on live in Redis, not in one data dir.
  process.env.TOLLGATE_ADMIN_TOKEN = 'adm-cluster-token-idem';
  process.env.STRIPE_WEBHOOK_SECRET = 'whsec_cluster_idem_7c1e';
  if (!redis) { redis = new Redis(await freePort()); await redis.start(); }  // run alone
  const adminNode = async (name) => {
    const prepared = await prepare({ plans: PLANS, quota: QUOTA,
      extraConfig: `${clusterToml(name, 'it10:')}[admin]\ntoken_env = "TOLLGATE_ADMIN_TOKEN"\n` +
        '[stripe]\nwebhook_secret_env = "STRIPE_WEBHOOK_SECRET"\n' });
    const n = await start({ prepared, threads: 1, extraArgs: ['--admin-listen', '127.0.0.1:0'] });
    nodes.push(n);
    const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(n.stderr())?.[1]);
    assert.ok(port > 0, n.stderr());
    return `http://127.0.0.1:${port}`;
  };
  const b1 = await adminNode('idem1');
  const b2 = await adminNode('idem2');
  const post = (base, p, body, headers = {}) => request(`${base}${p}`, { method: 'POST',
    headers: { authorization: `Bearer ${process.env.TOLLGATE_ADMIN_TOKEN}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body) });
  assert.equal((await post(b1, '/admin/accounts', { id: 'idem-acct' })).status, 201);
  const first = await post(b1, '/admin/keys', { account: 'idem-acct', plan: 'roomy' }, { 'Idempotency-Key': 'portal-retry-1' });
  assert.equal(first.status, 201, first.body);
  const retry = await post(b2, '/admin/keys', { account: 'idem-acct', plan: 'roomy' }, { 'Idempotency-Key': 'portal-retry-1' });
  assert.equal(retry.status, 201, retry.body);
  assert.equal(retry.headers['idempotent-replayed'], 'true', 'the other node replays the first answer');
  assert.equal(retry.body, first.body, 'the same key, shown again: no second key');
  const other = await post(b2, '/admin/keys', { account: 'idem-acct', plan: 'capped' }, { 'Idempotency-Key': 'portal-retry-1' });
  assert.equal(other.status, 422, other.body);
  const keys = await request(`${b2}/admin/keys?account=idem-acct`, { headers: { authorization: `Bearer ${process.env.TOLLGATE_ADMIN_TOKEN}` } });
  assert.equal(JSON.parse(keys.body).keys.length, 1, keys.body);

  // One event delivered to each node: the second is a duplicate.
  const stripe = new Stripe('sk_test_not_used_offline');
  const body = JSON.stringify({ id: 'evt_cluster_dup_1', object: 'event', type: 'customer.created',
    created: Math.floor(Date.now() / 1000), data: { object: { id: 'cus_unused', object: 'customer' } } });
  const deliver = (base) => request(`${base}/admin/webhooks/stripe`, { method: 'POST', body, headers: {
    'content-type': 'application/json',
    'stripe-signature': stripe.webhooks.generateTestHeaderString({ payload: body, secret: process.env.STRIPE_WEBHOOK_SECRET }) } });
  const d1 = await deliver(b1);
  assert.equal(d1.status, 200, d1.body);
  const d2 = await deliver(b2);
  assert.equal(d2.status, 409, d2.body);
  assert.equal(JSON.parse(d2.body).code, 'duplicate_event');
});

test('the Grafana dashboard and the alert rules name only cluster metrics a node exposes', { skip: !haveRedis && 'redis-server not installed' }, async () => {
  if (!redis?.child) { redis = new Redis(await freePort()); await redis.start(); }
  const n = await startNode('metrics-node', 'tgmetrics:');
  const m = await restGet(n, '/metrics');
  assert.equal(m.status, 200);
  const exposed = exposedMetrics(m.body);
  assert.ok(exposed.has('tollgate_cluster_redis_up'), [...exposed].join(' '));
  for (const { file, names } of deployFiles().files) {
    assert.ok(names.has('tollgate_cluster_redis_up'), `${file} watches Redis`);
    for (const name of [...names].filter(isClusterMetric)) {
      assert.ok(exposed.has(name), `${file} names ${name}, which a cluster node's /metrics does not expose`);
    }
  }
});
