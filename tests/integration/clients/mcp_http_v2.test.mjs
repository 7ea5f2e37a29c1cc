// Verifies the v2 TypeScript SDK client (@modelcontextprotocol/client 2.4.0) pinned to protocol
// revision 2026-07-28 works against tollgate over HTTP: server/discover instead of initialize,
// the per-request _meta envelope and Mcp-Method/Mcp-Name headers, resultType on every result;
// list tools, call each tool (text == REST body), JSON-RPC errors and isError results.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { start, cleanup, mcpPost } from './harness.mjs';
import { checkToolList, checkEachToolAgainstRest, toolError, namesArgument } from './common.mjs';

const REVISION = '2026-07-28';
let server;
let client;

async function connect(key) {
  const c = new Client({ name: 'tollgate-it-v2', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: REVISION }, probe: { timeoutMs: 10000 } } });
  const transport = new StreamableHTTPClientTransport(new URL(server.mcpUrl),
    { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
  await c.connect(transport, { timeout: 10000 });
  return c;
}

before(async () => {
  server = await start({ keys: { main: { account: 'acct-v2', plan: 'big' } } });
  client = await connect(server.keys.main);
});

after(async () => {
  await client?.close().catch(() => {});
  const r = await server?.stop();
  cleanup(server);
  if (r) assert.equal(r.code, 0, `SIGTERM exits 0 (got ${JSON.stringify(r)})`);
});

test('server/discover negotiates 2026-07-28 (modern era, no initialize)', () => {
  assert.equal(client.getNegotiatedProtocolVersion(), REVISION);
  assert.equal(client.getProtocolEra(), 'modern');
  const d = client.getDiscoverResult();
  assert.ok(d.supportedVersions.includes(REVISION), JSON.stringify(d));
  assert.ok(d.capabilities?.tools, 'discover advertises tools');
});

test('tools/list: three tools, no outputSchema', async () => {
  const { tools } = await client.listTools(undefined, { timeout: 10000 });
  checkToolList(tools);
});

test('each tool succeeds with a text block equal to the REST body', async () => {
  await checkEachToolAgainstRest(server, server.keys.main,
    (name, args) => client.callTool({ name, arguments: args }, { timeout: 10000 }));
});

// (No ping test: the v2 client refuses to send `ping` on a 2026-07-28 connection — "Method 'ping'
// is not supported by the negotiated protocol version".)

test('unknown tool: the client throws a ProtocolError -32602 "Unknown tool: NAME"', async () => {
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => {
    assert.equal(e.code, -32602, `code: ${e.code} ${e.message}`);
    assert.match(e.message, /Unknown tool: no_such_tool/);
    return true;
  });
});

test('bad argument: ProtocolError -32602 with data naming the argument', async () => {
  await assert.rejects(client.callTool({ name: 'search_stories', arguments: { query: 'rust', limit: 0 } }), (e) => {
    assert.equal(e.code, -32602, `code: ${e.code} ${e.message}`);
    namesArgument(e.data, 'limit');
    return true;
  });
});

test('story not found: an isError result, code not_found', async () => {
  const r = await client.callTool({ name: 'get_story', arguments: { id: 'no-such-story-4242424242' } });
  toolError(r, 'not_found');
});

// The same revision driven by hand, for the rules the client itself never breaks.
const meta = {
  'io.modelcontextprotocol/protocolVersion': REVISION,
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};
const modernHeaders = (method, name) => ({ 'Mcp-Method': method, ...(name ? { 'Mcp-Name': name } : {}) });

test('raw 2026-07-28: results carry resultType "complete"', async () => {
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: meta } },
    { key: server.keys.main, version: REVISION, extra: modernHeaders('tools/list') });
  assert.equal(r.status, 200, r.body);
  const j = JSON.parse(r.body);
  assert.equal(j.result.resultType, 'complete', r.body);
  assert.equal(typeof j.result.ttlMs, 'number', `tools/list carries ttlMs on 2026-07-28: ${r.body}`);
  assert.ok(['public', 'private'].includes(j.result.cacheScope), `tools/list carries cacheScope: ${r.body}`);
});

