// The admin API on the admin listener (README "Accounts, keys and billing", issue #34 part 1):
// the admin token (none configured: 403 saying why; wrong or missing: 401), accounts and keys
// created, suspended, resumed, rotated, revoked and moved between plans, each in force on the
// next request on any core, Idempotency-Key replays that survive a restart, an audit log that
// never holds a key, JSON errors, and every answer checked against GET /admin/openapi.json (the
// document itself checked as OpenAPI 3.1 by @seriousme/openapi-schema-validator, the answers
// by Ajv's JSON Schema 2020-12 validator, which OpenAPI 3.1 schemas are).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { Validator } from '@seriousme/openapi-schema-validator';
import {
  start, restart, cleanup, request, restGet, mcpPost, toolCall, parseToolText, eventually, findStory,
} from './harness.mjs';

const TOKEN = 'adm-test-token-7f3c9a';
process.env.TOLLGATE_ADMIN_TOKEN = TOKEN;

const PLANS = {
  free: { rate_per_sec: 100000, burst: 100000, monthly_quota: 1000, overage: 'stop' },
  big: { rate_per_sec: 100000, burst: 100000, monthly_quota: 5000, overage: 'bill' },
};

const servers = [];
after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
});

function adminPortOf(s) {
  const port = Number(/admin \(.*\) on http:\/\/127\.0\.0\.1:(\d+)/.exec(s.stderr())?.[1]);
  assert.ok(port > 0, `admin port in stderr: ${s.stderr()}`);
  return port;
}

/** An OpenAPI-checked client of one server's admin listener. */
class AdminClient {
  constructor(port, doc) {
    this.base = `http://127.0.0.1:${port}`;
    this.doc = doc;
    this.ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(this.ajv);
    this.ajv.addSchema({ $id: 'https://tollgate.invalid/admin', components: doc.components });
    this.checked = 0;
  }

