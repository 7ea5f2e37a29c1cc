// Verifies what an operator's tools rely on, against the real binary: `tollgate config check`
// (exit 0, or 2 with the message a start gives), the access log reopened on SIGUSR1 after a
// logrotate-style rename, and systemd's Type=notify readiness (READY=1 sent to $NOTIFY_SOCKET,
// a real unix datagram socket, once the server answers).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { start, cleanup, runCli, restGet, eventually, tempDir } from './harness.mjs';
import { exposedMetrics, deployFiles, isClusterMetric } from './deploy_metrics.mjs';

const servers = [];
const dirs = [];
after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

test('config check: exit 0 on a good file, 2 with the start\'s own message on a bad one', async () => {
  const dir = tempDir();
  dirs.push(dir);
  const good = path.join(dir, 'good.toml');
  fs.writeFileSync(good, '[server]\nthreads = 2\n[log]\naccess = "-"\nsample = 0.5\n');
  let r = await runCli(['config', 'check', '--config', good]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, `${good}: ok\n`);
  for (const body of ['[server]\nthreads = 5000\n', '[log]\nsample = 2\n', '[nope]\nx = 1\n',
    '[log]\naccess = "/no/such/dir/access.log"\n']) {
    const bad = path.join(dir, 'bad.toml');
    fs.writeFileSync(bad, body);
    r = await runCli(['config', 'check', '--config', bad]);
    assert.equal(r.code, 2, `${body}: ${r.stderr}`);
    assert.match(r.stderr, /bad\.toml:\d+: |access log/);
    const serve = await runCli(['serve', '--config', bad, '--listen', '127.0.0.1:0', '--data-dir', path.join(dir, 'data')]);
    assert.equal(serve.code, 2, `serve exits 2 too: ${serve.stderr}`);
    const line = r.stderr.trim();
    assert.ok(serve.stderr.includes(line), `serve says what check says:\n check: ${line}\n serve: ${serve.stderr}`);
  }
  r = await runCli(['config', 'check']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--config: needs a FILE/);
});

test('the access log is reopened on SIGUSR1: after a rename, new lines go to a new file', async () => {
  const dir = tempDir();
  dirs.push(dir);
  const log = path.join(dir, 'access.log');
  const s = await start({ keys: { a: { account: 'acct-a', plan: 'big' } }, extraConfig: `[log]\naccess = ${JSON.stringify(log)}\n` });
  servers.push(s);
  const r = await restGet(s, '/v1/stories?q=rust&limit=1', { key: s.keys.a });
  assert.equal(r.status, 200, r.body);
  await eventually(() => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('"route":"v1_stories"'), 5000, 'the first line');
  const first = JSON.parse(fs.readFileSync(log, 'utf8').trim().split('\n')[0]);
  assert.equal(first.account, 'acct-a');
  assert.equal(first.outcome, 'ok');
  assert.equal(first.billed, true);
  assert.match(first.key_id, /^key_[0-9a-f]{16}$/);
  fs.renameSync(log, `${log}.1`);
  process.kill(s.pid, 'SIGUSR1');
  await eventually(async () => {
    await restGet(s, '/v1/usage', { key: s.keys.a });
    return fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('"route":"v1_usage"');
  }, 5000, 'a line in the reopened file');
  assert.ok(fs.readFileSync(`${log}.1`, 'utf8').includes('"route":"v1_stories"'));
});

test('Type=notify: READY=1 reaches $NOTIFY_SOCKET once the server answers', async (t) => {
  const dir = tempDir();
  dirs.push(dir);
  const sock = path.join(dir, 'notify.sock');
  // A real unix datagram socket (node has none): python3 binds it and prints what arrives.
  const py = spawn('python3', ['-c', `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
s.settimeout(120)
print(repr(s.recv(4096).decode()), flush=True)
`, sock], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  py.stdout.setEncoding('utf8');
  py.stdout.on('data', (d) => { out += d; });
  const spawned = await new Promise((resolve) => { py.on('spawn', () => resolve(true)); py.on('error', () => resolve(false)); });
  if (!spawned) {
    t.skip('python3 is not installed');
    return;
  }
  await eventually(() => out.includes('bound'), 10000, 'the socket bound');
  process.env.NOTIFY_SOCKET = sock;
  let s;
  try {
    s = await start({ keys: { a: { account: 'acct-a', plan: 'big' } } });
  } finally {
    delete process.env.NOTIFY_SOCKET;
  }
  servers.push(s);
  await eventually(() => out.split('\n').length > 2, 10000, `a datagram (got ${JSON.stringify(out)})`);
  assert.match(out, /READY=1/);
  assert.match(out, new RegExp(`MAINPID=${s.pid}`));
  const r = await restGet(s, '/healthz');
  assert.equal(r.status, 200);
  try { process.kill(py.pid, 'SIGKILL'); } catch { /* exited */ }
});

test('the Grafana dashboard and the alert rules name only metrics /metrics exposes', async () => {
  const s = await start({ keys: { a: { account: 'acct-a', plan: 'big' } } });
  servers.push(s);
  const r = await restGet(s, '/v1/stories?q=rust&limit=1', { key: s.keys.a });
  assert.equal(r.status, 200, r.body);
  const m = await restGet(s, '/metrics');
  assert.equal(m.status, 200);
  const exposed = exposedMetrics(m.body);
  assert.ok(exposed.has('tollgate_request_duration_seconds_bucket'), [...exposed].join(' '));
  const deploy = deployFiles();
  assert.ok(deploy.panels >= 8, 'a dashboard with panels');
  assert.ok(deploy.alerts >= 5, 'alert rules');
  for (const { file, names } of deploy.files) {
    assert.ok(names.size > 0, `${file} names metrics`);
    for (const want of ['tollgate_journal_failing', 'tollgate_journal_write_errors_total']) {
      assert.ok(names.has(want), `${file} watches the usage journal (${want})`);
    }
    // Cluster metrics are checked against a cluster node in cluster.test.mjs.
    for (const name of [...names].filter((n) => !isClusterMetric(n))) {
      assert.ok(exposed.has(name), `${file} names ${name}, which /metrics does not expose`);
    }
  }
});
