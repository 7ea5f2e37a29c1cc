// Verifies each row of the error model (design §2, seed mcp-errors.txt) over MCP/HTTP and REST,
// with raw HTTP requests against the real server: status, headers and body of every answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import {
  start, cleanup, admin, eventually, request, mcpPost, mcpHeaders, restGet, toolCall, findStory, keyIdOf,
  DEFAULT_PLANS,
} from './harness.mjs';

const PLANS = {
  ...DEFAULT_PLANS,
  slow: { rate_per_sec: 0.01, burst: 2, monthly_quota: 1000000, overage: 'bill' },
  stop3: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 3, overage: 'stop' },
  bill2: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 2, overage: 'bill' },
};

let server;
let story;  // {query, id} that exists in the sample corpus

before(async () => {
  server = await start({
    plans: PLANS,
    keys: {
      main: { account: 'acct-main', plan: 'big' },
      revoked: { account: 'acct-revoked', plan: 'big' },
      slow: { account: 'acct-slow', plan: 'slow' },
      slowrest: { account: 'acct-slowrest', plan: 'slow' },
      suspended: { account: 'acct-suspended', plan: 'big' },
      stop3: { account: 'acct-stop3', plan: 'stop3' },
      stop3rest: { account: 'acct-stop3rest', plan: 'stop3' },
      bill2: { account: 'acct-bill2', plan: 'bill2' },
    },
  });
  story = await findStory(server, server.keys.main);
});

after(async () => {
  const r = await server?.stop();
  cleanup(server);
  if (r) assert.equal(r.code, 0, `SIGTERM exits 0 (got ${JSON.stringify(r)})`);
});

const init = (id = 1, version = '2025-06-18') => ({
  jsonrpc: '2.0', id, method: 'initialize',
  params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
});

function json(r) {
  assert.match(r.headers['content-type'] ?? '', /application\/json/, `JSON content type: ${JSON.stringify(r.headers)}`);
  return JSON.parse(r.body);
}

/** The tool error inside a 200 JSON-RPC result. */
function toolErrorOf(r, id, code) {
  assert.equal(r.status, 200, `a tool error travels in HTTP 200: ${r.status} ${r.body}`);
  const j = json(r);
  assert.equal(j.jsonrpc, '2.0');
  assert.deepEqual(j.id, id);
  assert.equal(j.result?.isError, true, r.body);
  assert.equal(j.result.content.length, 1);
  assert.equal(j.result.content[0].type, 'text');
  const e = JSON.parse(j.result.content[0].text);
  assert.equal(e.code, code, r.body);
  assert.equal(typeof e.message, 'string');
  return e;
}

function successOf(r, id) {
  assert.equal(r.status, 200, r.body);
  const j = json(r);
  assert.deepEqual(j.id, id);
  assert.equal(j.result?.isError, false, `success has isError:false: ${r.body}`);
  assert.equal(j.result.content.length, 1);
  return j.result.content[0].text;
}

function rpcErrorOf(r, status, id, code) {
  assert.equal(r.status, status, `HTTP status for JSON-RPC ${code}: ${r.status} ${r.body}`);
  const j = json(r);
  assert.equal(j.jsonrpc, '2.0');
  assert.deepEqual(j.id, id, r.body);
  assert.equal(j.error?.code, code, r.body);
  assert.equal(typeof j.error.message, 'string');
  assert.equal(j.result, undefined);
  return j.error;
}

/** Seconds from now to the end of the UTC month. */
function secsToMonthEnd() {
  const d = new Date();
  return Math.ceil((Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) - Date.now()) / 1000);
}

const RATE_QUOTA_HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'x-quota-limit',
  'x-quota-used', 'x-quota-remaining', 'x-quota-reset', 'ratelimit-policy', 'ratelimit'];

// ------------------------------------------------------------------------------------------- 401

