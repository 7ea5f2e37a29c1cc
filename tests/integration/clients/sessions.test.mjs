// Verifies the optional legacy sessions (config [mcp] sessions = true): a session id is minted at
// initialize and the v1 client carries it; an unknown id gets 404; DELETE ends a session; past
// [mcp] max_sessions a new session ends the least recently used one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { start, cleanup, mcpPost, request } from './harness.mjs';

let server;

before(async () => {
  server = await start({ keys: { main: { account: 'acct-sessions', plan: 'big' } }, extraConfig: '[mcp]\nsessions = true\nmax_sessions = 3\n' });
});

after(async () => {
  await server?.stop();
  cleanup(server);
});

test('the v1 client gets a session id at initialize and uses it', async () => {
  const t = new StreamableHTTPClientTransport(new URL(server.mcpUrl),
    { requestInit: { headers: { Authorization: `Bearer ${server.keys.main}` } } });
  const c = new Client({ name: 'tollgate-it-sessions', version: '1.0.0' });
  await c.connect(t, { timeout: 10000 });
  try {
    assert.ok(t.sessionId, 'Mcp-Session-Id minted at initialize');
    assert.equal((await c.listTools()).tools.length, 3);
    const sid = t.sessionId;
    await t.terminateSession();  // DELETE /mcp with the id
    const r = await mcpPost(server, { jsonrpc: '2.0', id: 9, method: 'tools/list' },
      { key: server.keys.main, version: '2025-06-18', extra: { 'Mcp-Session-Id': sid } });
    assert.equal(r.status, 404, `an ended session is unknown: ${r.status} ${r.body}`);
  } finally {
    await c.close().catch(() => {});
  }
});

test('an unknown session id: 404', async () => {
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    { key: server.keys.main, version: '2025-06-18', extra: { 'Mcp-Session-Id': 'no-such-session-0000' } });
  assert.equal(r.status, 404, r.body);
});

test('initialize returns Mcp-Session-Id; DELETE ends it', async () => {
  const init = await mcpPost(server, { jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }, { key: server.keys.main });
  assert.equal(init.status, 200, init.body);
  const sid = init.headers['mcp-session-id'];
  assert.ok(sid, JSON.stringify(init.headers));
  const ok = await mcpPost(server, { jsonrpc: '2.0', id: 2, method: 'ping' },
    { key: server.keys.main, version: '2025-06-18', extra: { 'Mcp-Session-Id': sid } });
  assert.equal(ok.status, 200, ok.body);
  const del = await request(server.mcpUrl, { method: 'DELETE',
    headers: { Authorization: `Bearer ${server.keys.main}`, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18' } });
  assert.ok(del.status >= 200 && del.status < 300, `DELETE: ${del.status} ${del.body}`);
  const gone = await mcpPost(server, { jsonrpc: '2.0', id: 3, method: 'ping' },
    { key: server.keys.main, version: '2025-06-18', extra: { 'Mcp-Session-Id': sid } });
  assert.equal(gone.status, 404, gone.body);
});

/** Mints a session with a raw initialize; returns its id. */
async function mint() {
  const init = await mcpPost(server, { jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }, { key: server.keys.main });
  assert.equal(init.status, 200, init.body);
  const sid = init.headers['mcp-session-id'];
  assert.match(sid ?? '', /^[0-9a-f]{32}$/);
  return sid;
}

function ping(sid) {
  return mcpPost(server, { jsonrpc: '2.0', id: 2, method: 'ping' },
    { key: server.keys.main, version: '2025-06-18', extra: { 'Mcp-Session-Id': sid } });
}

function metric(text, name) {
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
  assert.ok(m, `${name} in /metrics:\n${text}`);
  return Number(m[1]);
}

test('at max_sessions a new session ends the least recently used; /metrics counts it', async () => {
  const before = metric((await request(`${server.url}/metrics`)).body, 'tollgate_mcp_sessions_evicted_total');
  // Sessions left by earlier tests are older than `a`, so they go first; then `a` would be
  // next, but using it makes `b` the least recently used.
  const a = await mint();
  const b = await mint();
  const c = await mint();
  assert.equal((await ping(a)).status, 200);
  const d = await mint();
  assert.equal((await ping(b)).status, 404, 'b, used longest ago, was ended for d');
  for (const sid of [a, c, d]) assert.equal((await ping(sid)).status, 200, `${sid} is live`);
  const text = (await request(`${server.url}/metrics`)).body;
  assert.equal(metric(text, 'tollgate_mcp_sessions'), 3);
  assert.ok(metric(text, 'tollgate_mcp_sessions_evicted_total') >= before + 1);
  // A client whose session was ended starts again with initialize, as the spec asks.
  const again = await mint();
  assert.equal((await ping(again)).status, 200);
});