  // The document's path template that `p` (no query) matches.
  template(p) {
    for (const t of Object.keys(this.doc.paths)) {
      const re = new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`);
      if (re.test(p)) return t;
    }
    return null;
  }

  async call(method, p, { body, token = TOKEN, headers = {} } = {}) {
    const h = { ...headers };
    if (token !== null) h.Authorization = `Bearer ${token}`;
    let payload;
    if (body !== undefined) {
      payload = typeof body === 'string' ? body : JSON.stringify(body);
      h['Content-Type'] = 'application/json';
    }
    const r = await request(this.base + p, { method, headers: h, body: payload });
    this.check(method, p.split('?')[0], r);
    let json;
    try { json = JSON.parse(r.body); } catch { /* csv */ }
    return { ...r, json };
  }

  // Every answer of a documented route must be documented (status) and match its schema.
  check(method, p, r) {
    const t = this.template(p);
    if (t === null) return;  // an undocumented path: its 404 is the shared no-such-route body
    const op = this.doc.paths[t][method.toLowerCase()];
    if (!op) return;  // a method the route does not take: 405 (checked by the tests directly)
    const resp = op.responses[String(r.status)];
    assert.ok(resp, `${method} ${p} answered ${r.status}, which ${t} does not document: ${r.body}`);
    const ctype = (r.headers['content-type'] ?? '').split(';')[0].trim();
    const media = resp.content?.[ctype];
    assert.ok(media, `${method} ${p} ${r.status}: content type ${ctype} not documented`);
    if (ctype !== 'application/json') return;
    const schema = JSON.parse(JSON.stringify(media.schema)
      .replaceAll('"#/components/', '"https://tollgate.invalid/admin#/components/'));
    const validate = this.ajv.compile(schema);
    const ok = validate(JSON.parse(r.body));
    assert.ok(ok, `${method} ${p} ${r.status} does not match the OpenAPI schema: ` +
      `${JSON.stringify(validate.errors)}\n${r.body}`);
    this.checked += 1;
  }
}

async function openapiClient(port) {
  const r = await request(`http://127.0.0.1:${port}/admin/openapi.json`);
  assert.equal(r.status, 200, r.body);
  const doc = JSON.parse(r.body);
  const v = new Validator();
  const res = await v.validate(doc);
  assert.ok(res.valid, `not a valid OpenAPI document: ${JSON.stringify(res.errors)}`);
  assert.equal(v.version, '3.1');
  return new AdminClient(port, doc);
}

// A REST search with `key` on a fresh connection each time (the two cores take turns).
async function searchStatus(s, key) {
  const r = await restGet(s, '/v1/stories?q=the', { key });
  return r;
}

test('admin API: token, accounts, keys, plans, rotation, idempotency, audit, OpenAPI', async () => {
  const s = await start({ plans: PLANS, threads: 2, extraArgs: ['--admin-listen', '127.0.0.1:0'],
    extraConfig: '[admin]\ntoken_env = "TOLLGATE_ADMIN_TOKEN"\ntoken_name = "portal"\n' });
  servers.push(s);
  const port = adminPortOf(s);
  const a = await openapiClient(port);

  // Not on the public listener, ever.
  assert.equal((await request(`${s.url}/admin/keys`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status, 404);
  // Missing and wrong tokens: 401 with a JSON error.
  let r = await a.call('POST', '/admin/accounts', { body: { id: 'acme' }, token: null });
  assert.equal(r.status, 401);
  assert.match(r.headers['www-authenticate'], /^Bearer/);
  r = await a.call('GET', '/admin/keys', { token: 'not-the-token' });
  assert.equal(r.status, 401);
  assert.equal(r.json.code, 'unauthorized');

  // Accounts: created once; bad input is a 400 naming the problem.
  r = await a.call('POST', '/admin/accounts', { body: { id: 'acme', stripe_customer: 'cus_123' }, headers: { 'Idempotency-Key': 'acct-1' } });
  assert.equal(r.status, 201, r.body);
  assert.deepEqual(r.json, { id: 'acme', status: 'active', stripe_customer: 'cus_123', keys: [] });
  const again = await a.call('POST', '/admin/accounts', { body: { id: 'acme', stripe_customer: 'cus_123' }, headers: { 'Idempotency-Key': 'acct-1' } });
  assert.equal(again.status, 201);
  assert.equal(again.body, r.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  r = await a.call('POST', '/admin/accounts', { body: { id: 'other' }, headers: { 'Idempotency-Key': 'acct-1' } });
  assert.equal(r.status, 422);
  assert.equal(r.json.code, 'idempotency_key_reused');
  r = await a.call('POST', '/admin/accounts', { body: { id: 'acme' } });
  assert.equal(r.status, 409);
  for (const [body, re] of [['{"id":', /not valid JSON/], ['[1]', /JSON object/], [{ id: 'a b' }, /invalid account name/],
    [{ id: 'x', color: 'red' }, /Unknown member "color"/], [{ id: 7 }, /must be a string/], [{}, /needs "id"/]]) {
    r = await a.call('POST', '/admin/accounts', { body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.body}`);
    assert.match(r.json.message, re);
  }
  r = await a.call('POST', '/admin/accounts', { body: { id: 'acme2', stripe_customer: 'cus_123' } });
  assert.equal(r.status, 409, 'a customer belongs to one account');

  // Keys: created for a known account on a known plan, shown once; a retry makes no second key.
  r = await a.call('POST', '/admin/keys', { body: { account: 'nobody', plan: 'free' } });
  assert.equal(r.status, 404);
  r = await a.call('POST', '/admin/keys', { body: { account: 'acme', plan: 'gold' } });
  assert.equal(r.status, 400);
  assert.match(r.json.message, /unknown plan "gold"/);
  const created = await a.call('POST', '/admin/keys', { body: { account: 'acme', plan: 'free' }, headers: { 'Idempotency-Key': 'key-1' } });
  assert.equal(created.status, 201, created.body);
  const key = created.json.key;
  const keyId = created.json.id;
  assert.match(key, /^tg_live_[0-9a-f]{40}$/);
  const retry = await a.call('POST', '/admin/keys', { body: { account: 'acme', plan: 'free' }, headers: { 'Idempotency-Key': 'key-1' } });
  assert.equal(retry.status, 201);
  assert.equal(retry.json.key, key);
  r = await a.call('GET', '/admin/keys?account=acme');
  assert.equal(r.status, 200);
  assert.equal(r.json.keys.length, 1, 'the retry made no second key');
  assert.equal(r.json.keys[0].id, keyId);
  assert.equal(JSON.stringify(r.json).includes('tg_live_'), false, 'a listing never shows a key');
  assert.equal((await a.call('GET', '/admin/keys?account=nope')).status, 404);

  // The new key works at once, on every core.
  for (let i = 0; i < 4; i++) assert.equal((await searchStatus(s, key)).status, 200);

  // Suspend: the next request on any core is refused as suspended (REST 403, MCP tool error).
  r = await a.call('POST', '/admin/accounts/acme/suspend');
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.status, 'suspended');
  for (let i = 0; i < 4; i++) {
    const q = await searchStatus(s, key);
    assert.equal(q.status, 403, q.body);
    assert.equal(JSON.parse(q.body).code, 'suspended');
  }
  const { query } = { query: 'the' };
  const m = await mcpPost(s, toolCall(1, 'search_stories', { query }), { key });
  assert.equal(m.status, 200);
  const res = JSON.parse(m.body).result;
  assert.equal(res.isError, true);
  assert.equal(parseToolText(res).code, 'suspended');
  r = await a.call('POST', '/admin/accounts/acme/resume', { headers: { 'Idempotency-Key': 'resume-1' } });
  assert.equal(r.status, 200);
  for (let i = 0; i < 4; i++) assert.equal((await searchStatus(s, key)).status, 200);
  r = await a.call('GET', '/admin/accounts/acme');
  assert.equal(r.status, 200);
  assert.equal(r.json.keys.length, 1);
  assert.equal((await a.call('GET', '/admin/accounts/ghost')).status, 404);
  assert.equal((await a.call('POST', '/admin/accounts/ghost/suspend')).status, 404);

  // Plan change: effective on the next request (the quota headers show the new plan's figure).
  r = await a.call('PATCH', `/admin/keys/${keyId}`, { body: { plan: 'big' } });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.plan, 'big');
  assert.equal((await restGet(s, '/v1/usage', { key })).headers['x-quota-limit'], '5000');
  assert.equal((await a.call('PATCH', `/admin/keys/${keyId}`, { body: { plan: 'nope' } })).status, 400);
  assert.equal((await a.call('PATCH', '/admin/keys/key_0000000000000000', { body: { plan: 'big' } })).status, 404);
  assert.equal((await a.call('PATCH', '/admin/keys/banana', { body: { plan: 'big' } })).status, 400);

  // Usage: per key, used and limit; bad month is a 400.
  await eventually(async () => {
    const u = await a.call('GET', '/admin/usage?account=acme');
    return u.status === 200 && u.json.keys[0].used === 8 && u.json.keys[0].limit === 5000;
  }, 3000, 'usage shows the 8 billed searches');
  assert.equal((await a.call('GET', '/admin/usage?account=acme&month=2026-13')).status, 400);
  assert.equal((await a.call('GET', '/admin/usage')).status, 400);
  assert.equal((await a.call('GET', '/admin/usage?account=ghost')).status, 404);

  // Rotation: the new key works at once, the old one until its grace period ends.
  r = await a.call('POST', `/admin/keys/${keyId}/rotate`, { body: { grace_secs: 2 } });
  assert.equal(r.status, 201, r.body);
  const key2 = r.json.key;
  const keyId2 = r.json.id;
  assert.equal(r.json.replaces, keyId);
  assert.equal((await searchStatus(s, key2)).status, 200);
  assert.equal((await searchStatus(s, key)).status, 200, 'the old key works during the grace period');
  await eventually(async () => (await searchStatus(s, key)).status === 401, 5000, 'the old key refused after its grace');
  r = await a.call('GET', '/admin/keys?account=acme');
  assert.deepEqual(r.json.keys.map((k) => [k.id, k.status, k.plan]), [[keyId, 'expired', 'big'], [keyId2, 'active', 'big']]);
  assert.equal((await a.call('POST', `/admin/keys/${keyId}/rotate`)).status, 400, 'an expired key is not rotated');
  assert.equal((await a.call('POST', `/admin/keys/${keyId2}/rotate`, { body: { grace_secs: -1 } })).status, 400);

  // Revocation: refused on the next request.
  r = await a.call('POST', `/admin/keys/${keyId2}/revoke`, { headers: { 'Idempotency-Key': 'rev-1' } });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.status, 'revoked');
  for (let i = 0; i < 4; i++) assert.equal((await searchStatus(s, key2)).status, 401);

  // Routes and methods that do not exist.
  assert.equal((await a.call('GET', '/admin/nothing')).status, 404);
  assert.equal((await a.call('DELETE', '/admin/keys')).status, 405);
  assert.equal((await a.call('GET', '/admin/accounts')).status, 405);
  assert.equal((await a.call('POST', '/admin/keys', { body: '{}', headers: { 'Idempotency-Key': ' ' } })).status, 400);

  // The audit log names the token, never holds a key; the idempotency file holds no key either.
  const audit = fs.readFileSync(path.join(s.dataDir, 'admin-audit.log'), 'utf8');
  const lines = audit.trim().split('\n').map((l) => JSON.parse(l));
  assert.ok(lines.some((l) => l.action === 'keys.create' && l.target === keyId && l.who === 'portal' && l.status === 201));
  assert.ok(lines.some((l) => l.action === 'accounts.suspend' && l.target === 'acme'));
  assert.ok(lines.some((l) => l.action === 'keys.rotate'));
  assert.ok(lines.every((l) => typeof l.time === 'string' && l.who === 'portal'));
  assert.equal(audit.includes('tg_live_'), false);
  assert.equal(audit.includes(key.slice(8)), false);
  const idem = fs.readFileSync(path.join(s.dataDir, 'admin-idempotency.txt'), 'utf8');
  assert.equal(idem.includes('tg_live_'), false);
  assert.equal(idem.includes(key.slice(8)), false);

  // Idempotency survives a restart: the retry gets the first answer, and no key is made.
  await s.stop();
  const s2 = await restart(s);
  servers.push(s2);
  const a2 = await openapiClient(adminPortOf(s2));
  r = await a2.call('POST', '/admin/keys', { body: { account: 'acme', plan: 'free' }, headers: { 'Idempotency-Key': 'key-1' } });
  assert.equal(r.status, 201);
  assert.equal(r.json.key, key);
  assert.equal(r.headers['idempotent-replayed'], 'true');
  assert.equal((await a2.call('GET', '/admin/keys?account=acme')).json.keys.length, 2);
  assert.ok(a.checked + a2.checked >= 35, `answers checked against the OpenAPI document: ${a.checked + a2.checked}`);
});

test('admin API with no token configured: 403 saying why; the public routes are unchanged', async () => {
  const s = await start({ plans: PLANS, keys: { k: { account: 'plain', plan: 'free' } }, threads: 1,
    extraArgs: ['--admin-listen', '127.0.0.1:0'] });
  servers.push(s);
  const port = adminPortOf(s);
  const r = await request(`http://127.0.0.1:${port}/admin/keys`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(r.status, 403);
  const j = JSON.parse(r.body);
  assert.equal(j.code, 'admin_disabled');
  assert.match(j.message, /no admin token is configured/);
  assert.equal((await request(`http://127.0.0.1:${port}/admin/reload`, { method: 'POST' })).status, 200);
  assert.equal((await request(`http://127.0.0.1:${port}/admin/webhooks/stripe`, { method: 'POST', body: '{}' })).status, 403);
  assert.equal((await findStory(s, s.keys.k)).body.length > 0, true);
});
