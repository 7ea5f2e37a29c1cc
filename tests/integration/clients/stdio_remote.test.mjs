// Verifies `tollgate stdio --remote URL` (issue 18) against a `tollgate serve` started here, with
// the real v1 SDK and v2 clients launching it through StdioClientTransport: messages pass byte
// for byte (a search equals the same call over HTTP), a 429 on tools/call becomes the
// rate_limited tool error and on other methods the 429 body's JSON-RPC error, a stop key past
// its quota gets quota_exceeded, two bridges share one key's quota exactly, a 401 at start is
// exit 2 with nothing on stdout, a 401 later (key revoked) is exit 2, stdin closed finishes what
// is in flight and exits 0.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client as ClientV2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as StdioV2 } from '@modelcontextprotocol/client/stdio';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  start, cleanup, runCli, admin, mcpPost, toolCall, usageOf, parseToolText, BIN, DEFAULT_PLANS,
} from './harness.mjs';
import { checkToolList, checkEachToolAgainstRest, successText, toolError, namesArgument } from './common.mjs';
import { bridgeArgs, bridgeSession, v1Bridge, closeBridge } from './remote_util.mjs';

let server;

const PLANS = {
  ...DEFAULT_PLANS,
  // rate 1 per 100 s after a burst of 6: initialize takes 1 (the bridge's key check and
  // notifications/initialized take none), so a few calls get through and the next is limited
  // for ~100 s.
  slow: { rate_per_sec: 0.01, burst: 6, monthly_quota: 1000000, overage: 'bill' },
  // one request, then one per 20 s: the client's initialize must get the only token.
  burst1: { rate_per_sec: 0.05, burst: 1, monthly_quota: 1000000, overage: 'bill' },
  stop3: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 3, overage: 'stop' },
  stop6: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 6, overage: 'stop' },
};

before(async () => {
  server = await start({
    plans: PLANS,
    keys: {
      main: { account: 'acct-main', plan: 'big' },
      v2: { account: 'acct-v2', plan: 'big' },
      slow: { account: 'acct-slow', plan: 'slow' },
      stop3: { account: 'acct-stop3', plan: 'stop3' },
      pair: { account: 'acct-pair', plan: 'stop6' },
      doomed: { account: 'acct-doomed', plan: 'big' },
      burst1: { account: 'acct-burst1', plan: 'burst1' },
    },
  });
});

after(async () => {
  await server?.stop();
  cleanup(server);
});

test('v1 client through the bridge: tools, each tool equal to REST, errors as over HTTP', async () => {
  const b = await v1Bridge(server.mcpUrl, server.keys.main);
  try {
    checkToolList((await b.client.listTools()).tools);
    const { query } = await checkEachToolAgainstRest(server, server.keys.main,
      (name, args) => b.client.callTool({ name, arguments: args }, undefined, { timeout: 10000 }));

    // The same search over HTTP: the same text block, the same message.
    const bridged = await b.client.callTool({ name: 'search_stories', arguments: { query, limit: 5 } });
    const direct = await mcpPost(server, toolCall(9, 'search_stories', { query, limit: 5 }), { key: server.keys.main });
    assert.equal(direct.status, 200);
    const directResult = JSON.parse(direct.body).result;
    assert.equal(successText(bridged), directResult.content[0].text, 'same text block as over HTTP');
    assert.deepEqual(bridged, directResult);

    await assert.rejects(b.client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => {
      assert.equal(e.code, -32602, e.message);
      assert.match(e.message, /Unknown tool: no_such_tool/);
      return true;
    });
    await assert.rejects(b.client.callTool({ name: 'search_stories', arguments: { query: 'x', limit: 1000 } }), (e) => {
      assert.equal(e.code, -32602, e.message);
      namesArgument(e.data, 'limit');
      return true;
    });
    toolError(await b.client.callTool({ name: 'get_story', arguments: { id: 'no-such-story-4242424242' } }), 'not_found');
    await b.client.ping();
  } finally {
    await closeBridge(b);
  }
});

test('a burst-1 key: the SDK connects through the bridge, whose key check spends no rate token', async () => {
  // Issue 29 item 1: the bridge's start-up key check is a notification (authenticated, 202,
  // never rate-counted), so the client's initialize gets the key's one token.
  const b = await v1Bridge(server.mcpUrl, server.keys.burst1);
  try {
    assert.equal(b.client.getServerVersion()?.name, 'tollgate');
    // The token is spent by initialize: the next request is the 429 of a limited key, which
    // shows the key check took nothing (a spent token before initialize failed connect).
    await assert.rejects(b.client.ping(), (err) => {
      assert.equal(err.code, 429, err.message);
      return true;
    });
    assert.doesNotMatch(b.stderr(), /refused|cannot be reached/, b.stderr());
  } finally {
    await closeBridge(b);
  }
  // A bad key is still refused at start: exit 2, nothing on stdout.
  const r = await runCli(bridgeArgs(server.mcpUrl), { env: { TOLLGATE_API_KEY: 'tg_live_not_a_key' }, input: '' });
  assert.equal(r.code, 2, r.stderr);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /401/);
});

