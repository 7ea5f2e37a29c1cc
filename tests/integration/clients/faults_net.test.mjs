// Connection faults against the real server process over raw sockets: a full connection cap, an
// exhausted descriptor table (a real RLIMIT_NOFILE of 256 and 1,000 real connections), a client
// that half-closes after pipelining, and Expect: 100-continue on a refused request.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { start, cleanup, request, toolCall } from './harness.mjs';

const servers = [];
after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
});

/** The HTTP/1.1 responses in `buf` (Content-Length framed; 1xx have no body). */
function parseResponses(buf) {
  const out = [];
  let rest = buf;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) break;
    const head = rest.subarray(0, end).toString('latin1');
    const status = Number(head.slice(9, 12));
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    const len = status >= 200 && m ? Number(m[1]) : 0;
    if (rest.length < end + 4 + len) break;
    out.push({ status, head, body: rest.subarray(end + 4, end + 4 + len).toString('utf8') });
    rest = rest.subarray(end + 4 + len);
  }
  return out;
}

/**
 * A raw connection: `send(bytes)`, `end()` (half-close), `waitFor(pred, ms)` on the bytes so far,
 * `closed` (the server's FIN or reset seen), `data` (every byte received).
 */
function connect(port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port }, () => {
      const c = {
        sock,
        data: Buffer.alloc(0),
        closed: false,
        reset: false,
        waiters: [],
        send(b) { sock.write(b); },
        end() { sock.end(); },
        destroy() { sock.destroy(); },
        responses() { return parseResponses(c.data); },
        waitFor(pred, ms = 5000) {
          if (pred(c)) return Promise.resolve(true);
          return new Promise((res) => {
            const w = { pred, res };
            c.waiters.push(w);
            setTimeout(() => { c.waiters = c.waiters.filter((x) => x !== w); res(pred(c)); }, ms);
          });
        },
      };
      const poke = () => {
        c.waiters = c.waiters.filter((w) => (w.pred(c) ? (w.res(true), false) : true));
      };
      sock.on('data', (d) => { c.data = Buffer.concat([c.data, d]); poke(); });
      sock.on('end', () => { c.closed = true; poke(); });
      sock.on('close', () => { c.closed = true; poke(); });
      sock.on('error', () => { c.reset = true; c.closed = true; poke(); });
      resolve(c);
    });
    sock.once('error', reject);
  });
}

function restHead(key, target) {
  return `GET ${target} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${key}\r\n\r\n`;
}

function mcpRequest(key, message, extra = '') {
  const body = JSON.stringify(message);
  return `POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${key}\r\n` +
    'Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n' +
    `${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

function adminPort(server) {
  const m = /admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(server.stderr());
  assert.ok(m, `no admin line in: ${server.stderr()}`);
  return Number(m[1]);
}

async function metric(port, name) {
  const r = await request(`http://127.0.0.1:${port}/metrics`, { timeoutMs: 3000 });
  assert.equal(r.status, 200);
  let sum = 0;
  for (const line of r.body.split('\n')) {
    if (line.startsWith(`${name}{`)) sum += Number(line.split(' ').pop());
  }
  return sum;
}

test('every connection over max_connections on every core gets 503 at once; none waits', async () => {
  const server = await start({
    keys: { main: { account: 'a', plan: 'big' } },
    extraConfig: '[server]\nmax_connections = 4\n',
    threads: 2,
    extraArgs: ['--admin-listen', '127.0.0.1:0'],
  });
  servers.push(server);
  const key = server.keys.main;
  const port = Number(new URL(server.url).port);
  const held = [];
  // 2 cores x 4 slots: 8 connections are served however the kernel hashes them onto the cores.
  for (let i = 0; i < 8; i++) {
    const c = await connect(port);
    held.push(c);
    c.send(restHead(key, '/v1/usage'));
    assert.ok(await c.waitFor((x) => x.responses().length === 1, 3000), `connection ${i} was left waiting`);
    assert.equal(c.responses()[0].status, 200);
  }
  const over = [];
  for (let i = 0; i < 4; i++) {
    const c = await connect(port);
    over.push(c);
    c.send(restHead(key, '/v1/usage'));
  }
  for (const c of over) {
    assert.ok(await c.waitFor((x) => x.closed && x.responses().length === 1, 3000), 'over-cap connection not answered');
    const r = c.responses()[0];
    assert.equal(r.status, 503);
    assert.match(r.head, /\r\nRetry-After: 1/);
    assert.equal(JSON.parse(r.body).code, 'unavailable');
  }
  const admin = adminPort(server);
  assert.equal(await metric(admin, 'tollgate_connections_rejected_total'), 4);
  // A freed slot serves the next client.
  held.pop().destroy();
  await new Promise((r) => setTimeout(r, 100));
  const next = await connect(port);
  next.send(restHead(key, '/v1/usage'));
  assert.ok(await next.waitFor((x) => x.responses().length === 1, 3000));
  assert.equal(next.responses()[0].status, 200);
  for (const c of [...held, next]) c.destroy();
});

