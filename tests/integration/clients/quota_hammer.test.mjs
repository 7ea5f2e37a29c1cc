// Verifies a stop-at-quota key with quota Q, hammered over HTTP by 256 concurrent keep-alive
// connections across the server's cores, is admitted exactly Q times, and that every later call is
// a quota_exceeded tool error whose figures equal the X-Quota-* headers of the same response.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { start, cleanup, mcpPost, toolCall, findStory, loadAgent, restGet, eventually, DEFAULT_PLANS } from './harness.mjs';

const Q = 3000;
const CONNECTIONS = 256;
const DEADLINE_MS = 20000;

let server;
let agent;

before(async () => {
  server = await start({
    plans: { ...DEFAULT_PLANS, hammer: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: Q, overage: 'stop' } },
    keys: { main: { account: 'acct-main', plan: 'big' }, hammer: { account: 'acct-hammer', plan: 'hammer' } },
  });
  agent = loadAgent(CONNECTIONS);
});

after(async () => {
  agent?.destroy();
  await server?.stop();
  cleanup(server);
});

function checkRefusal(r, label) {
  assert.equal(r.status, 200, `${label}: ${r.status} ${r.body}`);
  const j = JSON.parse(r.body);
  assert.equal(j.result?.isError, true, `${label}: ${r.body}`);
  const e = JSON.parse(j.result.content[0].text);
  assert.equal(e.code, 'quota_exceeded', `${label}: ${r.body}`);
  assert.equal(e.quota_limit, Q, r.body);
  assert.equal(e.quota_used, Q, r.body);
  assert.equal(e.quota_remaining, 0, r.body);
  assert.equal(r.headers['x-quota-limit'], String(e.quota_limit), `X-Quota-Limit == quota_limit: ${JSON.stringify(r.headers)}`);
  assert.equal(r.headers['x-quota-used'], String(e.quota_used), `X-Quota-Used == quota_used: ${JSON.stringify(r.headers)}`);
  assert.equal(r.headers['x-quota-remaining'], String(e.quota_remaining), 'X-Quota-Remaining == quota_remaining');
  if (r.headers['retry-after'] !== undefined) assert.equal(r.headers['retry-after'], String(e.retry_after_secs));
}

test(`stop key, quota ${Q}, ${CONNECTIONS} connections: exactly ${Q} successes, then quota_exceeded`, async () => {
  const { query } = await findStory(server, server.keys.main);
  const key = server.keys.hammer;
  const deadline = Date.now() + DEADLINE_MS;
  let successes = 0;
  let refusals = 0;
  let nextId = 1;
  const failures = [];

  async function worker() {
    while (Date.now() < deadline) {
      const id = nextId++;
      const r = await mcpPost(server, toolCall(id, 'search_stories', { query, limit: 1 }), { key, agent });
      let j;
      try { j = JSON.parse(r.body); } catch { j = null; }
      if (r.status === 200 && j?.result?.isError === false) { successes++; continue; }
      try {
        checkRefusal(r, `request ${id}`);
        refusals++;
      } catch (e) {
        failures.push(e.message);
      }
      return;  // this connection has been refused: done
    }
  }
  await Promise.all(Array.from({ length: CONNECTIONS }, worker));
  assert.deepEqual(failures.slice(0, 5), [], `${failures.length} unexpected answers`);
  assert.ok(Date.now() < deadline, `finished within ${DEADLINE_MS} ms (successes so far ${successes})`);
  assert.equal(successes, Q, `exactly Q admitted (refusals ${refusals})`);
  assert.equal(refusals, CONNECTIONS);

  // every later call is refused too, on every surface
  for (let i = 0; i < 20; i++) checkRefusal(await mcpPost(server, toolCall(`late-${i}`, 'search_stories', { query }), { key, agent }), `late ${i}`);
  const rest = await restGet(server, `/v1/stories?q=${encodeURIComponent(query)}`, { key });
  assert.equal(rest.status, 429, rest.body);
  await eventually(async () => (await restGet(server, '/v1/usage', { key })).headers['x-quota-used'] === String(Q),
    3000, `X-Quota-Used settles at ${Q}`);
});
