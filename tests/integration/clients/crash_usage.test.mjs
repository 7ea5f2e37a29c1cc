// Verifies no answered billed request is lost to a crash: drive billed calls over HTTP, kill -9
// the server mid-load, restart it on the same data dir, and read the key's usage: it is at least
// the successes the client saw, and exceeds them by no more than the requests in flight at the kill.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { start, cleanup, mcpPost, toolCall, findStory, loadAgent, usageOf, eventually, DEFAULT_PLANS } from './harness.mjs';

const CONNECTIONS = 32;
const LOAD_MS = 1500;

let first;
let second;
let agent;

after(async () => {
  agent?.destroy();
  await first?.kill9();
  await second?.stop();
  cleanup(second ?? first);
});

test('kill -9 under load: persisted usage >= successes seen, <= successes + in flight', async () => {
  first = await start({
    plans: { ...DEFAULT_PLANS, crash: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 100000000, overage: 'stop' } },
    keys: { main: { account: 'acct-main', plan: 'big' }, crash: { account: 'acct-crash', plan: 'crash' } },
    quota: { reconcile_ms: 100, fsync_ms: 1000 },
  });
  const { query, id: storyId } = await findStory(first, first.keys.main);
  const key = first.keys.crash;
  agent = loadAgent(CONNECTIONS);

  let successes = 0;
  let inFlight = 0;
  let inFlightAtKill = -1;
  let killed = false;
  const unexpected = [];
  let n = 0;
  async function worker() {
    while (!killed) {
      inFlight++;
      n++;
      const msg = n % 2 ? toolCall(n, 'search_stories', { query, limit: 2 }) : toolCall(n, 'get_story', { id: storyId });
      try {
        const r = await mcpPost(first, msg, { key, agent, timeoutMs: 5000 });
        const j = JSON.parse(r.body);
        if (r.status === 200 && j.result?.isError === false) successes++;
        else unexpected.push(`${r.status} ${r.body}`);
      } catch {
        // the connection died with the server: this request was in flight
      } finally {
        inFlight--;
      }
    }
  }
  const workers = Array.from({ length: CONNECTIONS }, worker);
  await new Promise((r) => setTimeout(r, LOAD_MS));
  inFlightAtKill = inFlight;
  killed = true;
  const k = await first.kill9();
  assert.equal(k.signal, 'SIGKILL');
  await Promise.all(workers);
  assert.deepEqual(unexpected.slice(0, 3), [], 'only successes before the kill');
  assert.ok(successes > 0, 'load reached the server before the kill');

  second = await start({ prepared: first.prepared });
  // the restarted server loads snapshot + journals before answering; allow one reconcile interval
  let used = -1;
  await eventually(async () => { used = (await usageOf(second, key)).used; return used >= successes; }, 2000,
    'persisted usage reaches the successes seen').catch(() => {});
  assert.ok(Number.isInteger(used), `X-Quota-Used is a number: ${used}`);
  assert.ok(used >= successes, `persisted ${used} >= successes seen ${successes} (lost answered requests)`);
  assert.ok(used - successes <= inFlightAtKill,
    `persisted ${used} - successes ${successes} <= in flight at the kill ${inFlightAtKill}`);

  // the restarted server keeps counting from there
  const r = await mcpPost(second, toolCall('after', 'get_story', { id: storyId }), { key });
  assert.equal(JSON.parse(r.body).result?.isError, false, r.body);
  await eventually(async () => (await usageOf(second, key)).used === used + 1, 3000, 'usage continues after restart');
});
