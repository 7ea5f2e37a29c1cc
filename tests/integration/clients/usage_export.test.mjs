// Billed overage, exported (issue #34 part 3): `tollgate usage export --month` and
// GET /admin/usage/export?month= print exactly what the journals and month archives hold. The
// test bills a known number of calls on a `bill` key past its quota and on a `stop` key, kills
// the server with -9 before any snapshot covers them (reconcile_ms is long, so only the journal
// holds them), and compares the export with what was answered; then a data dir holding only a
// closed month's archive (a month closed by a rollover), and bad arguments; then the closed
// month's overage pushed to a stand-in for Stripe's meter events API.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import { start, prepare, eventually, cleanup, request, restGet, runCli, tempDir } from './harness.mjs';

const TOKEN = 'adm-export-token-2';
process.env.TOLLGATE_ADMIN_TOKEN = TOKEN;

const PLANS = {
  meter: { rate_per_sec: 100000, burst: 100000, monthly_quota: 3, overage: 'bill' },
  capped: { rate_per_sec: 100000, burst: 100000, monthly_quota: 2, overage: 'stop' },
};

const servers = [];
const dirs = [];
after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

function thisMonth() {
  const d = new Date();
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
}

test('usage export replays the journal: billed calls and overage per key, CLI and admin route agree', async () => {
  const s = await start({
    plans: PLANS, threads: 2, quota: { reconcile_ms: 600000, fsync_ms: 50 },
    keys: { m: { account: 'metered', plan: 'meter' }, c: { account: 'capped', plan: 'capped' } },
    extraArgs: ['--admin-listen', '127.0.0.1:0'],
    extraConfig: '[admin]\ntoken_env = "TOLLGATE_ADMIN_TOKEN"\n',
  });
  servers.push(s);
  const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(s.stderr())?.[1]);
  // 7 billed successes on the bill key (quota 3: 4 are overage); the stop key: 2 then refusals.
  const t0 = Math.floor(Date.now() / 1000);
  let billedM = 0;
  for (let i = 0; i < 7; i++) billedM += (await restGet(s, '/v1/stories?q=the', { key: s.keys.m })).status === 200 ? 1 : 0;
  let billedC = 0;
  for (let i = 0; i < 5; i++) billedC += (await restGet(s, '/v1/stories?q=the', { key: s.keys.c })).status === 200 ? 1 : 0;
  assert.equal(billedM, 7);
  assert.equal(billedC, 2);
  const t1 = Math.ceil(Date.now() / 1000);
  const month = thisMonth();

  const viaRoute = await request(`http://127.0.0.1:${port}/admin/usage/export?month=${month}`,
    { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(viaRoute.status, 200, viaRoute.body);
  const routeJson = JSON.parse(viaRoute.body);
  const csvRoute = await request(`http://127.0.0.1:${port}/admin/usage/export?month=${month}&format=csv`,
    { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(csvRoute.status, 200);
  assert.match(csvRoute.headers['content-type'], /^text\/csv/);

  await s.kill9();  // nothing but the journals holds the calls
  const cli = await runCli(['usage', 'export', '--month', month, '--format', 'json', '--config', s.configPath, '--data-dir', s.dataDir]);
  assert.equal(cli.code, 0, cli.stderr);
  const j = JSON.parse(cli.stdout);
  assert.deepEqual(j, routeJson, 'the admin route and the CLI give the same export');
  assert.equal(j.month, month);
  const byAccount = Object.fromEntries(j.keys.map((k) => [k.account, k]));
  assert.equal(byAccount.metered.used, 7);
  assert.equal(byAccount.metered.overage, 4);
  assert.equal(byAccount.metered.quota, 3);
  assert.equal(byAccount.metered.overage_policy, 'bill');
  assert.equal(byAccount.capped.used, 2);
  assert.equal(byAccount.capped.overage, 0);
  assert.equal(byAccount.capped.overage_policy, 'stop');
  assert.deepEqual(j.totals, { used: 9, overage: 4 });
  // First and last billed call, from the journal records' times (to the second).
  for (const k of [byAccount.metered, byAccount.capped]) {
    assert.match(k.first_call, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/, JSON.stringify(k));
    const first = Date.parse(k.first_call) / 1000;
    const last = Date.parse(k.last_call) / 1000;
    assert.ok(first >= t0 && first <= last && last <= t1, `${t0} <= ${first} <= ${last} <= ${t1}`);
  }

  const csv = await runCli(['usage', 'export', '--month', month, '--config', s.configPath, '--data-dir', s.dataDir]);
  assert.equal(csv.code, 0, csv.stderr);
  assert.equal(csv.stdout, csvRoute.body);
  const rows = csv.stdout.trim().split('\n');
  assert.equal(rows[0], 'month,account,stripe_customer,key_id,plan,overage_policy,quota,used,overage,first_call,last_call');
  assert.ok(rows.some((r) => r.startsWith(`${month},metered,,key_`) &&
    r.endsWith(`,meter,bill,3,7,4,${byAccount.metered.first_call},${byAccount.metered.last_call}`)), csv.stdout);

  // Another month: the same keys, nothing billed.
  const empty = JSON.parse((await runCli(['usage', 'export', '--month', '2020-01', '--format', 'json', '--data-dir', s.dataDir])).stdout);
  assert.deepEqual(empty.totals, { used: 0, overage: 0 });
});

test('usage export reads a closed month from its archive; bad arguments exit 2', async () => {
  const dir = tempDir();
  dirs.push(dir);
  fs.mkdirSync(path.join(dir, 'usage'));
  fs.writeFileSync(path.join(dir, 'keys.txt'),
    `key key_00000000000000aa ${'ab'.repeat(32)} acme pro 1700000000 active\n` +
    `key key_00000000000000bb ${'cd'.repeat(32)} acme pro 1700000000 active\n`);
  fs.writeFileSync(path.join(dir, 'accounts.txt'), 'account acme active customer=cus_9\n');
  const m = 2025 * 12 + 10;  // 2025-11
  fs.writeFileSync(path.join(dir, 'usage', 'month-2025-11.txt'),
    `# tollgate usage for 2025-11 (closed month, UTC)\nused ${m} key_00000000000000aa 1500000 500000\n` +
    // An archive written since the times were kept: first and last call, unix seconds.
    `used ${m} key_00000000000000bb 2 0 1761955200 1764547199\n`);
  const r = await runCli(['usage', 'export', '--month', '2025-11', '--data-dir', dir]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, 'month,account,stripe_customer,key_id,plan,overage_policy,quota,used,overage,first_call,last_call\n' +
    '2025-11,acme,cus_9,key_00000000000000aa,pro,bill,1000000,1500000,500000,,\n' +
    '2025-11,acme,cus_9,key_00000000000000bb,pro,bill,1000000,2,0,2025-11-01T00:00:00Z,2025-11-30T23:59:59Z\n');

  for (const [args, re] of [
    [['usage', 'export'], /--month YYYY-MM is required/],
    [['usage', 'export', '--month', '2025-13'], /not a month/],
    [['usage', 'export', '--month', '2025-11', '--format', 'xml'], /--format must be csv or json/],
    [['usage', 'export', '--month'], /needs a value/],
    [['usage', 'bill'], /unknown subcommand/],
    [['usage', 'export', '--month', '2025-11', '--colour'], /unknown option --colour/],
  ]) {
    const b = await runCli([...args, '--data-dir', dir]);
    assert.equal(b.code, 2, `${args.join(' ')}: ${b.stderr}`);
    assert.match(b.stderr, re);
  }
  const h = await runCli(['usage', '--help']);
  assert.equal(h.code, 0);
  assert.match(h.stdout, /tollgate usage export --month YYYY-MM/);
});

test('a closed month\'s overage goes to Stripe as meter events: once per account, retried on 5xx, never again once acknowledged or refused', async () => {
  // A local HTTP endpoint stands in for api.stripe.com (no network here). The month two before
  // this one is long closed; its archive holds the usage.
  const seen = [];
  let failFirst = true;
  const stand = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const form = Object.fromEntries(new URLSearchParams(body));
      seen.push({ path: req.url, headers: req.headers, form });
      if (form['payload[stripe_customer_id]'] === 'cus_gone') {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"No such customer: cus_gone"}}');
      } else if (failFirst) {
        failFirst = false;
        res.writeHead(503);
        res.end();
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'billing.meter_event', identifier: form.identifier }));
      }
    });
  });
  await new Promise((r) => stand.listen(0, '127.0.0.1', r));
  process.env.STRIPE_API_KEY = 'sk_test_meter_standin_42';
  const d = new Date();
  const m = d.getUTCFullYear() * 12 + d.getUTCMonth() - 2;
  const label = `${Math.floor(m / 12)}-${String((m % 12) + 1).padStart(2, '0')}`;
  const prepared = await prepare({ plans: PLANS, extraConfig:
    `[stripe]\nmeter_event_name = "api_overage"\napi_key_env = "STRIPE_API_KEY"\n` +
    `meter_url = "http://127.0.0.1:${stand.address().port}/v1/billing/meter_events"\nmeter_retry_secs = 1\n` });
  const dir = prepared.dataDir;
  fs.mkdirSync(path.join(dir, 'usage'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'keys.txt'),
    `key key_00000000000000a1 ${'a1'.repeat(32)} acme meter 1700000000 active\n` +
    `key key_00000000000000a2 ${'a2'.repeat(32)} acme meter 1700000000 active\n` +
    `key key_00000000000000b1 ${'b1'.repeat(32)} beta meter 1700000000 active\n` +
    `key key_00000000000000c1 ${'c1'.repeat(32)} nocust meter 1700000000 active\n` +
    `key key_00000000000000d1 ${'d1'.repeat(32)} capped capped 1700000000 active\n`);
  fs.writeFileSync(path.join(dir, 'accounts.txt'),
    'account acme active customer=cus_acme7\naccount beta active customer=cus_gone\naccount nocust active\n' +
    'account capped active customer=cus_capped\n');
  fs.writeFileSync(path.join(dir, 'usage', `month-${label}.txt`),
    `used ${m} key_00000000000000a1 10 7 0 0\nused ${m} key_00000000000000a2 5 2 0 0\n` +
    `used ${m} key_00000000000000b1 4 1 0 0\nused ${m} key_00000000000000c1 9 3 0 0\n` +
    `used ${m} key_00000000000000d1 2 0 0 0\n`);
  let s = await start({ prepared });
  servers.push(s);
  try {
    const sent = () => seen.filter((x) => x.form['payload[stripe_customer_id]'] === 'cus_acme7');
    await eventually(() => sent().length === 2, 10000, 'acme\'s event sent, then sent again after the 503');
    const [a, b] = sent();
    assert.equal(a.path, '/v1/billing/meter_events');
    assert.equal(a.headers.authorization, 'Bearer sk_test_meter_standin_42');
    assert.equal(a.headers['idempotency-key'], `tollgate-acme-${label}`);
    assert.equal(b.headers['idempotency-key'], a.headers['idempotency-key'], 'the retry carries the same key');
    assert.match(a.headers['content-type'], /^application\/x-www-form-urlencoded/);
    assert.deepEqual(b.form, {
      event_name: 'api_overage', 'payload[stripe_customer_id]': 'cus_acme7', 'payload[value]': '9',
      identifier: `tollgate-acme-${label}`,
      timestamp: String(Date.UTC(Math.floor((m + 1) / 12), (m + 1) % 12, 1) / 1000 - 1),
    });
    await eventually(() => fs.existsSync(path.join(dir, 'stripe-meter.txt')) &&
      /refused/.test(fs.readFileSync(path.join(dir, 'stripe-meter.txt'), 'utf8')), 5000, 'beta refused and kept');
    await new Promise((r) => setTimeout(r, 2500));  // two more passes
    assert.equal(sent().length, 2, 'acknowledged: not sent again');
    assert.equal(seen.filter((x) => x.form['payload[stripe_customer_id]'] === 'cus_gone').length, 1, 'a 400 is not retried');
    assert.equal(seen.length, 3, 'no event for an account without a customer, or without overage');
    assert.match(s.stderr(), /account nocust has overage in .* but no stripe_customer/);
    assert.match(s.stderr(), /Stripe refused 1 overage of beta/);
    const lines = fs.readFileSync(path.join(dir, 'stripe-meter.txt'), 'utf8').trim().split('\n');
    assert.equal(lines.length, 2, lines.join('\n'));
    assert.match(lines.find((l) => / acme /.test(l)), new RegExp(`^meter \\d+ ${label} acme 9 sent$`));
    // After a restart, what was sent or refused stays sent.
    await s.stop();
    s = await start({ prepared });
    servers.push(s);
    await new Promise((r) => setTimeout(r, 2500));
    assert.equal(seen.length, 3, 'nothing sent again after a restart');
  } finally {
    await new Promise((r) => stand.close(r));
  }
});