// `keySent`: a key was presented (RFC 6750: error="invalid_token" then, no error code without).
function check401(r, keySent = false) {
  assert.equal(r.status, 401, r.body);
  if (keySent) {
    assert.match(r.headers['www-authenticate'] ?? '',
      /^Bearer realm="tollgate", error="invalid_token", error_description="[^"]+"$/);
  } else {
    assert.equal(r.headers['www-authenticate'], 'Bearer realm="tollgate"');
  }
  assert.doesNotMatch(r.headers['www-authenticate'], /resource_metadata/, 'never advertise OAuth');
  const j = json(r);
  assert.equal(j.code, 'invalid_key', r.body);
  assert.equal(typeof j.message, 'string');
  assert.equal(j.jsonrpc, undefined, 'no JSON-RPC envelope on a 401');
}

test('401: no key on /mcp', async () => {
  check401(await mcpPost(server, init()));
});

for (const keyHeader of ['bearer', 'x-api-key']) {
  test(`401: unknown key (${keyHeader}) on /mcp and REST`, async () => {
    check401(await mcpPost(server, init(), { key: 'tg_0000000000000000000000000000000000', keyHeader }), true);
    check401(await restGet(server, `/v1/stories?q=${story.query}`, { key: 'tg_0000000000000000000000000000000000', keyHeader }), true);
  });
}

test('401: no key on REST', async () => {
  check401(await restGet(server, `/v1/stories?q=${story.query}`));
  check401(await restGet(server, '/v1/usage'));
});

test('401: a revoked key, both header forms, after the server reloads', async () => {
  const key = server.keys.revoked;
  assert.equal((await mcpPost(server, init(), { key })).status, 200, 'works before revocation');
  const id = await keyIdOf(server.dataDir, 'acct-revoked', server.keyOutputs.revoked);
  await admin(server, ['keys', 'revoke', id]);
  await eventually(async () => (await mcpPost(server, init(), { key })).status === 401, 3000, 'revoked key refused');
  check401(await mcpPost(server, init(), { key }), true);
  check401(await mcpPost(server, init(), { key, keyHeader: 'x-api-key' }), true);
  check401(await restGet(server, `/v1/stories?q=${story.query}`, { key }), true);
});

test('/.well-known/oauth-protected-resource is 404, with or without a key (no OAuth)', async () => {
  for (const p of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp',
    '/.well-known/oauth-authorization-server']) {
    assert.equal((await request(server.url + p)).status, 404, p);
    assert.equal((await restGet(server, p, { key: server.keys.main })).status, 404, p);
  }
});

// ------------------------------------------------------------------------------------------- 429

test('429 on /mcp: Retry-After and a JSON-RPC error body, code 429, id echoed', async () => {
  const key = server.keys.slow;
  let r;
  for (let i = 0; i < 10; i++) {
    r = await mcpPost(server, toolCall(`rl-${i}`, 'get_usage'), { key });
    if (r.status === 429) break;
    assert.equal(r.status, 200, r.body);
  }
  assert.equal(r.status, 429, 'burst 2 at 0.01/s: refused within 10 requests');
  const ra = r.headers['retry-after'];
  assert.match(ra ?? '', /^[1-9][0-9]*$/, `Retry-After whole seconds >= 1: ${ra}`);
  const j = json(r);
  assert.equal(j.jsonrpc, '2.0');
  assert.match(String(j.id), /^rl-\d$/, `id echoed: ${r.body}`);
  assert.equal(j.error?.code, 429, r.body);
  assert.ok(j.error.code < -32768 || j.error.code > -32000, 'outside the reserved range');
  assert.equal(j.error.data?.code, 'rate_limited', r.body);
  assert.equal(typeof j.error.data.message, 'string');
  // The wait is in the sentence too (clients often show only the message), and is the header's.
  assert.equal(j.error.message, `Rate limit exceeded: retry in ${ra} second(s).`, r.body);
  assert.equal(String(j.error.data.retry_after_secs), ra, r.body);
  // a body that did not parse: id null
  const bad = await request(server.mcpUrl, { method: 'POST', headers: mcpHeaders(key), body: '{"jsonrpc":' });
  if (bad.status === 429) assert.equal(json(bad).id, null, bad.body);
});