test('v2 client pinned to 2026-07-28 through the bridge: discover, list, each tool equal to REST', async () => {
  const t = new StdioV2({ command: BIN, args: bridgeArgs(server.mcpUrl), env: { TOLLGATE_API_KEY: server.keys.v2 }, stderr: 'pipe' });
  const c = new ClientV2({ name: 'tollgate-it-remote-v2', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' }, probe: { timeoutMs: 30000 } } });
  try {
    await c.connect(t, { timeout: 30000 });
    assert.equal(c.getNegotiatedProtocolVersion(), '2026-07-28');
    checkToolList((await c.listTools()).tools);
    await checkEachToolAgainstRest(server, server.keys.v2,
      (name, args) => c.callTool({ name, arguments: args }, { timeout: 10000 }));
    toolError(await c.callTool({ name: 'get_story', arguments: { id: 'no-such-story-4242424242' } }), 'not_found');
  } finally {
    await c.close().catch(() => {});
  }
});

test('raw lines: only JSON-RPC on stdout, nothing for a notification, errors of the server passed on', async () => {
  const s = bridgeSession(server.mcpUrl, server.keys.main);
  try {
    const init = await s.send({ jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
    assert.equal(init.result.protocolVersion, '2025-06-18');
    s.notify({ jsonrpc: '2.0', method: 'notifications/initialized' });
    assert.deepEqual(await s.send({ jsonrpc: '2.0', id: 2, method: 'ping' }), { jsonrpc: '2.0', id: 2, result: {} });
    assert.equal((await s.send({ jsonrpc: '2.0', id: 3, method: 'no/such/method' })).error.code, -32601);
    const bad = await s.send('{not json', { id: null });
    assert.equal(bad.error.code, -32700);
    const r = await s.close();
    assert.equal(r.code, 0, `EOF -> exit 0; stderr: ${s.stderr}`);
    assert.equal(s.lines.length, 4, `one line per request, none for the notification: ${JSON.stringify(s.lines)}`);
    assert.ok(!s.lines.some((l) => l.unparsable), 'every stdout line is JSON');
  } finally {
    await s.close();
  }
});

test('stdin closed with calls in flight: every one is answered, then exit 0', async () => {
  const lines = [];
  for (let i = 0; i < 20; i++) lines.push(JSON.stringify(toolCall(i, 'search_stories', { query: 'the', limit: 3 })));
  lines.push(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  const r = await runCli(bridgeArgs(server.mcpUrl), { env: { TOLLGATE_API_KEY: server.keys.main }, input: lines.join('\n') + '\n', timeoutMs: 30000 });
  assert.equal(r.code, 0, `exit 0; stderr: ${r.stderr}`);
  const out = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(out.map((m) => m.id).sort((a, b) => a - b), [...Array(20).keys()]);
  for (const m of out) successText(m.result);
});

test('a key the server refuses at start: message on stderr, exit 2, nothing on stdout', async () => {
  const r = await runCli(bridgeArgs(server.mcpUrl), {
    env: { TOLLGATE_API_KEY: 'tg_live_0000000000000000000000000000000000000000' },
    input: JSON.stringify(toolCall(1, 'get_usage')) + '\n', timeoutMs: 30000,
  });
  assert.equal(r.code, 2, `exit 2; stderr: ${r.stderr}`);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /refused the key in TOLLGATE_API_KEY \(HTTP 401/);
  assert.ok(r.stderr.includes(server.mcpUrl), 'the message names the server');

  const missing = await runCli(bridgeArgs(server.mcpUrl), { unset: ['TOLLGATE_API_KEY'], input: '' });
  assert.equal(missing.code, 2);
  assert.equal(missing.stdout, '');
  assert.match(missing.stderr, /TOLLGATE_API_KEY/);

  // The v1 client sees a failed connect.
  const t = new StdioClientTransport({ command: BIN, args: bridgeArgs(server.mcpUrl), env: { TOLLGATE_API_KEY: 'tg_bogus' }, stderr: 'pipe' });
  const c = new Client({ name: 'tollgate-it-remote-bad', version: '1.0.0' });
  await assert.rejects(c.connect(t, { timeout: 10000 }));
  await c.close().catch(() => {});
});

test('bad usage: exit 2 naming the flag', async () => {
  for (const [args, re] of [
    [['stdio', '--remote', 'ftp://x/mcp'], /not an http:\/\/ or https:\/\/ URL/],
    [['stdio', '--remote', server.mcpUrl, '--sample'], /--sample: not with --remote/],
    [['stdio', '--remote', server.mcpUrl, '--timeout-ms', 'soon'], /--timeout-ms/],
    [['stdio', '--remote', server.mcpUrl, '--cacert', '/no/such/ca.pem'], /--cacert: cannot read/],
  ]) {
    const r = await runCli(args, { env: { TOLLGATE_API_KEY: server.keys.main }, input: '' });
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, re);
    assert.equal(r.stdout, '');
  }
  const help = await runCli(['stdio', '--remote', server.mcpUrl, '--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /--cacert FILE/);
});

test('a key revoked while the bridge runs: the next answer is a 401, exit 2 with a message', async () => {
  const s = bridgeSession(server.mcpUrl, server.keys.doomed);
  try {
    successText((await s.send(toolCall(1, 'get_usage'))).result);
    await admin(server, ['keys', 'revoke', await server.keyId('doomed')]);
    // The server takes the revocation at SIGHUP; until it has, calls still succeed.
    let id = 2;
    const deadline = Date.now() + 10000;
    let err;
    while (Date.now() < deadline) {
      try {
        await s.send(toolCall(id++, 'get_usage'), { timeoutMs: 5000 });
      } catch (e) {
        err = e;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(err, 'the bridge stopped answering once the key was revoked');
    const r = await s.exited;
    assert.equal(r.code, 2, `exit 2; stderr: ${s.stderr}`);
    assert.match(s.stderr, /refused the key in TOLLGATE_API_KEY \(HTTP 401: the key is unknown or was revoked\); exiting/);
    assert.ok(!s.lines.some((l) => l.error || l.unparsable), 'nothing but answers on stdout');
  } finally {
    await s.close();
  }
});

test('a rate-limited key: tools/call gets the rate_limited tool error, other methods the 429 body', async () => {
  const b = await v1Bridge(server.mcpUrl, server.keys.slow);
  try {
    let limited;
    for (let i = 0; i < 10 && !limited; i++) {
      const r = await b.client.callTool({ name: 'get_usage', arguments: {} });
      if (r.isError) limited = r;
    }
    assert.ok(limited, 'a call past the burst is limited');
    const e = toolError(limited, 'rate_limited');
    assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, JSON.stringify(e));
    // The same key over HTTP now: 429 whose Retry-After is the figure the tool error carried.
    const direct = await mcpPost(server, toolCall(1, 'get_usage'), { key: server.keys.slow });
    assert.equal(direct.status, 429);
    assert.ok(Math.abs(Number(direct.headers['retry-after']) - e.retry_after_secs) <= 1,
      `Retry-After ${direct.headers['retry-after']} vs retry_after_secs ${e.retry_after_secs}`);

    await assert.rejects(b.client.listTools(), (err) => {
      assert.equal(err.code, 429, err.message);
      assert.equal(err.data?.code, 'rate_limited', JSON.stringify(err.data));
      assert.ok(err.data.retry_after_secs >= 1);
      return true;
    });
  } finally {
    await closeBridge(b);
  }
});

test('a stop key past its quota: quota_exceeded with the figures, as the server wrote it', async () => {
  const b = await v1Bridge(server.mcpUrl, server.keys.stop3);
  try {
    for (let i = 0; i < 3; i++) successText(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }));
    const e = toolError(await b.client.callTool({ name: 'search_stories', arguments: { query: 'the' } }), 'quota_exceeded');
    assert.equal(e.quota_limit, 3);
    assert.equal(e.quota_used, 3);
    assert.equal(e.quota_remaining, 0);
    assert.ok(e.retry_after_secs > 0);
  } finally {
    await closeBridge(b);
  }
});

test('two bridges on one stop key at once: the quota holds exactly across them', async () => {
  const a = await v1Bridge(server.mcpUrl, server.keys.pair, [], 'bridge-a');
  const b = await v1Bridge(server.mcpUrl, server.keys.pair, [], 'bridge-b');
  try {
    assert.notEqual(a.transport.pid, b.transport.pid);
    const calls = [];
    for (let i = 0; i < 5; i++) {
      for (const x of [a, b]) calls.push(x.client.callTool({ name: 'search_stories', arguments: { query: 'the', limit: 1 } }));
    }
    const results = await Promise.all(calls);
    const ok = results.filter((r) => !r.isError).length;
    const exceeded = results.filter((r) => r.isError && parseToolText(r).code === 'quota_exceeded').length;
    assert.equal(ok, 6, 'exactly the quota succeeded');
    assert.equal(exceeded, 4, 'the rest are quota_exceeded');
    await new Promise((r) => setTimeout(r, 300));  // one reconcile interval
    assert.equal((await usageOf(server, server.keys.pair)).used, 6);
    // Both bridges are still serving.
    await a.client.ping();
    await b.client.ping();
  } finally {
    await closeBridge(a);
    await closeBridge(b);
  }
});