test('with the descriptor table full of idle clients, monitoring, billing and reloads still work', async () => {
  // ulimit -n 256 for the server alone; 1,000 real idle connections.
  const server = await start({
    keys: { main: { account: 'a', plan: 'big' } },
    threads: 2,
    extraArgs: ['--admin-listen', '127.0.0.1:0'],
    launcher: ['prlimit', '--nofile=256:256', '--'],
  });
  servers.push(server);
  const key = server.keys.main;
  const port = Number(new URL(server.url).port);
  const admin = adminPort(server);
  const early = await connect(port);  // opened before the flood: its billed calls must go on
  early.send(restHead(key, '/v1/usage'));
  assert.ok(await early.waitFor((x) => x.responses().length === 1));
  const idle = [];
  for (let i = 0; i < 1000; i++) idle.push(await connect(port));
  // Every one is either held open by the server or answered 503 and closed: none waits unanswered.
  await new Promise((r) => setTimeout(r, 500));
  const refused = idle.filter((c) => c.closed && c.responses()[0]?.status === 503).length;
  const openNow = await metric(admin, 'tollgate_open_connections');
  assert.ok(refused > 500, `refused ${refused}`);
  assert.equal(refused + openNow, 1001, `refused ${refused} + open ${openNow}`);
  assert.equal(await metric(admin, 'tollgate_connections_rejected_no_fd_total'), refused);
  assert.equal(await metric(admin, 'tollgate_accept_errors_total'), 0);
  // Monitoring: the admin listener answers, several connections at once.
  const probes = await Promise.all(['/readyz', '/healthz', '/metrics', '/readyz'].map(
    (p) => request(`http://127.0.0.1:${admin}${p}`, { timeoutMs: 3000 })));
  for (const r of probes) assert.equal(r.status, 200);
  // A reload (it opens the keys and accounts files) succeeds.
  const reload = await request(`http://127.0.0.1:${admin}/admin/reload`, { method: 'POST', timeoutMs: 5000 });
  assert.equal(reload.status, 200, reload.body);
  // Billing: calls on a connection the server holds are answered and recorded.
  for (let i = 0; i < 3; i++) {
    early.send(mcpRequest(key, toolCall(10 + i, 'search_stories', { query: 'rust', limit: 1 })));
  }
  assert.ok(await early.waitFor((x) => x.responses().length === 4, 5000));
  for (const r of early.responses().slice(1)) {
    assert.equal(r.status, 200);
    assert.match(r.body, /"isError":false/);
  }
  early.send(restHead(key, '/v1/usage'));
  assert.ok(await early.waitFor((x) => x.responses().length === 5, 5000));
  assert.equal(JSON.parse(early.responses()[4].body).quota.used, 3, early.responses()[4].body);
  for (const c of idle) c.destroy();
  early.destroy();
});

test('five pipelined requests then a half-close: five answers, then the close', async () => {
  const server = await start({ keys: { main: { account: 'a', plan: 'big' } }, threads: 2 });
  servers.push(server);
  const key = server.keys.main;
  const port = Number(new URL(server.url).port);
  for (const kind of ['rest', 'mcp', 'mixed']) {
    const c = await connect(port);
    let batch = '';
    for (let i = 0; i < 5; i++) {
      const mcp = kind === 'mcp' || (kind === 'mixed' && i % 2 === 1);
      batch += mcp ? mcpRequest(key, toolCall(i, 'search_stories', { query: 'the', limit: 50 }))
        : restHead(key, '/v1/stories?q=the&limit=50');
    }
    c.send(batch);
    c.end();
    assert.ok(await c.waitFor((x) => x.closed, 5000), `${kind}: the server did not close`);
    const rs = c.responses();
    assert.equal(rs.length, 5, `${kind}: ${rs.length} answers`);
    for (const r of rs) assert.equal(r.status, 200);
    assert.equal(c.reset, false);
  }
});

test('Expect: 100-continue with a bad key or a forbidden Origin is refused without 100 Continue', async () => {
  const server = await start({ keys: { main: { account: 'a', plan: 'big' } }, threads: 1 });
  servers.push(server);
  const port = Number(new URL(server.url).port);
  const body = JSON.stringify(toolCall(1, 'search_stories', { query: 'rust' }));
  const cases = [
    { key: 'tg_live_not_a_key', origin: '', status: 401 },
    { key: server.keys.main, origin: 'Origin: https://evil.example\r\n', status: 403 },
    { key: server.keys.main, origin: '', status: 100 },
  ];
  for (const k of cases) {
    const c = await connect(port);
    c.send(`POST /mcp HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${k.key}\r\n${k.origin}` +
      'Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n' +
      `Expect: 100-continue\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`);
    assert.ok(await c.waitFor((x) => x.responses().length >= 1, 3000), `no answer for ${k.status}`);
    assert.equal(c.responses()[0].status, k.status, c.responses()[0].head);
    c.send(body);  // a client that does not wait for the 100
    if (k.status === 100) {
      assert.ok(await c.waitFor((x) => x.responses().length === 2, 3000));
      assert.equal(c.responses()[1].status, 200);
    } else {
      assert.match(c.responses()[0].head, /\r\nConnection: close/i);
      assert.ok(await c.waitFor((x) => x.closed, 3000));
      assert.equal(c.responses().length, 1);
      assert.equal(c.reset, false);
    }
    c.destroy();
  }
});