test('429 on REST: Retry-After and the rate_limited JSON', async () => {
  const key = server.keys.slowrest;
  let r;
  for (let i = 0; i < 10; i++) {
    r = await restGet(server, '/v1/usage', { key });
    if (r.status === 429) break;
    assert.equal(r.status, 200, r.body);
  }
  assert.equal(r.status, 429);
  assert.match(r.headers['retry-after'] ?? '', /^[1-9][0-9]*$/);
  assert.equal(json(r).code, 'rate_limited', r.body);
});

// ------------------------------------------------------------------------------------- suspended

test('suspended: tool error / REST 403, not billed; initialize, tools/list, ping still work; resume', async () => {
  const key = server.keys.suspended;
  successOf(await mcpPost(server, toolCall(1, 'search_stories', { query: story.query }), { key }), 1);
  await admin(server, ['accounts', 'suspend', 'acct-suspended']);
  await eventually(async () => {
    const r = await mcpPost(server, toolCall(2, 'search_stories', { query: story.query }), { key });
    return JSON.parse(r.body).result?.isError === true;
  }, 3000, 'suspension seen');
  const usedBefore = (await restGet(server, '/v1/usage', { key })).headers['x-quota-used'];

  const e = toolErrorOf(await mcpPost(server, toolCall(3, 'search_stories', { query: story.query }), { key }), 3, 'suspended');
  assert.ok(e.message.length > 10);
  toolErrorOf(await mcpPost(server, toolCall(4, 'get_story', { id: story.id }), { key }), 4, 'suspended');

  const rest = await restGet(server, `/v1/stories?q=${story.query}`, { key });
  assert.equal(rest.status, 403, rest.body);
  assert.equal(json(rest).code, 'suspended');
  assert.deepEqual(json(rest), e, 'REST body is the same JSON object as the tool error');
  assert.equal((await restGet(server, `/v1/stories/${story.id}`, { key })).status, 403);

  assert.equal((await mcpPost(server, init(5), { key })).status, 200);
  const list = await mcpPost(server, { jsonrpc: '2.0', id: 6, method: 'tools/list' }, { key, version: '2025-06-18' });
  assert.equal(JSON.parse(list.body).result.tools.length, 3, list.body);
  assert.deepEqual(JSON.parse((await mcpPost(server, { jsonrpc: '2.0', id: 7, method: 'ping' }, { key })).body),
    { jsonrpc: '2.0', id: 7, result: {} });
  await new Promise((r) => setTimeout(r, 300));  // past a reconcile interval
  assert.equal((await restGet(server, '/v1/usage', { key })).headers['x-quota-used'], usedBefore, 'refusals not billed');

  await admin(server, ['accounts', 'resume', 'acct-suspended']);
  await eventually(async () => {
    const r = await mcpPost(server, toolCall(8, 'search_stories', { query: story.query }), { key });
    return JSON.parse(r.body).result?.isError === false;
  }, 3000, 'resume seen');
});

// -------------------------------------------------------------------------------- quota exceeded

function checkQuotaNumbers(e, headers, limit) {
  assert.equal(e.quota_limit, limit);
  assert.equal(e.quota_used, limit);
  assert.equal(e.quota_remaining, 0);
  assert.equal(String(e.quota_limit), headers['x-quota-limit'], 'quota_limit == X-Quota-Limit');
  assert.equal(String(e.quota_used), headers['x-quota-used'], 'quota_used == X-Quota-Used');
  assert.equal(String(e.quota_remaining), headers['x-quota-remaining'], 'quota_remaining == X-Quota-Remaining');
  assert.ok(Number.isInteger(e.retry_after_secs) && e.retry_after_secs >= 1, JSON.stringify(e));
  assert.ok(Math.abs(e.retry_after_secs - secsToMonthEnd()) <= 5, `retry_after_secs is the time to the end of the UTC month: ${e.retry_after_secs} vs ${secsToMonthEnd()}`);
  if (headers['retry-after'] !== undefined) assert.equal(headers['retry-after'], String(e.retry_after_secs));
}

