// Verifies `tollgate stdio --remote URL` (issue 18) when the server or the network fails: a
// server stopped and started again under the same bridge, a server not there at start (start
// anyway, check the key at the first answer), connection refused, reset, timeout, 5xx and a
// malformed answer (tools/call: tool error `unavailable` with retry_after_secs; other requests:
// -32603 naming the server; the bridge lives on), SIGTERM with a call in flight, a server with
// sessions restarted (the bridge opens a new one), and HTTPS: a self-signed certificate refused
// with a clear message, accepted with --cacert, and https:// to a plain-HTTP server refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import {
  start, restart, prepare, cleanup, toolCall, restGet, findStory, mcpPost, usageOf, eventually,
  stopProcess,
} from './harness.mjs';
import { successText, toolError } from './common.mjs';
import {
  bridgeSession, v1Bridge, closeBridge, freePort, selfSignedCert, httpsFront, faultyServer,
} from './remote_util.mjs';

let server;
let tls;  // {dir, key, cert} or null without openssl

before(async () => {
  server = await start({ keys: { main: { account: 'acct-faults', plan: 'big' } } });
  tls = selfSignedCert();
});

after(async () => {
  await server?.stop();
  cleanup(server);
  if (tls) fs.rmSync(tls.dir, { recursive: true, force: true });
});

/** The tool error a tools/call answer carries (a raw JSON-RPC message). */
function toolErrorOf(msg, code) {
  assert.ok(msg.result, `a result, not a JSON-RPC error: ${JSON.stringify(msg)}`);
  return toolError(msg.result, code);
}

/** Checks a -32603 that names the server `url`; returns its message. */
function internalError(msg, url) {
  assert.equal(msg.error?.code, -32603, JSON.stringify(msg));
  assert.ok(msg.error.message.includes(url), `the message names the server ${url}: ${msg.error.message}`);
  return msg.error.message;
}

test('the server stopped and started again under one bridge: unavailable meanwhile, then served', async () => {
  const own = await start({ keys: { main: { account: 'acct-restart', plan: 'big' } } });
  let current = own;
  const b = await v1Bridge(own.mcpUrl, own.keys.main);
  try {
    successText(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }));
    await own.stop();

    const e = toolError(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }), 'unavailable');
    assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, JSON.stringify(e));
    await assert.rejects(b.client.listTools(), (err) => {
      assert.equal(err.code, -32603, err.message);
      assert.ok(err.message.includes(own.mcpUrl), `names the server: ${err.message}`);
      return true;
    });

    current = await restart(own);
    // The same bridge process reconnects on the next message.
    successText(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }));
    assert.equal((await b.client.listTools()).tools.length, 3);
    assert.equal(b.transport.pid !== undefined && b.transport.pid !== null, true);
    process.kill(b.transport.pid, 0);  // still the same, live process
  } finally {
    await closeBridge(b);
    await current.stop();
    cleanup(current);
  }
});

test('a server with sessions restarted under one bridge: the bridge opens a new session itself', async () => {
  const own = await start({ keys: { main: { account: 'acct-sess', plan: 'big' } }, extraConfig: '[mcp]\nsessions = true\n' });
  let current = own;
  const b = await v1Bridge(own.mcpUrl, own.keys.main);
  try {
    successText(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }));
    await own.stop();
    current = await restart(own);
    // The new process knows no session: it answers 404 to the old id (as it does here).
    const stale = await mcpPost(current, toolCall(1, 'get_usage'),
      { key: own.keys.main, version: '2025-11-25', extra: { 'Mcp-Session-Id': '0'.repeat(32) } });
    assert.equal(stale.status, 404);
    // Through the bridge the client never sees that: the same calls go on working.
    successText(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }));
    assert.equal((await b.client.listTools()).tools.length, 3);
    assert.match(b.stderr(), /had ended the session; opened a new one/);
  } finally {
    await closeBridge(b);
    await current.stop();
    cleanup(current);
  }
});

