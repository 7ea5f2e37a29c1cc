// Verifies the command-line contract scripts rely on (design §10): the first serve on an empty data
// dir prints a working demo key, keys are shown once and listed by id only, a bad plan is exit 2
// naming it, a running server sees keys/accounts changes within a second without SIGHUP, plans
// reload on SIGHUP and POST /admin/reload (design §5), and SIGTERM exits 0; `tollgate stdio` too.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { start, prepare, cleanup, runCli, restGet, eventually, mcpPost, toolCall, tempDir, renderConfig, request, DEFAULT_PLANS, StdioSession } from './harness.mjs';

const servers = [];
const dirs = [];
after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
  for (const d of dirs) cleanup(d);
});

test('first serve on an empty data dir prints a demo key that works', async () => {
  const s = await start({});
  servers.push(s);
  await eventually(() => s.demoKey, 3000, `stdout has "demo key: KEY" (stdout so far: ${JSON.stringify(s.stdoutText())})`);
  const r = await restGet(s, '/v1/usage', { key: s.demoKey });
  assert.equal(r.status, 200, r.body);
  const stop = await s.stop();
  assert.equal(stop.code, 0, `SIGTERM -> exit 0: ${JSON.stringify(stop)}; stderr: ${s.stderr()}`);
});

test('keys create prints the key once; keys list shows ids, never secrets', async () => {
  const p = await prepare({ keys: { a: { account: 'acct-a', plan: 'big' }, b: { account: 'acct-b', plan: 'big' } } });
  dirs.push(p);
  assert.notEqual(p.keys.a, p.keys.b);
  assert.ok(p.keys.a.length >= 22, `a key carries >= 128 bits: ${p.keys.a}`);
  const list = await runCli(['keys', 'list', '--data-dir', p.dataDir]);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /acct-a/);
  assert.match(list.stdout, /acct-b/);
  assert.ok(!list.stdout.includes(p.keys.a) && !list.stdout.includes(p.keys.b), 'no secret in keys list');
  for (const f of fs.readdirSync(p.dataDir, { recursive: true })) {
    const full = path.join(p.dataDir, String(f));
    if (fs.statSync(full).isFile()) {
      const text = fs.readFileSync(full, 'latin1');
      assert.ok(!text.includes(p.keys.a), `the secret is not stored in ${f}`);
    }
  }
});

test('keys create with an unknown plan: exit 2 naming it', async () => {
  const dir = tempDir();
  const configPath = `${dir}.toml`;
  fs.writeFileSync(configPath, renderConfig({ plans: DEFAULT_PLANS }));
  dirs.push({ dataDir: dir, configPath });
  const r = await runCli(['keys', 'create', '--account', 'x', '--plan', 'no-such-plan', '--data-dir', dir, '--config', configPath]);
  assert.equal(r.code, 2, `exit code; stderr: ${r.stderr}`);
  assert.match(r.stderr, /no-such-plan/);
  assert.equal(r.stdout, '', 'no key printed');
});

test('a running server sees a suspension and a revocation within a second, without SIGHUP', async () => {
  const s = await start({ keys: { a: { account: 'acct-nohup', plan: 'big' }, b: { account: 'acct-nohup-rev', plan: 'big' } } });
  servers.push(s);
  const q = toolCall(1, 'search_stories', { query: 'the' });
  assert.equal(JSON.parse((await mcpPost(s, q, { key: s.keys.a })).body).result?.isError, false);
  const sus = await runCli(['accounts', 'suspend', 'acct-nohup', '--data-dir', s.dataDir]);
  assert.equal(sus.code, 0, sus.stderr);
  const t0 = Date.now();
  await eventually(async () => JSON.parse((await mcpPost(s, q, { key: s.keys.a })).body).result?.isError === true,
    2500, 'suspension seen without SIGHUP');
  assert.ok(Date.now() - t0 <= 2500);

  const id = await s.keyId('b');
  const rev = await runCli(['keys', 'revoke', id, '--data-dir', s.dataDir]);
  assert.equal(rev.code, 0, rev.stderr);
  await eventually(async () => (await restGet(s, '/v1/usage', { key: s.keys.b })).status === 401, 2500,
    'revocation seen without SIGHUP');
});