test('quota_exceeded (stop plan, quota 3): tool error whose numbers equal the headers; not billed', async () => {
  const key = server.keys.stop3;
  for (let i = 1; i <= 3; i++) successOf(await mcpPost(server, toolCall(i, 'search_stories', { query: story.query }), { key }), i);
  const r = await mcpPost(server, toolCall(4, 'search_stories', { query: story.query }), { key });
  const e = toolErrorOf(r, 4, 'quota_exceeded');
  checkQuotaNumbers(e, r.headers, 3);
  const r2 = await mcpPost(server, toolCall(5, 'get_story', { id: story.id }), { key });
  checkQuotaNumbers(toolErrorOf(r2, 5, 'quota_exceeded'), r2.headers, 3);
  // get_usage is never billed and still answers
  successOf(await mcpPost(server, toolCall(6, 'get_usage'), { key }), 6);
});

test('quota_exceeded on REST: 429 + Retry-After = retry_after_secs, same JSON object', async () => {
  const key = server.keys.stop3rest;
  for (let i = 0; i < 3; i++) assert.equal((await restGet(server, `/v1/stories?q=${story.query}`, { key })).status, 200);
  const r = await restGet(server, `/v1/stories?q=${story.query}`, { key });
  assert.equal(r.status, 429, r.body);
  const e = json(r);
  assert.equal(e.code, 'quota_exceeded');
  assert.equal(r.headers['retry-after'], String(e.retry_after_secs));
  checkQuotaNumbers(e, r.headers, 3);
  assert.equal((await restGet(server, `/v1/stories/${story.id}`, { key })).status, 429);
});

test('bill plan past its quota: success, overage counted', async () => {
  const key = server.keys.bill2;
  for (let i = 1; i <= 4; i++) successOf(await mcpPost(server, toolCall(i, 'search_stories', { query: story.query }), { key }), i);
  assert.equal((await restGet(server, `/v1/stories?q=${story.query}`, { key })).status, 200);
  // 2 within the quota + 3 overage: X-Quota-Used counts all 5, or the usage body counts 3 overage
  let seen = '';
  await eventually(async () => {
    const u = await restGet(server, '/v1/usage', { key });
    seen = `X-Quota-Used ${u.headers['x-quota-used']}, body ${u.body}`;
    if (u.headers['x-quota-used'] === '5') return true;
    const overage = Object.entries(JSON.parse(u.body)).find(([k, v]) => /overage/i.test(k) && typeof v === 'number');
    return overage?.[1] === 3;
  }, 3000, 'the overage is counted').catch((e) => { throw new Error(`${e.message}; ${seen}`); });
});

// --------------------------------------------------------------------------- JSON-RPC / transport

test('success: one text block, isError false, rate and quota headers present', async () => {
  const r = await mcpPost(server, toolCall(1, 'search_stories', { query: story.query }), { key: server.keys.main });
  const text = successOf(r, 1);
  for (const h of RATE_QUOTA_HEADERS) assert.ok(r.headers[h] !== undefined, `${h} on an authenticated response`);
  const rest = await restGet(server, `/v1/stories?q=${story.query}`, { key: server.keys.main });
  assert.equal(text, rest.body);
  for (const h of RATE_QUOTA_HEADERS) assert.ok(rest.headers[h] !== undefined, `${h} on a REST response`);
});

test('unknown method: -32601, HTTP 200, id echoed (2025 revisions)', async () => {
  for (const version of [undefined, '2025-03-26', '2025-06-18', '2025-11-25']) {
    rpcErrorOf(await mcpPost(server, { jsonrpc: '2.0', id: 'u1', method: 'no/such/method' }, { key: server.keys.main, version }),
      200, 'u1', -32601);
  }
});