test('no server at start: the bridge starts, answers with errors, then serves once it is up', async () => {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/mcp`;
  const prepared = await prepare({ keys: { main: { account: 'acct-late', plan: 'big' } } });
  const good = bridgeSession(url, prepared.keys.main);
  const bad = bridgeSession(url, 'tg_live_0000000000000000000000000000000000000000');
  let late;
  try {
    toolErrorOf(await good.send(toolCall(1, 'search_stories', { query: 'the' }), { timeoutMs: 20000 }), 'unavailable');
    internalError(await good.send({ jsonrpc: '2.0', id: 2, method: 'ping' }), url);
    // A bad key cannot be told until the server answers: it starts too.
    toolErrorOf(await bad.send(toolCall(1, 'get_usage'), { timeoutMs: 20000 }), 'unavailable');
    assert.match(good.stderr, /cannot be reached .*starting anyway/);

    late = await start({ prepared, listen: `127.0.0.1:${port}` });
    successText((await good.send(toolCall(3, 'search_stories', { query: 'the' }))).result);
    // The first answer for the bad key is its 401: exit 2.
    await assert.rejects(bad.send(toolCall(2, 'get_usage'), { timeoutMs: 20000 }), /exited \(code 2/);
    assert.match(bad.stderr, /refused the key in TOLLGATE_API_KEY/);
    assert.equal((await good.close()).code, 0);
  } finally {
    await good.close();
    await bad.close();
    await late?.stop();
    cleanup(late ?? prepared);
  }
});

test('reset, timeout, 5xx and malformed answers: errors per message, and the bridge lives on', async () => {
  const faulty = await faultyServer('ok');
  const s = bridgeSession(faulty.url, 'tg_any_key', ['--timeout-ms', '500']);
  try {
    let id = 1;
    const expectations = [
      ['503', /HTTP 503/, 7],
      ['garbage', /not JSON-RPC/, 1],
      ['html', /not JSON-RPC/, 1],
      ['reset', /Empty reply|reset|closed/i, 1],
      ['hang', /no answer within 500 ms/, 1],
    ];
    for (const [mode, reason, retry] of expectations) {
      faulty.mode = mode;
      const e = toolErrorOf(await s.send(toolCall(id++, 'search_stories', { query: 'x' }), { timeoutMs: 10000 }), 'unavailable');
      assert.equal(e.retry_after_secs, retry, `${mode}: ${JSON.stringify(e)}`);
      const m = internalError(await s.send({ jsonrpc: '2.0', id: id++, method: 'tools/list' }, { timeoutMs: 10000 }), faulty.url);
      assert.match(m, reason, `${mode}: ${m}`);
    }
    // A notification that could not be delivered gets no answer; the next request still does.
    s.notify({ jsonrpc: '2.0', method: 'notifications/initialized' });
    // Back to a real server behind the same URL is covered by the restart test; here: refused.
    await faulty.close();
    const m = internalError(await s.send({ jsonrpc: '2.0', id: id++, method: 'ping' }, { timeoutMs: 10000 }), faulty.url);
    assert.match(m, /Couldn't connect|Connection refused/i);
    assert.equal(s.lines.length, 11, `one answer per request, none for the notification: ${JSON.stringify(s.lines)}`);
    assert.equal((await s.close()).code, 0, s.stderr);
  } finally {
    await s.close();
    await faulty.close();
  }
});

test('each bridge failure says its own cause; a refusal no retry mends is a JSON-RPC error without retry_after_secs', async () => {
  // Issue 29 item 2. get_usage of a server that is not there: the bridge's own words, never
  // the search backend's "no shard answered".
  const port = await freePort();
  const down = bridgeSession(`http://127.0.0.1:${port}/mcp`, server.keys.main);
  try {
    const e = toolErrorOf(await down.send(toolCall(1, 'get_usage'), { timeoutMs: 20000 }), 'unavailable');
    assert.match(e.message, /cannot be reached/, e.message);
    assert.match(e.message, /not sent and not billed/, e.message);
    assert.doesNotMatch(e.message, /shard/, e.message);
    assert.ok(e.retry_after_secs >= 1, JSON.stringify(e));
  } finally {
    await down.close();
  }

  // A URL without /mcp: the server's 404 is no MCP answer, and a retry cannot mend it.
  const noMcp = bridgeSession(`${server.url}/`, server.keys.main);
  try {
    for (const msg of [toolCall(2, 'get_usage'), { jsonrpc: '2.0', id: 3, method: 'ping' }]) {
      const a = await noMcp.send(msg, { timeoutMs: 20000 });
      assert.equal(a.error?.code, -32603, JSON.stringify(a));
      assert.match(a.error.message, /HTTP 404/);
      assert.match(a.error.message, /MCP endpoint/);
      assert.match(a.error.message, /Retrying will not help/);
      assert.equal(a.error.data?.retry_after_secs, undefined, JSON.stringify(a));
      assert.equal(a.result, undefined, 'not a tool error');
    }
    assert.match(noMcp.stderr, /refused a message \(HTTP 404\)/);
  } finally {
    await noMcp.close();
  }

  // A 2 MB message: the server's own 413, a JSON-RPC error, reaches the client under its id.
  const big = bridgeSession(server.mcpUrl, server.keys.main);
  try {
    const a = await big.send(toolCall(4, 'search_stories', { query: 'x'.repeat(2 * 1024 * 1024) }), { timeoutMs: 20000 });
    assert.equal(a.id, 4, JSON.stringify(a).slice(0, 300));
    assert.equal(a.error?.code, -32600, JSON.stringify(a).slice(0, 300));
    assert.match(a.error.message, /Content Too Large/);
    assert.doesNotMatch(a.error.message, /shard/);
  } finally {
    await big.close();
  }

  // A proxy's 413 in plain text: the bridge says what it is, with no retry_after_secs.
  const faulty = await faultyServer('ok');
  const s = bridgeSession(faulty.url, 'tg_any_key');
  try {
    faulty.mode = '413';
    const a = await s.send(toolCall(5, 'search_stories', { query: 'x' }), { timeoutMs: 10000 });
    assert.equal(a.error?.code, -32603, JSON.stringify(a));
    assert.match(a.error.message, /HTTP 413/);
    assert.match(a.error.message, /larger than the server accepts/);
    assert.match(a.error.message, /Retrying will not help/);
    assert.equal(a.result, undefined);
    assert.match(s.stderr, /refused a message \(HTTP 413\)/);
  } finally {
    await s.close();
    await faulty.close();
  }
});

