// Suspension that follows the bill (issue #34 part 2): POST /admin/webhooks/stripe, signed by
// the official `stripe` package's test-header helper (a real client of the Stripe-Signature
// format, not our own signer), with real event shapes. A past_due subscription or a failed
// invoice suspends the customer's account (the next tools/call answers the seed's `suspended`
// tool error); a paid invoice resumes it. A bad signature, an old timestamp, a replayed event id,
// an unknown customer or a malformed body: each a clear 4xx and nothing changed. Unknown event
// types are acknowledged (200) and counted. [stripe] public_webhook serves the route on the
// public listener too (and only that admin route).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Stripe from 'stripe';
import { start, cleanup, request, mcpPost, toolCall, parseToolText } from './harness.mjs';

const TOKEN = 'adm-webhook-token-1';
const SECRET = 'whsec_test_5b1d0c6f3e2a41b8a9d7';
process.env.TOLLGATE_ADMIN_TOKEN = TOKEN;
process.env.STRIPE_WEBHOOK_SECRET = SECRET;
const stripe = new Stripe('sk_test_not_used_offline');

const PLANS = { free: { rate_per_sec: 100000, burst: 100000, monthly_quota: 1000, overage: 'stop' } };

const servers = [];
after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
});

let seq = 0;
function subscriptionEvent(type, customer, status) {
  seq += 1;
  return {
    id: `evt_test_${Date.now()}_${seq}`,
    object: 'event',
    api_version: '2024-06-20',
    created: Math.floor(Date.now() / 1000),
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
    data: {
      object: {
        id: `sub_test_${seq}`,
        object: 'subscription',
        customer,
        status,
        cancel_at_period_end: false,
        current_period_end: Math.floor(Date.now() / 1000) + 86400,
        items: { object: 'list', data: [], has_more: false, url: '/v1/subscription_items' },
      },
      previous_attributes: { status: 'active' },
    },
  };
}

function invoiceEvent(type, customer) {
  seq += 1;
  return {
    id: `evt_test_${Date.now()}_${seq}`,
    object: 'event',
    api_version: '2024-06-20',
    created: Math.floor(Date.now() / 1000),
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
    data: {
      object: {
        id: `in_test_${seq}`,
        object: 'invoice',
        customer,
        subscription: 'sub_test_1',
        status: type === 'invoice.paid' ? 'paid' : 'open',
        amount_due: 2000,
        amount_paid: type === 'invoice.paid' ? 2000 : 0,
        attempt_count: 1,
        currency: 'usd',
      },
    },
  };
}

function send(base, payload, { secret = SECRET, timestamp, header } = {}) {
  const body = typeof payload === 'string' ? payload : JSON.stringify(payload);
  const sig = header ?? stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp });
  return request(`${base}/admin/webhooks/stripe`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'Stripe-Signature': sig }, body,
  });
}