test('unknown tool: -32602 "Unknown tool: NAME"', async () => {
  const e = rpcErrorOf(await mcpPost(server, toolCall(9, 'nope_tool'), { key: server.keys.main }), 200, 9, -32602);
  assert.match(e.message, /Unknown tool: nope_tool/);
});

test('bad argument: -32602 with data naming the argument; REST 400 invalid_argument', async () => {
  for (const [args, name] of [[{}, 'query'], [{ query: 5 }, 'query'], [{ query: 'x', limit: 51 }, 'limit'],
    [{ query: 'x', offset: 1001 }, 'offset'], [{ query: 'x', sort: 'random' }, 'sort'], [{ query: 'x', zzz: 1 }, 'zzz']]) {
    const e = rpcErrorOf(await mcpPost(server, toolCall(10, 'search_stories', args), { key: server.keys.main }), 200, 10, -32602);
    assert.ok(JSON.stringify(e.data ?? '').includes(name), `data names ${name}: ${JSON.stringify(e)}`);
  }
  const r = await restGet(server, '/v1/stories', { key: server.keys.main });
  assert.equal(r.status, 400, r.body);
  assert.equal(json(r).code, 'invalid_argument', r.body);
});

test('a query of more than 8 quoted phrases: -32602 naming the rule; REST 400 q', async () => {
  const nine = Array.from({ length: 9 }, () => '"the a"').join(' ');
  const e = rpcErrorOf(await mcpPost(server, toolCall(11, 'search_stories', { query: nine }), { key: server.keys.main }), 200, 11, -32602);
  assert.match(JSON.stringify(e.data ?? ''), /query.*at most 8 quoted phrases/, JSON.stringify(e));
  const r = await restGet(server, `/v1/stories?q=${encodeURIComponent(nine)}`, { key: server.keys.main });
  assert.equal(r.status, 400, r.body);
  assert.equal(json(r).code, 'invalid_argument', r.body);
  assert.match(r.body, /at most 8 quoted phrases/);
  const eight = Array.from({ length: 8 }, () => '"the a"').join(' ');
  const ok = await mcpPost(server, toolCall(12, 'search_stories', { query: eight }), { key: server.keys.main });
  assert.equal(JSON.parse(ok.body).result?.isError, false, ok.body);
});

test('malformed JSON: -32700, HTTP 400, id null', async () => {
  for (const body of ['{"jsonrpc":"2.0","id":1,"method":', 'not json at all', '{"a":1,}']) {
    rpcErrorOf(await mcpPost(server, body, { key: server.keys.main }), 400, null, -32700);
  }
});

test('nesting too deep: -32700, HTTP 400, and the server stays up (a 400 KB body of 200,000 levels killed it)', async () => {
  const levels = 200000;
  const body = `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":${'['.repeat(levels)}${']'.repeat(levels)}}}`;
  rpcErrorOf(await mcpPost(server, body, { key: server.keys.main }), 400, null, -32700);
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 2, method: 'ping' }, { key: server.keys.main });
  assert.equal(r.status, 200, r.body);
});

test('not a JSON-RPC request: -32600, HTTP 400', async () => {
  for (const body of ['42', '"hello"', '{"id":1,"method":"ping"}', '{"jsonrpc":"2.0","id":1}', '{"jsonrpc":"1.0","id":1,"method":"ping"}']) {
    const r = await mcpPost(server, body, { key: server.keys.main });
    assert.equal(r.status, 400, `${body}: ${r.status} ${r.body}`);
    assert.equal(json(r).error?.code, -32600, `${body}: ${r.body}`);
  }
});

test('GET and DELETE /mcp: 405 with Allow: POST', async () => {
  for (const method of ['GET', 'DELETE']) {
    const r = await request(server.mcpUrl, { method, headers: { Authorization: `Bearer ${server.keys.main}`, Accept: 'text/event-stream' } });
    assert.equal(r.status, 405, `${method}: ${r.status} ${r.body}`);
    assert.equal(r.headers.allow, 'POST');
  }
});