test('plans reload on SIGHUP and on POST /admin/reload; a bad config or a plan in use changes nothing', async () => {
  const std = { rate_per_sec: 1000, burst: 200, monthly_quota: 5000, overage: 'stop' };
  const s = await start({ keys: { a: { account: 'acct-plans', plan: 'std' } }, plans: { std },
    extraArgs: ['--admin-listen', '127.0.0.1:0'] });
  servers.push(s);
  // [burst, monthly quota] as the key's own responses report them, on the public listener.
  const figures = async () => {
    const r = await restGet(s, '/v1/usage', { key: s.keys.a });
    assert.equal(r.status, 200, r.body);
    return [Number(r.headers['x-ratelimit-limit']), Number(r.headers['x-quota-limit'])];
  };
  assert.deepEqual(await figures(), [200, 5000]);

  fs.writeFileSync(s.configPath, renderConfig({ plans: { std: { ...std, burst: 300, monthly_quota: 7000 } } }));
  s.reload();
  await eventually(async () => (await figures())[0] === 300, 3000, 'SIGHUP put the new burst in force');
  assert.deepEqual(await figures(), [300, 7000]);

  const adminPort = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(s.stderr())?.[1]);
  assert.ok(adminPort > 0, `admin port in stderr: ${s.stderr()}`);
  const reload = () => request(`http://127.0.0.1:${adminPort}/admin/reload`, { method: 'POST' });
  fs.writeFileSync(s.configPath, renderConfig({ plans: { std: { ...std, burst: 400, monthly_quota: 9000 } } }));
  const ok = await reload();
  assert.equal(ok.status, 200, ok.body);
  assert.deepEqual(JSON.parse(ok.body), { reloaded: true, plans: 3, keys: 1 });  // free, pro, std
  // The 200 means every core switched: the very next request sees the new figures.
  assert.deepEqual(await figures(), [400, 9000]);

  // A TOML error: 422 naming file, line and key; the plans in force stay.
  fs.writeFileSync(s.configPath, renderConfig({ plans: { std } }).replace('burst = 200', 'burst = "lots"'));
  const bad = await reload();
  assert.equal(bad.status, 422, bad.body);
  const badBody = JSON.parse(bad.body);
  assert.equal(badBody.code, 'reload_failed');
  assert.ok(badBody.message.includes(`${s.configPath}:`) && badBody.message.includes('plans.std.burst'), badBody.message);
  // Dropping a plan a live key uses would turn its requests into 401s: refused, naming it.
  fs.writeFileSync(s.configPath, renderConfig({ plans: { other: std } }));
  const inUse = await reload();
  assert.equal(inUse.status, 422, inUse.body);
  assert.match(JSON.parse(inUse.body).message, /plan "std" is still used by key key_[0-9a-f]+ \(account acct-plans\)/);
  s.reload();  // the same refusal by SIGHUP: logged, nothing changes
  await eventually(() => /SIGHUP: nothing reloaded/.test(s.stderr()), 3000, 'the SIGHUP refusal is logged');
  assert.deepEqual(await figures(), [400, 9000]);

  // Only POST, and only on the admin listener.
  assert.equal((await request(`http://127.0.0.1:${adminPort}/admin/reload`)).status, 405);
  assert.equal((await request(`${s.url}/admin/reload`, { method: 'POST' })).status, 404);
});

test('SIGTERM with connections open: exit 0', async () => {
  const s = await start({ keys: { a: { account: 'acct-term', plan: 'big' } } });
  servers.push(s);
  const inflight = Array.from({ length: 20 }, (_, i) => mcpPost(s, toolCall(i, 'get_usage'), { key: s.keys.a }).catch(() => null));
  const r = await s.stop(10000);
  await Promise.all(inflight);
  assert.equal(r.code, 0, `${JSON.stringify(r)}; stderr: ${s.stderr()}`);
});