async function adminCall(port, method, p, body) {
  const r = await request(`http://127.0.0.1:${port}${p}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { ...r, json: JSON.parse(r.body) };
}

async function statusOf(port) {
  return (await adminCall(port, 'GET', '/admin/accounts/acme')).json.status;
}

async function callTool(s, key) {
  const r = await mcpPost(s, toolCall(1, 'search_stories', { query: 'the' }), { key });
  assert.equal(r.status, 200, r.body);
  return JSON.parse(r.body).result;
}

test('stripe webhook: signed events suspend and resume; bad ones change nothing', async () => {
  const s = await start({
    plans: PLANS, threads: 2, extraArgs: ['--admin-listen', '127.0.0.1:0'],
    extraConfig: '[admin]\ntoken_env = "TOLLGATE_ADMIN_TOKEN"\n\n[stripe]\n' +
      'webhook_secret_env = "STRIPE_WEBHOOK_SECRET"\npublic_webhook = true\n',
  });
  servers.push(s);
  const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(s.stderr())?.[1]);
  const adminBase = `http://127.0.0.1:${port}`;
  assert.equal((await adminCall(port, 'POST', '/admin/accounts', { id: 'acme', stripe_customer: 'cus_acme1' })).status, 201);
  const made = await adminCall(port, 'POST', '/admin/keys', { account: 'acme', plan: 'free' });
  assert.equal(made.status, 201);
  const key = made.json.key;
  assert.equal((await callTool(s, key)).isError, false);

  const expectNothingChanged = async (r, status, code) => {
    assert.equal(r.status, status, r.body);
    assert.equal(JSON.parse(r.body).code, code);
    assert.equal(await statusOf(port), 'active');
    assert.equal((await callTool(s, key)).isError, false);
  };
  const pastDue = subscriptionEvent('customer.subscription.updated', 'cus_acme1', 'past_due');
  // Signed with another secret.
  await expectNothingChanged(await send(adminBase, pastDue, { secret: 'whsec_wrong' }), 400, 'bad_signature');
  // A body changed after signing.
  const sig = stripe.webhooks.generateTestHeaderString({ payload: JSON.stringify(pastDue), secret: SECRET });
  await expectNothingChanged(await send(adminBase, { ...pastDue, type: 'invoice.payment_failed' }, { header: sig }), 400, 'bad_signature');
  // An old timestamp (a replay outside the 300 s window), correctly signed.
  await expectNothingChanged(await send(adminBase, pastDue, { timestamp: Math.floor(Date.now() / 1000) - 3600 }), 400,
    'timestamp_outside_tolerance');
  // No header, and a header without v1.
  await expectNothingChanged(await request(`${adminBase}/admin/webhooks/stripe`, { method: 'POST', body: JSON.stringify(pastDue) }),
    400, 'missing_signature');
  await expectNothingChanged(await send(adminBase, pastDue, { header: 't=123' }), 400, 'bad_signature_header');
  // Malformed bodies, correctly signed.
  await expectNothingChanged(await send(adminBase, '{"id":'), 400, 'malformed_event');
  await expectNothingChanged(await send(adminBase, '{"type":"invoice.paid"}'), 400, 'malformed_event');
  await expectNothingChanged(await send(adminBase, { id: 'evt_nocust', type: 'invoice.payment_failed', data: { object: {} } }), 400,
    'malformed_event');
  // An unknown customer.
  await expectNothingChanged(await send(adminBase, subscriptionEvent('customer.subscription.deleted', 'cus_nobody', 'canceled')),
    422, 'unknown_customer');

  // Several v1 signatures (Stripe sends one per active secret during a roll): any one may match.
  const body = JSON.stringify(pastDue);
  const good = stripe.webhooks.generateTestHeaderString({ payload: body, secret: SECRET });
  const t = /t=(\d+)/.exec(good)[1];
  const v1 = /v1=([0-9a-f]+)/.exec(good)[1];
  const multi = `t=${t},v1=${'0'.repeat(64)},v1=${v1},v0=${'1'.repeat(64)}`;
  let r = await send(adminBase, body, { header: multi });
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(JSON.parse(r.body), { received: true, event: pastDue.id, action: 'suspended', account: 'acme' });
  assert.equal(await statusOf(port), 'suspended');
  // The next tool call answers the seed's `suspended` tool error.
  let res = await callTool(s, key);
  assert.equal(res.isError, true);
  const err = parseToolText(res);
  assert.equal(err.code, 'suspended');
  assert.equal(typeof err.message, 'string');

  // The same event again (a replay inside the window): refused, nothing changed.
  r = await send(adminBase, body, { header: multi });
  assert.equal(r.status, 409, r.body);
  assert.equal(JSON.parse(r.body).code, 'duplicate_event');

  // invoice.paid resumes: the next call succeeds. Served on the public listener too.
  r = await send(s.url, invoiceEvent('invoice.paid', 'cus_acme1'));
  assert.equal(r.status, 200, r.body);
  assert.equal(JSON.parse(r.body).action, 'resumed');
  // Acted on off the public core, and in force on every core before the answer.
  assert.equal((await callTool(s, key)).isError, false);
  // Only the webhook: other admin routes stay off the public listener.
  assert.equal((await request(`${s.url}/admin/accounts/acme`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status, 404);

  // invoice.payment_failed and customer.subscription.deleted suspend; back to active resumes.
  r = await send(adminBase, invoiceEvent('invoice.payment_failed', 'cus_acme1'));
  assert.equal(JSON.parse(r.body).action, 'suspended');
  assert.equal(parseToolText(await callTool(s, key)).code, 'suspended');
  r = await send(adminBase, subscriptionEvent('customer.subscription.updated', 'cus_acme1', 'active'));
  assert.equal(JSON.parse(r.body).action, 'resumed');
  assert.equal((await callTool(s, key)).isError, false);
  r = await send(adminBase, subscriptionEvent('customer.subscription.deleted', 'cus_acme1', 'canceled'));
  assert.equal(JSON.parse(r.body).action, 'suspended');
  assert.equal(parseToolText(await callTool(s, key)).code, 'suspended');
  // A status not in suspend_on (incomplete) changes nothing.
  r = await send(adminBase, subscriptionEvent('customer.subscription.updated', 'cus_acme1', 'incomplete'));
  assert.equal(JSON.parse(r.body).action, 'none');
  assert.equal(await statusOf(port), 'suspended');

  // Unknown event types: acknowledged, counted, never an error.
  r = await send(adminBase, { id: `evt_other_${Date.now()}`, object: 'event', type: 'charge.refunded', data: { object: { id: 'ch_1', object: 'charge' } } });
  assert.equal(r.status, 200, r.body);
  assert.equal(JSON.parse(r.body).action, 'none');
  const metrics = (await request(`${adminBase}/metrics`)).body;
  assert.match(metrics, /tollgate_stripe_events_total\{outcome="ignored"\} 2/);
  assert.match(metrics, /tollgate_stripe_events_total\{outcome="applied"\} 5/);
  assert.match(metrics, /tollgate_stripe_events_total\{outcome="duplicate"\} 1/);

  // Event ids are durable: after a restart the same delivery is still a duplicate.
  const events = fs.readFileSync(path.join(s.dataDir, 'stripe-events.txt'), 'utf8');
  assert.ok(events.includes(pastDue.id));
  const audit = fs.readFileSync(path.join(s.dataDir, 'admin-audit.log'), 'utf8');
  assert.ok(audit.split('\n').filter(Boolean).map((l) => JSON.parse(l)).some((l) => l.who === 'stripe' && l.target === 'acme'));
  await s.stop();
  const { restart } = await import('./harness.mjs');
  const s2 = await restart(s);
  servers.push(s2);
  const port2 = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(s2.stderr())?.[1]);
  r = await send(`http://127.0.0.1:${port2}`, body, { header: `t=${Math.floor(Date.now() / 1000)},v1=${v1}` });
  assert.equal(r.status, 400, 'a fresh timestamp with the old signature does not verify');
  const fresh = stripe.webhooks.generateTestHeaderString({ payload: body, secret: SECRET });
  r = await send(`http://127.0.0.1:${port2}`, body, { header: fresh });
  assert.equal(r.status, 409, r.body);
  res = await callTool(s2, key);
  assert.equal(parseToolText(res).code, 'suspended', 'the suspension outlived the restart');
});

test('stripe webhook with no secret configured: 403 saying so; config check refuses an unset variable', async () => {
  const s = await start({ plans: PLANS, threads: 1, extraArgs: ['--admin-listen', '127.0.0.1:0'] });
  servers.push(s);
  const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(s.stderr())?.[1]);
  const r = await send(`http://127.0.0.1:${port}`, subscriptionEvent('customer.subscription.deleted', 'cus_x', 'canceled'));
  assert.equal(r.status, 403);
  assert.equal(JSON.parse(r.body).code, 'webhook_disabled');
  assert.equal((await request(`${s.url}/admin/webhooks/stripe`, { method: 'POST', body: '{}' })).status, 404);
  const { runCli } = await import('./harness.mjs');
  const cfg = path.join(path.dirname(s.dataDir), `${path.basename(s.dataDir)}-stripe.toml`);
  fs.writeFileSync(cfg, '[stripe]\nwebhook_secret_env = "TOLLGATE_TEST_UNSET_VARIABLE"\n');
  const c = await runCli(['config', 'check', '--config', cfg]);
  fs.rmSync(cfg, { force: true });
  assert.equal(c.code, 2, c.stderr);
  assert.match(c.stderr, /stripe\.webhook_secret_env: the variable TOLLGATE_TEST_UNSET_VARIABLE is not set/);
});