test('bad Origin: 403; loopback origins allowed', async () => {
  const bad = await mcpPost(server, init(), { key: server.keys.main, extra: { Origin: 'http://evil.example.com' } });
  assert.equal(bad.status, 403, bad.body);
  for (const o of ['http://localhost', `http://127.0.0.1:${server.port}`, 'http://localhost:6274']) {
    const ok = await mcpPost(server, init(), { key: server.keys.main, extra: { Origin: o } });
    assert.equal(ok.status, 200, `${o}: ${ok.body}`);
  }
});

test('notifications and responses: 202, no body', async () => {
  for (const msg of [{ jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 3 } },
    { jsonrpc: '2.0', id: 77, result: {} }]) {
    const r = await mcpPost(server, msg, { key: server.keys.main, version: '2025-06-18' });
    assert.equal(r.status, 202, `${JSON.stringify(msg)}: ${r.status} ${r.body}`);
    assert.equal(r.body, '');
  }
});

test('unsupported MCP-Protocol-Version: 400', async () => {
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { key: server.keys.main, version: '1999-01-01' });
  assert.equal(r.status, 400, r.body);
});

test('initialize negotiates each supported revision', async () => {
  for (const v of ['2025-03-26', '2025-06-18', '2025-11-25']) {
    const r = await mcpPost(server, init(1, v), { key: server.keys.main });
    assert.equal(r.status, 200, r.body);
    assert.equal(JSON.parse(r.body).result.protocolVersion, v, r.body);
  }
});

test('2025-03-26 batch: array in, array out; only notifications -> 202', async () => {
  const key = server.keys.main;
  const r = await mcpPost(server, [{ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 2, method: 'tools/list' }], { key, version: '2025-03-26' });
  assert.equal(r.status, 200, r.body);
  const arr = JSON.parse(r.body);
  assert.ok(Array.isArray(arr), r.body);
  assert.deepEqual(arr.map((m) => m.id).sort(), [1, 2]);
  const n = await mcpPost(server, [{ jsonrpc: '2.0', method: 'notifications/initialized' }], { key, version: '2025-03-26' });
  assert.equal(n.status, 202, n.body);
  assert.equal(n.body, '');
});