test('tollgate stdio: SIGHUP reloads plans; SIGTERM answers what was read, flushes usage, exits 0', async () => {
  // design §5 (reload on SIGHUP) and §10 (SIGTERM: finish, flush usage, exit 0) for stdio,
  // which used to die of either signal's default action.
  const std = { rate_per_sec: 1000, burst: 200, monthly_quota: 5000, overage: 'stop' };
  const p = await prepare({ keys: { a: { account: 'acct-stdio-hup', plan: 'std' } }, plans: { std } });
  dirs.push(p);
  const s = new StdioSession(p, p.keys.a);
  try {
    const init = await s.send({ jsonrpc: '2.0', id: 'init', method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
    assert.ok(init.result?.protocolVersion, JSON.stringify(init));
    s.notify({ jsonrpc: '2.0', method: 'notifications/initialized' });
    let id = 0;
    const usage = async () => {
      const m = await s.send(toolCall(++id, 'get_usage'));
      assert.equal(m.result?.isError, false, JSON.stringify(m));
      return JSON.parse(m.result.content[0].text);
    };
    assert.equal((await usage()).quota.limit, 5000);
    const billed = await s.send(toolCall(++id, 'search_stories', { query: 'the' }));
    assert.equal(billed.result?.isError, false, JSON.stringify(billed));

    fs.writeFileSync(p.configPath, renderConfig({ plans: { std: { ...std, monthly_quota: 7000 } } }));
    process.kill(s.child.pid, 'SIGHUP');
    await eventually(async () => (await usage()).quota.limit === 7000, 3000, 'SIGHUP put the new quota in force');
    assert.equal(s.child.exitCode, null, 'still serving after SIGHUP');
    await eventually(() => /SIGHUP: reloaded/.test(s.stderr), 3000, `"SIGHUP: reloaded" logged (stderr: ${s.stderr})`);

    process.kill(s.child.pid, 'SIGTERM');
    const r = await s.exited;
    assert.deepEqual(r, { code: 0, signal: null }, `stderr: ${s.stderr}`);
    await eventually(() => /SIGTERM: every line read is answered/.test(s.stderr), 3000,
      `the SIGTERM line logged (stderr: ${s.stderr})`);
  } finally {
    await s.close();
  }
  // The billed call was flushed: a REST read of the key on a fresh server counts it.
  const srv = await start({ prepared: p });
  servers.push(srv);
  const u = await restGet(srv, '/v1/usage', { key: p.keys.a });
  assert.equal(u.status, 200, u.body);
  assert.equal(JSON.parse(u.body).quota.used, 1);
});

test('one server per data dir and per port: a second is refused, leaves no key behind, and the first keeps serving', async () => {
  // Two servers on one data dir would lose billed usage (one compacts journals the other still
  // appends to); a second server on a port in use would take half its connections (every
  // listener sets SO_REUSEPORT). Both used to start without complaint.
  const a = await start({ keys: { k: { account: 'acct-lock', plan: 'big' } } });
  servers.push(a);
  const sameDir = await runCli(['serve', '--config', a.configPath, '--data-dir', a.dataDir,
    '--listen', '127.0.0.1:0', '--sample'], { timeoutMs: 30000 });
  assert.equal(sameDir.code, 1, `same data dir: ${JSON.stringify(sameDir)}`);
  assert.match(sameDir.stderr, new RegExp(`in use by another tollgate server \\(pid ${a.pid}\\)`));
  const stdio = await runCli(['stdio', '--config', a.configPath, '--data-dir', a.dataDir, '--sample'],
    { env: { TOLLGATE_API_KEY: a.keys.k }, input: '', timeoutMs: 30000 });
  assert.equal(stdio.code, 1, `stdio on the same data dir: ${JSON.stringify(stdio)}`);
  assert.match(stdio.stderr, /in use by another tollgate server/);
  assert.equal(stdio.stdout, '');

  const fresh = tempDir();
  dirs.push({ dataDir: fresh });
  const samePort = await runCli(['serve', '--data-dir', fresh, '--listen', `127.0.0.1:${a.port}`, '--sample'],
    { timeoutMs: 30000 });
  assert.equal(samePort.code, 1, `same port: ${JSON.stringify(samePort)}`);
  assert.match(samePort.stderr, /address already in use/);
  assert.doesNotMatch(samePort.stdout, /demo key/, 'a refused start prints no key');
  assert.ok(!fs.existsSync(path.join(fresh, 'keys.txt')), 'a refused start leaves no key behind');

  const r = await restGet(a, '/v1/usage', { key: a.keys.k });
  assert.equal(r.status, 200, `the first server still serves: ${r.body}`);

  // The refused start's data dir is still "empty": its first real start makes the demo key.
  const b = await start({ prepared: { dataDir: fresh, configPath: a.configPath, keys: {}, keyOutputs: {}, keyAccounts: {} } });
  servers.push(b);
  await eventually(() => b.demoKey, 3000, 'the demo key on the first real start');
  assert.equal((await restGet(b, '/v1/usage', { key: b.demoKey })).status, 200);
});

test('tollgate stdio with a key that is not in the data dir creates nothing there', async () => {
  const parent = tempDir();
  dirs.push({ dataDir: parent });
  const dir = path.join(parent, 'never-made');
  const r = await runCli(['stdio', '--data-dir', dir, '--sample'], { env: { TOLLGATE_API_KEY: 'tg_live_not_a_key' }, input: '' });
  assert.equal(r.code, 2, JSON.stringify(r));
  assert.match(r.stderr, /not a valid key/);
  assert.ok(!fs.existsSync(dir), `no data dir made: ${dir}`);
});