test('raw 2026-07-28: Mcp-Method header disagreeing with the body -> -32020, HTTP 400', async () => {
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: meta } },
    { key: server.keys.main, version: REVISION, extra: modernHeaders('ping') });
  assert.equal(r.status, 400, r.body);
  const j = JSON.parse(r.body);
  assert.equal(j.error?.code, -32020, r.body);
  assert.equal(j.id, 2);
});

test('raw 2026-07-28: Mcp-Name disagreeing with params.name -> -32020', async () => {
  const r = await mcpPost(server, {
    jsonrpc: '2.0', id: 3, method: 'tools/call', params: { _meta: meta, name: 'get_usage', arguments: {} },
  }, { key: server.keys.main, version: REVISION, extra: modernHeaders('tools/call', 'search_stories') });
  assert.equal(r.status, 400, r.body);
  assert.equal(JSON.parse(r.body).error?.code, -32020, r.body);
});

test('raw 2026-07-28: unsupported revision in _meta -> -32022 listing the supported ones', async () => {
  const bad = { ...meta, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' };
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 4, method: 'server/discover', params: { _meta: bad } },
    { key: server.keys.main, version: REVISION, extra: modernHeaders('server/discover') });
  // The header says 2026-07-28 and the body 2099-01-01: either a header mismatch (-32020) or an
  // unsupported version (-32022) is a correct answer; a -32022 must list the supported revisions.
  const j = JSON.parse(r.body);
  assert.ok([-32020, -32022].includes(j.error?.code), r.body);
  if (j.error.code === -32022) assert.ok(j.error.data?.supported?.includes(REVISION), r.body);
});

test('raw 2026-07-28: unknown method -> -32601 with HTTP 404', async () => {
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 5, method: 'no/such', params: { _meta: meta } },
    { key: server.keys.main, version: REVISION, extra: modernHeaders('no/such') });
  assert.equal(r.status, 404, r.body);
  assert.equal(JSON.parse(r.body).error?.code, -32601, r.body);
});

test('missing or unknown key: connect fails with a 401 error (no OAuth flow started)', async () => {
  const c = new Client({ name: 'tollgate-it-v2-nokey', version: '1.0.0' }, { versionNegotiation: { mode: { pin: REVISION } } });
  const t = new StreamableHTTPClientTransport(new URL(server.mcpUrl), { requestInit: { headers: { Authorization: 'Bearer tg_bogus' } } });
  await assert.rejects(c.connect(t, { timeout: 10000 }), (e) => {
    assert.match(`${e.message} ${JSON.stringify(e.data ?? {})}`, /401/, `${e.name}: ${e.message}`);
    return true;
  });
  await c.close().catch(() => {});
});

test("mode 'auto': the server/discover probe selects the modern era", async () => {
  const c = new Client({ name: 'tollgate-it-v2-auto', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  const t = new StreamableHTTPClientTransport(new URL(server.mcpUrl),
    { requestInit: { headers: { Authorization: `Bearer ${server.keys.main}` } } });
  await c.connect(t, { timeout: 10000 });
  try {
    assert.equal(c.getNegotiatedProtocolVersion(), REVISION);
    assert.equal((await c.listTools()).tools.length, 3);
  } finally {
    await c.close();
  }
});

test("mode 'legacy' (the v2 default): initialize handshake, 2025 era, same tools", async () => {
  const c = new Client({ name: 'tollgate-it-v2-legacy', version: '1.0.0' });
  const t = new StreamableHTTPClientTransport(new URL(server.mcpUrl),
    { requestInit: { headers: { Authorization: `Bearer ${server.keys.main}` } } });
  await c.connect(t, { timeout: 10000 });
  try {
    assert.ok(c.getNegotiatedProtocolVersion() < REVISION, c.getNegotiatedProtocolVersion());
    const { tools } = await c.listTools();
    checkToolList(tools);
    await c.ping();
  } finally {
    await c.close();
  }
});