test('Accept: JSON alone or no Accept is served; 406 only when Accept excludes JSON; Content-Type not JSON: 415', async () => {
  const key = server.keys.main;
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
  const post = (headers) => request(server.mcpUrl, { method: 'POST', body,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', ...headers } });
  const jsonOnly = await post({ Accept: 'application/json' });
  assert.equal(jsonOnly.status, 200, jsonOnly.body);
  assert.deepEqual(JSON.parse(jsonOnly.body), { jsonrpc: '2.0', id: 1, result: {} });
  // node's http client sends no Accept unless told: a client that names none is served.
  const none = await post({});
  assert.equal(none.status, 200, none.body);
  const sseOnly = await post({ Accept: 'text/event-stream' });
  assert.equal(sseOnly.status, 406, sseOnly.body);
  assert.match(JSON.parse(sseOnly.body).error.message, /application\/json only/);
  assert.equal((await post({ Accept: 'application/json;q=0, text/event-stream' })).status, 406);
  const c = await request(server.mcpUrl, { method: 'POST', body,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'text/plain', Accept: 'application/json, text/event-stream' } });
  assert.equal(c.status, 415, c.body);
});

test('a body over server.max_body_bytes on /mcp: 413 whose body is a JSON-RPC error (id null)', async () => {
  // The engine refuses it from the head (Content-Length) without reading the body; on /mcp the
  // answer is the endpoint's JSON-RPC error, as the other transport errors, not plain text.
  const raw = await new Promise((resolve, reject) => {
    const sock = net.connect(server.port, '127.0.0.1');
    let got = '';
    sock.setEncoding('utf8');
    sock.on('data', (d) => { got += d; });
    sock.on('error', reject);
    sock.on('close', () => resolve(got));
    sock.setTimeout(10000, () => { sock.destroy(); reject(new Error(`no answer: ${got}`)); });
    sock.write('POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n' +
      `Authorization: Bearer ${server.keys.main}\r\nContent-Type: application/json\r\n` +
      'Accept: application/json, text/event-stream\r\nContent-Length: 2097152\r\n\r\n{"jsonrpc":"2.0"');
  });
  const [head, body] = [raw.slice(0, raw.indexOf('\r\n\r\n')), raw.slice(raw.indexOf('\r\n\r\n') + 4)];
  assert.match(head, /^HTTP\/1\.1 413 /, raw);
  assert.match(head, /\r\ncontent-type: application\/json/i, raw);
  assert.match(head, /\r\nconnection: close/i, raw);
  const j = JSON.parse(body);
  assert.equal(j.jsonrpc, '2.0');
  assert.equal(j.id, null);
  assert.equal(j.error.code, -32600);
  assert.match(j.error.message, /Content Too Large/);
  assert.match(j.error.message, /max_body_bytes/);
});

test('REST: story not found is 404 not_found; unknown route 404', async () => {
  const r = await restGet(server, '/v1/stories/no-such-story-4242424242', { key: server.keys.main });
  assert.equal(r.status, 404, r.body);
  assert.equal(json(r).code, 'not_found');
  const mcp = await mcpPost(server, toolCall(3, 'get_story', { id: 'no-such-story-4242424242' }), { key: server.keys.main });
  assert.deepEqual(toolErrorOf(mcp, 3, 'not_found'), json(r), 'same JSON object on both surfaces');
  assert.equal((await restGet(server, '/v1/no-such-route', { key: server.keys.main })).status, 404);
});

test('health needs no key', async () => {
  assert.equal((await request(`${server.url}/healthz`)).status, 200);
});

test('search arguments mean the same on both surfaces: tool text == REST body', async () => {
  const key = server.keys.main;
  const q = story.query;
  for (const [args, qs] of [
    [{ query: q, limit: 3, offset: 2 }, `q=${q}&limit=3&offset=2`],
    [{ query: q, sort: 'date' }, `q=${q}&sort=date`],
    [{ query: q, sort: 'relevance', limit: 50 }, `q=${q}&sort=relevance&limit=50`],
    [{ query: q, since: '0', until: '4102444800' }, `q=${q}&since=0&until=4102444800`],
    [{ query: q, since: '2000-01-01T00:00:00Z' }, `q=${q}&since=${encodeURIComponent('2000-01-01T00:00:00Z')}`],
    [{ query: 'no-such-word-qqqzzzxxx' }, 'q=no-such-word-qqqzzzxxx'],
  ]) {
    const text = successOf(await mcpPost(server, toolCall(1, 'search_stories', args), { key }), 1);
    const rest = await restGet(server, `/v1/stories?${qs}`, { key });
    assert.equal(rest.status, 200, `${qs}: ${rest.body}`);
    assert.equal(text, rest.body, `${JSON.stringify(args)} vs ?${qs}`);
  }
  const page = JSON.parse((await restGet(server, `/v1/stories?q=${q}&limit=3`, { key })).body);
  assert.ok(page.stories.length <= 3);
  const none = JSON.parse((await restGet(server, '/v1/stories?q=no-such-word-qqqzzzxxx', { key })).body);
  assert.equal(none.total, 0, 'no matches is a success with total 0');
  assert.deepEqual(none.stories, []);
});

test('REST bad arguments: 400 invalid_argument naming the argument', async () => {
  for (const [qs, name] of [['q=x&limit=0', 'limit'], ['q=x&limit=51', 'limit'], ['q=x&offset=1001', 'offset'],
    ['q=x&sort=random', 'sort'], ['q=x&bogus=1', 'bogus']]) {
    const r = await restGet(server, `/v1/stories?${qs}`, { key: server.keys.main });
    assert.equal(r.status, 400, `${qs}: ${r.body}`);
    const j = json(r);
    assert.equal(j.code, 'invalid_argument', r.body);
    assert.ok(r.body.includes(name), `${qs}: names ${name}: ${r.body}`);
  }
});
