// Verifies the v1 TypeScript SDK client (@modelcontextprotocol/sdk Client +
// StreamableHTTPClientTransport, key in requestInit headers) works against tollgate over HTTP:
// connect, list tools, call each tool (text == REST body), and what it surfaces for JSON-RPC
// errors and isError results.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { start, cleanup, admin, eventually, DEFAULT_PLANS } from './harness.mjs';
import { checkToolList, checkEachToolAgainstRest, toolError, namesArgument } from './common.mjs';

let server;
let client;

async function connect(key, keyHeader = 'Authorization') {
  const headers = keyHeader === 'Authorization' ? { Authorization: `Bearer ${key}` } : { 'X-API-Key': key };
  const c = new Client({ name: 'tollgate-it-v1', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(server.mcpUrl), { requestInit: { headers } });
  await c.connect(transport, { timeout: 10000 });
  return c;
}

before(async () => {
  server = await start({
    plans: {
      ...DEFAULT_PLANS,
      slow: { rate_per_sec: 0.01, burst: 4, monthly_quota: 1000000, overage: 'bill' },
      stop1: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 1, overage: 'stop' },
    },
    keys: {
      main: { account: 'acct-v1', plan: 'big' },
      slow: { account: 'acct-v1-slow', plan: 'slow' },
      stop1: { account: 'acct-v1-stop1', plan: 'stop1' },
      susp: { account: 'acct-v1-susp', plan: 'big' },
    },
  });
  client = await connect(server.keys.main);
});

after(async () => {
  await client?.close().catch(() => {});
  const r = await server?.stop();
  cleanup(server);
  if (r) assert.equal(r.code, 0, `SIGTERM exits 0 (got ${JSON.stringify(r)}); stderr: ${server.stderr()}`);
});

test('initialize negotiates a revision the client supports and names the server', () => {
  const info = client.getServerVersion();
  assert.equal(typeof info?.name, 'string');
  assert.ok(client.getServerCapabilities()?.tools, 'server advertises tools');
});

test('tools/list: three tools, no outputSchema', async () => {
  const { tools } = await client.listTools(undefined, { timeout: 10000 });
  checkToolList(tools);
});

test('each tool succeeds with a text block equal to the REST body', async () => {
  await checkEachToolAgainstRest(server, server.keys.main,
    (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 10000 }));
});

test('the key also works as X-API-Key', async () => {
  const c = await connect(server.keys.main, 'X-API-Key');
  try {
    const { tools } = await c.listTools();
    assert.equal(tools.length, 3);
  } finally {
    await c.close();
  }
});

test('ping answers {}', async () => {
  const r = await client.ping();
  assert.deepEqual(Object.keys(r).filter((k) => k !== '_meta'), []);
});

test('unknown tool: the client throws McpError -32602 "Unknown tool: NAME"', async () => {
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => {
    assert.equal(e.code, -32602, `code: ${e.code} ${e.message}`);
    assert.match(e.message, /Unknown tool: no_such_tool/);
    return true;
  });
});

for (const [what, args, argument] of [
  ['missing required argument', {}, 'query'],
  ['wrong type', { query: 42 }, 'query'],
  ['out of range', { query: 'rust', limit: 0 }, 'limit'],
  ['out of range (max)', { query: 'rust', limit: 51 }, 'limit'],
  ['unknown argument', { query: 'rust', colour: 'red' }, 'colour'],
]) {
  test(`bad argument (${what}): McpError -32602 with data naming "${argument}"`, async () => {
    await assert.rejects(client.callTool({ name: 'search_stories', arguments: args }), (e) => {
      assert.equal(e.code, -32602, `code: ${e.code} ${e.message}`);
      namesArgument(e.data, argument);
      return true;
    });
  });
}

test('story not found: an isError result the client returns (not throws), code not_found', async () => {
  const r = await client.callTool({ name: 'get_story', arguments: { id: 'no-such-story-4242424242' } });
  toolError(r, 'not_found');
});

test('after errors the session is still fine', async () => {
  const { tools } = await client.listTools();
  assert.equal(tools.length, 3);
});

test('missing or unknown key: connect fails with the HTTP 401 (no OAuth flow started)', async () => {
  const c = new Client({ name: 'tollgate-it-v1-nokey', version: '1.0.0' });
  const t = new StreamableHTTPClientTransport(new URL(server.mcpUrl), { requestInit: { headers: { Authorization: 'Bearer tg_bogus' } } });
  await assert.rejects(c.connect(t, { timeout: 10000 }), (e) => {
    assert.equal(e.code, 401, `${e.name}: ${e.message}`);
    return true;
  });
  await c.close().catch(() => {});
});

test('rate limited: the client rejects the call quoting the 429 JSON-RPC body', async () => {
  // burst 4 at 0.01/s: initialize, notifications/initialized and tools/list... then refused
  const c = await connect(server.keys.slow);
  try {
    let err;
    for (let i = 0; i < 8 && !err; i++) {
      try {
        await c.callTool({ name: 'get_usage', arguments: {} });
      } catch (e) {
        err = e;
      }
    }
    assert.ok(err, 'refused within 8 calls');
    assert.equal(err.code, 429, `${err.name}: ${err.message}`);
    assert.match(err.message, /rate_limited/, 'the JSON-RPC error body is quoted in the message');
  } finally {
    await c.close();
  }
});

test('quota exhausted on a stop key: the client gets an isError result with the quota figures', async () => {
  const c = await connect(server.keys.stop1);
  try {
    const ok = await c.callTool({ name: 'search_stories', arguments: { query: 'the' } });
    assert.equal(ok.isError, false, JSON.stringify(ok));
    const r = await c.callTool({ name: 'search_stories', arguments: { query: 'the' } });
    const e = toolError(r, 'quota_exceeded');
    assert.deepEqual([e.quota_limit, e.quota_used, e.quota_remaining], [1, 1, 0], JSON.stringify(e));
    assert.ok(e.retry_after_secs >= 1);
    // the session is fine: lists and unbilled tools still work
    assert.equal((await c.listTools()).tools.length, 3);
    assert.equal((await c.callTool({ name: 'get_usage', arguments: {} })).isError, false);
  } finally {
    await c.close();
  }
});

test('suspended account: the client connects and lists tools, and billable calls are isError suspended', async () => {
  await admin(server, ['accounts', 'suspend', 'acct-v1-susp']);
  const c = await connect(server.keys.susp);
  try {
    assert.equal((await c.listTools()).tools.length, 3);
    await c.ping();
    await eventually(async () => (await c.callTool({ name: 'search_stories', arguments: { query: 'the' } })).isError === true,
      3000, 'suspension seen');
    toolError(await c.callTool({ name: 'search_stories', arguments: { query: 'the' } }), 'suspended');
    toolError(await c.callTool({ name: 'get_story', arguments: { id: '1' } }), 'suspended');
  } finally {
    await c.close();
  }
});
