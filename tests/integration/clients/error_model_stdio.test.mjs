// Verifies each row of the error model (design §2) over MCP/stdio: raw newline-delimited
// JSON-RPC against `tollgate stdio` (rate limit as a rate_limited tool error, suspended,
// quota_exceeded, bill overage, JSON-RPC errors). Missing/invalid key (exit 2) is in
// mcp_stdio_v1.test.mjs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { prepare, cleanup, runCli, StdioSession, toolCall, DEFAULT_PLANS } from './harness.mjs';

const PLANS = {
  ...DEFAULT_PLANS,
  slow: { rate_per_sec: 0.01, burst: 2, monthly_quota: 1000000, overage: 'bill' },
  stop2: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 2, overage: 'stop' },
  bill1: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 1, overage: 'bill' },
};

let prep;
let session;

before(async () => {
  prep = await prepare({
    plans: PLANS,
    keys: {
      main: { account: 'acct-main', plan: 'big' },
      slow: { account: 'acct-slow', plan: 'slow' },
      slowUsage: { account: 'acct-slow-usage', plan: 'slow' },
      suspended: { account: 'acct-suspended', plan: 'big' },
      stop2: { account: 'acct-stop2', plan: 'stop2' },
      bill1: { account: 'acct-bill1', plan: 'bill1' },
    },
  });
  const r = await runCli(['accounts', 'suspend', 'acct-suspended', '--data-dir', prep.dataDir]);
  if (r.code !== 0) {
    const r2 = await runCli(['accounts', 'suspend', 'acct-suspended', '--data-dir', prep.dataDir, '--config', prep.configPath]);
    assert.equal(r2.code, 0, `accounts suspend: ${r.stderr} / ${r2.stderr}`);
  }
});

after(async () => {
  await session?.close();
  cleanup(prep);
});

/** One stdio process at a time on the data dir: each test opens its own and closes it. */
async function open(keyName) {
  await session?.close();
  session = new StdioSession(prep, prep.keys[keyName]);
  const r = await session.send({
    jsonrpc: '2.0', id: 'init', method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  });
  assert.ok(r.result?.protocolVersion, JSON.stringify(r));
  session.notify({ jsonrpc: '2.0', method: 'notifications/initialized' });
  await session.loaded();  // (a call before waits 5 s at most, then answers "still loading")
  return session;
}

function toolErrorOf(m, code) {
  assert.equal(m.result?.isError, true, JSON.stringify(m));
  assert.equal(m.result.content.length, 1);
  const e = JSON.parse(m.result.content[0].text);
  assert.equal(e.code, code, JSON.stringify(m));
  assert.equal(typeof e.message, 'string');
  return e;
}

function secsToMonthEnd() {
  const d = new Date();
  return Math.ceil((Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) - Date.now()) / 1000);
}

test('stdio: JSON-RPC errors (-32601, -32602 unknown tool and bad argument, -32700, -32600)', async () => {
  const s = await open('main');
  assert.equal((await s.send({ jsonrpc: '2.0', id: 1, method: 'no/such' })).error?.code, -32601);
  const unknownTool = await s.send(toolCall(2, 'nope_tool'));
  assert.equal(unknownTool.error?.code, -32602);
  assert.match(unknownTool.error.message, /Unknown tool: nope_tool/);
  const bad = await s.send(toolCall(3, 'search_stories', { query: 'x', limit: 0 }));
  assert.equal(bad.error?.code, -32602);
  assert.ok(JSON.stringify(bad.error.data ?? '').includes('limit'), JSON.stringify(bad));
  const parse = await s.send('{"jsonrpc":"2.0","id":4,"method":', { id: null });
  assert.equal(parse.error?.code, -32700, JSON.stringify(parse));
  const notReq = await s.send('{"jsonrpc":"2.0","id":5}', { ids: [5, null] });
  assert.equal(notReq.error?.code, -32600, JSON.stringify(notReq));
  assert.deepEqual(await s.send({ jsonrpc: '2.0', id: 6, method: 'ping' }), { jsonrpc: '2.0', id: 6, result: {} });
  toolErrorOf(await s.send(toolCall(7, 'get_story', { id: 'no-such-story-4242424242' })), 'not_found');
  assert.equal((await s.close()).code, 0, 'EOF -> exit 0');
});

test('stdio: rate limit is a rate_limited tool error with retry_after_secs', async () => {
  const s = await open('slow');
  let m;
  for (let i = 0; i < 10; i++) {
    m = await s.send(toolCall(100 + i, 'search_stories', { query: 'the', limit: 1 }));
    if (m.result?.isError) break;
  }
  const e = toolErrorOf(m, 'rate_limited');
  assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, JSON.stringify(e));
});

test('stdio: get_usage counts toward the rate limit too (as every request does over HTTP)', async () => {
  const s = await open('slowUsage');  // initialize took 1 of the burst of 2
  const first = await s.send(toolCall(1, 'get_usage'));
  assert.equal(first.result?.isError, false, JSON.stringify(first));
  const e = toolErrorOf(await s.send(toolCall(2, 'get_usage')), 'rate_limited');
  assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, JSON.stringify(e));
});

test('stdio: suspended account: tool error; initialize, tools/list, ping still work', async () => {
  const s = await open('suspended');
  const list = await s.send({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  assert.equal(list.result?.tools?.length, 3, JSON.stringify(list));
  assert.deepEqual(await s.send({ jsonrpc: '2.0', id: 2, method: 'ping' }), { jsonrpc: '2.0', id: 2, result: {} });
  toolErrorOf(await s.send(toolCall(3, 'search_stories', { query: 'the' })), 'suspended');
  toolErrorOf(await s.send(toolCall(4, 'get_story', { id: '1' })), 'suspended');
});

test('stdio: quota_exceeded on a stop key, with the quota figures', async () => {
  const s = await open('stop2');
  for (let i = 1; i <= 2; i++) {
    const m = await s.send(toolCall(i, 'search_stories', { query: 'the' }));
    assert.equal(m.result?.isError, false, JSON.stringify(m));
  }
  const e = toolErrorOf(await s.send(toolCall(3, 'search_stories', { query: 'the' })), 'quota_exceeded');
  assert.equal(e.quota_limit, 2);
  assert.equal(e.quota_used, 2);
  assert.equal(e.quota_remaining, 0);
  assert.ok(Math.abs(e.retry_after_secs - secsToMonthEnd()) <= 5, JSON.stringify(e));
  const usage = await s.send(toolCall(4, 'get_usage'));
  assert.equal(usage.result?.isError, false, 'get_usage is never billed and still answers');
});

test('stdio: a bill key past its quota still succeeds', async () => {
  const s = await open('bill1');
  for (let i = 1; i <= 3; i++) {
    const m = await s.send(toolCall(i, 'search_stories', { query: 'the' }));
    assert.equal(m.result?.isError, false, JSON.stringify(m));
  }
});
