// Verifies a rate-limited key driven continuously for 10 s over HTTP (several keep-alive
// connections, so several cores) is admitted burst + rate × 10 times, within ±1%, and that every
// refusal is a 429 with Retry-After.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { start, cleanup, mcpPost, loadAgent, DEFAULT_PLANS } from './harness.mjs';

const RATE = 100;
const BURST = 200;  // 2 s of rate: a client stalled by a loaded machine loses no tokens to the cap
const SECONDS = 10;
const CONNECTIONS = 8;

let server;
let agent;

before(async () => {
  server = await start({
    plans: { ...DEFAULT_PLANS, metered: { rate_per_sec: RATE, burst: BURST, monthly_quota: 100000000, overage: 'bill' } },
    keys: { metered: { account: 'acct-metered', plan: 'metered' } },
  });
  agent = loadAgent(CONNECTIONS);
});

after(async () => {
  agent?.destroy();
  await server?.stop();
  cleanup(server);
});

test(`rate ${RATE}/s, burst ${BURST}, driven ${SECONDS} s: admits burst + rate x ${SECONDS} within 1%`, async () => {
  const key = server.keys.metered;
  let admitted = 0;
  let refused = 0;
  const other = [];
  let id = 0;
  const t0 = performance.now();
  const end = t0 + SECONDS * 1000;
  let firstResponse = Infinity;
  let lastSend = t0;
  async function worker() {
    while (performance.now() < end) {
      lastSend = Math.max(lastSend, performance.now());
      // ping: authenticated, so rated, but never billed
      const r = await mcpPost(server, { jsonrpc: '2.0', id: ++id, method: 'ping' }, { key, agent });
      firstResponse = Math.min(firstResponse, performance.now());
      if (r.status === 200) admitted++;
      else if (r.status === 429 && /^[1-9][0-9]*$/.test(r.headers['retry-after'] ?? '')) refused++;
      else other.push(`${r.status} ${JSON.stringify(r.headers)} ${r.body}`);
    }
  }
  await Promise.all(Array.from({ length: CONNECTIONS }, worker));
  const lastResponse = performance.now();
  assert.deepEqual(other.slice(0, 3), [], `${other.length} answers neither 200 nor 429+Retry-After`);
  assert.ok(refused > 0, 'the key was driven past its rate');
  // The server's own window runs from the first request's arrival to the last's; the client only
  // knows each arrival lies between its send and its response. On a healthy server (sub-ms
  // latency) both bounds are burst + rate x 10; under CPU starvation they widen honestly.
  const nominal = BURST + RATE * SECONDS;
  const tolerance = nominal * 0.01;
  const low = BURST + (RATE * (lastSend - firstResponse)) / 1000;
  const high = BURST + (RATE * (lastResponse - t0)) / 1000 + 1;
  const detail = `admitted ${admitted}, nominal ${nominal} ± 1%, window bounds [${low.toFixed(1)}, ${high.toFixed(1)}] ` +
    `(first response after ${(firstResponse - t0).toFixed(1)} ms, last send at ${(lastSend - t0).toFixed(1)} ms, ` +
    `done at ${(lastResponse - t0).toFixed(1)} ms; refused ${refused})`;
  assert.ok(admitted >= low - tolerance && admitted <= high + tolerance, detail);
  assert.ok(admitted >= nominal - tolerance * 3 && admitted <= nominal + tolerance * 3,
    `far from nominal even allowing for latency: ${detail}`);
});