test('a call the bridge gave up on is not billed: deadline and cancellation reach the server', async () => {
  // Issue 29 item 3: the server is stopped (SIGSTOP) while a call is on its way; the bridge
  // answers `unavailable` at its --timeout-ms and sends notifications/cancelled; once the
  // server resumes it drops the call (its Tollgate-Deadline has passed, or its cancellation
  // was read first) and the access log says which. Usage is unchanged.
  const dir = fs.mkdtempSync('/tmp/tollgate-abandoned-');
  const log = `${dir}/access.log`;
  const srv = await start({
    threads: 1,
    keys: { main: { account: 'acct-abandoned', plan: 'big' } },
    extraConfig: `[log]\naccess = "${log}"\n`,
  });
  const s = bridgeSession(srv.mcpUrl, srv.keys.main, ['--timeout-ms', '1500']);
  try {
    successText((await s.send(toolCall(1, 'search_stories', { query: 'the' }), { timeoutMs: 10000 })).result);
    const before = (await usageOf(srv, srv.keys.main)).used;
    await stopProcess(srv.pid);
    let e;
    const t0 = Date.now();
    try {
      e = toolErrorOf(await s.send(toolCall(2, 'search_stories', { query: 'rust' }), { timeoutMs: 10000 }), 'unavailable');
    } finally {
      await new Promise((r) => setTimeout(r, 300));  // the cancellation leaves the bridge
      process.kill(srv.pid, 'SIGCONT');
    }
    assert.ok(Date.now() - t0 >= 1400, `answered at the timeout, after ${Date.now() - t0} ms`);
    assert.match(e.message, /did not answer in time/);
    assert.match(e.message, /cancelled/);
    await eventually(() => fs.existsSync(log) &&
      /"tool":"search_stories"[^\n]*"outcome":"(expired|cancelled)"/.test(fs.readFileSync(log, 'utf8')), 5000,
      'the access log says the call was dropped as expired or cancelled');
    await new Promise((r) => setTimeout(r, 300));  // reconcile_ms 100: figures settle
    assert.equal((await usageOf(srv, srv.keys.main)).used, before, 'the abandoned call is not billed');
  } finally {
    try { process.kill(srv.pid, 'SIGCONT'); } catch { /* gone */ }
    await s.close();
    await srv.stop();
    cleanup(srv);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('SIGTERM with a call in flight: it is answered first, then exit 0', async () => {
  const faulty = await faultyServer('ok');
  const s = bridgeSession(faulty.url, 'tg_any_key', ['--timeout-ms', '1500']);
  try {
    faulty.mode = 'hang';
    const answer = s.send(toolCall(1, 'search_stories', { query: 'x' }), { timeoutMs: 10000 });
    const seen = Date.now() + 5000;
    while (faulty.seen < 2 && Date.now() < seen) await new Promise((r) => setTimeout(r, 20));
    assert.equal(faulty.seen, 2, 'the key check and the call reached the server');
    process.kill(s.child.pid, 'SIGTERM');
    toolErrorOf(await answer, 'unavailable');  // its timeout ran out: answered, not dropped
    const r = await s.exited;
    assert.equal(r.code, 0, s.stderr);
    assert.match(s.stderr, /SIGTERM: reading no more; answering what is in flight \(1 POSTs\), then exiting/);
  } finally {
    await s.close();
    await faulty.close();
  }
});

test('HTTPS: a self-signed certificate is refused with a clear message, and accepted with --cacert', async (t) => {
  if (!tls) {
    t.skip('openssl is not on PATH: no certificate to test with');
    return;
  }
  const front = await httpsFront(server, tls);
  const s = bridgeSession(front.url, server.keys.main);
  try {
    const e = toolErrorOf(await s.send(toolCall(1, 'search_stories', { query: 'the' }), { timeoutMs: 20000 }), 'unavailable');
    assert.ok(e.retry_after_secs >= 1);
    const m = internalError(await s.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' }), front.url);
    assert.match(m, /certificate/i);
    assert.match(s.stderr, /certificate could not be verified .*--cacert FILE/);

    const b = await v1Bridge(front.url, server.keys.main, ['--cacert', tls.cert]);
    try {
      const { query } = await findStory(server, server.keys.main);
      const text = successText(await b.client.callTool({ name: 'search_stories', arguments: { query } }));
      const rest = await restGet(server, `/v1/stories?q=${encodeURIComponent(query)}`, { key: server.keys.main });
      assert.equal(text, rest.body, 'through HTTPS: the text block is the REST body');
    } finally {
      await closeBridge(b);
    }
  } finally {
    await s.close();
    await front.close();
  }
});

test('https:// to a server that speaks plain HTTP: refused with a clear message', async () => {
  const url = `https://127.0.0.1:${server.port}/mcp`;
  const s = bridgeSession(url, server.keys.main);
  try {
    const m = internalError(await s.send({ jsonrpc: '2.0', id: 1, method: 'ping' }, { timeoutMs: 20000 }), url);
    assert.match(m, /TLS handshake failed .*does the server speak HTTPS\?/);
    toolErrorOf(await s.send(toolCall(2, 'get_usage')), 'unavailable');
  } finally {
    await s.close();
  }
});
