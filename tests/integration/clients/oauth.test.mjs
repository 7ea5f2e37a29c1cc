// tollgate as its own OAuth 2.1 authorization server (issue #31; README "Connect claude.ai,
// ChatGPT or any OAuth client"): the official SDK's OAuth client (v1, and the v2 client, which
// also checks the redirect's iss, RFC 9207) registers (RFC 7591), follows
// the 401's resource_metadata, and gets its code from the consent page driven as a browser
// would (GET the page, read the form, POST the key with the CSRF token, read the 302); then
// tools/call on the token, a refresh, and a call on the refreshed token; the same with a client
// ID metadata document URL as client_id (documents served by the test over HTTPS), and
// mcp-remote's own flow. Each security rule is a test of its own, and the seed's error table
// holds through a token as through its key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import * as v2 from '@modelcontextprotocol/client';
import {
  start, restart, cleanup, admin, request, mcpPost, toolCall, parseToolText, eventually, findStory,
  usageOf, runCli, tempDir,
} from './harness.mjs';
import { selfSignedCert, freePort } from './remote_util.mjs';

const PLANS = {
  big: { rate_per_sec: 100000, burst: 100000, monthly_quota: 100000000, overage: 'bill' },
  slow: { rate_per_sec: 0.01, burst: 2, monthly_quota: 100000000, overage: 'bill' },
  capped: { rate_per_sec: 100000, burst: 100000, monthly_quota: 2, overage: 'stop' },
};
const KEYS = {
  main: { account: 'acct-main', plan: 'big' },
  slow: { account: 'acct-slow', plan: 'slow' },
  capped: { account: 'acct-capped', plan: 'capped' },
  susp: { account: 'acct-susp', plan: 'big' },
  victim: { account: 'acct-victim', plan: 'big' },
  other: { account: 'acct-other', plan: 'big' },
};
const REDIRECT = 'http://127.0.0.1:9/callback';  // never fetched: the test reads the 302

let server;   // the main server
let short;    // access tokens live 2 s; also where the brute-force limit is spent
let story;
const servers = [];

before(async () => {
  server = await start({ keys: KEYS, plans: PLANS, extraArgs: ['--oauth'] });
  servers.push(server);
  short = await start({
    keys: { main: { account: 'acct-main', plan: 'big' } }, plans: PLANS,
    extraConfig: '[oauth]\nenabled = true\naccess_token_secs = 2\n',
  });
  servers.push(short);
  story = await findStory(server, server.keys.main);
});

after(async () => {
  for (const s of servers) {
    await s.stop();
    cleanup(s);
  }
});

// ------------------------------------------------------------------------------- the browser

function unescapeHtml(s) {
  return s.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');
}

/** The consent form's hidden fields, as a browser would submit them. */
function formFields(html) {
  const out = {};
  for (const m of html.matchAll(/<input type="hidden" name="([^"]*)" value="([^"]*)">/g)) {
    out[unescapeHtml(m[1])] = unescapeHtml(m[2]);
  }
  return out;
}

function postForm(url, fields) {
  return request(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
  });
}

/** GETs the authorize URL (the page), fills the key, submits; resolves {page, answer, fields}. */
async function consent(s, authUrl, key, mutate) {
  const page = await request(String(authUrl));
  assert.equal(page.status, 200, `consent page: ${page.status} ${page.body}`);
  const fields = { ...formFields(page.body), api_key: key, action: 'allow' };
  if (mutate) mutate(fields);
  const answer = await postForm(`${s.url}/authorize`, fields);
  return { page, answer, fields };
}

/** An OAuthClientProvider whose redirect step is the browser above. */
class BrowserProvider {
  constructor(s, key, name = 'tollgate oauth test') {
    this.s = s;
    this.key = key;
    this.name = name;
  }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return {
      client_name: this.name, redirect_uris: [REDIRECT], grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'], token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() { return this.info; }
  saveClientInformation(i) { this.info = i; }
  tokens() { return this.tok; }
  saveTokens(t) { this.tok = t; }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
  async redirectToAuthorization(url) {
    this.authUrl = url;
    const { answer } = await consent(this.s, url, this.key);
    assert.equal(answer.status, 302, `consent answer: ${answer.status} ${answer.body}`);
    const loc = new URL(answer.headers.location);
    assert.equal(loc.origin + loc.pathname, REDIRECT);
    this.code = loc.searchParams.get('code');
    this.iss = loc.searchParams.get('iss');
    assert.ok(this.code, `a code in ${loc}`);
  }
}

/** The SDK's flow: connect (401), register, authorize, finishAuth, connect again. `sdk`: the v1
 * SDK's classes, or the v2 client's. */
const V1 = { Client, StreamableHTTPClientTransport, UnauthorizedError };
async function connectOAuth(s, provider, sdk = V1) {
  const url = new URL(`${s.url}/mcp`);
  let transport = new sdk.StreamableHTTPClientTransport(url, { authProvider: provider });
  let client = new sdk.Client({ name: 'oauth-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    return client;
  } catch (e) {
    if (!(e instanceof sdk.UnauthorizedError)) throw e;
  }
  await transport.finishAuth(provider.code, provider.iss);  // v2 checks iss (RFC 9207)
  transport = new sdk.StreamableHTTPClientTransport(url, { authProvider: provider });
  client = new sdk.Client({ name: 'oauth-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

// ------------------------------------------------------------------------ raw protocol helpers

function pkce() {
  const verifier = crypto.randomBytes(32).toString('base64url');
  const challenge = crypto.createHash('sha256').update(verifier).digest('base64url');
  return { verifier, challenge };
}

async function register(s, body) {
  const r = await request(`${s.url}/register`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return { ...r, json: JSON.parse(r.body) };
}

async function newClient(s, name = 'raw client') {
  const r = await register(s, { client_name: name, redirect_uris: [REDIRECT] });
  assert.equal(r.status, 201, r.body);
  return r.json.client_id;
}

function authorizeUrl(s, params) {
  const q = new URLSearchParams({ response_type: 'code', redirect_uri: REDIRECT, state: 'st-1', ...params });
  for (const [k, v] of [...q.entries()]) if (v === 'undefined') q.delete(k);
  return `${s.url}/authorize?${q}`;
}

/** A code for `clientId` through the consent page. */
async function codeFor(s, clientId, key = s.keys.main, extra = {}) {
  const p = pkce();
  const url = authorizeUrl(s, { client_id: clientId, code_challenge: p.challenge, code_challenge_method: 'S256',
    resource: `${s.url}/mcp`, ...extra });
  const { answer } = await consent(s, url, key);
  assert.equal(answer.status, 302, answer.body);
  const loc = new URL(answer.headers.location);
  return { code: loc.searchParams.get('code'), verifier: p.verifier, loc };
}

async function tokenReq(s, fields) {
  const r = await postForm(`${s.url}/token`, fields);
  return { ...r, json: JSON.parse(r.body) };
}

async function tokensFor(s, clientId, key = s.keys.main) {
  const c = await codeFor(s, clientId, key);
  const t = await tokenReq(s, { grant_type: 'authorization_code', code: c.code, code_verifier: c.verifier,
    redirect_uri: REDIRECT, client_id: clientId, resource: `${s.url}/mcp` });
  assert.equal(t.status, 200, t.body);
  return t.json;
}

async function callWith(s, token, id = 1) {
  return mcpPost(s, toolCall(id, 'search_stories', { query: story.query }), { key: token });
}

function toolErrorCode(r) {
  const j = JSON.parse(r.body);
  assert.equal(j.result?.isError, true, r.body);
  return parseToolText(j.result).code;
}

// ---------------------------------------------------------------------------- the happy path

test('discovery: the 401 names the resource metadata; both documents as RFC 9728 / 8414', async () => {
  const r = await mcpPost(server, toolCall(1, 'search_stories', { query: 'x' }));
  assert.equal(r.status, 401);
  assert.equal(r.headers['www-authenticate'],
    `Bearer realm="tollgate", resource_metadata="${server.url}/.well-known/oauth-protected-resource/mcp"`);
  assert.equal(JSON.parse(r.body).code, 'invalid_key', 'the JSON body stays');
  const bad = await mcpPost(server, toolCall(1, 'search_stories', { query: 'x' }), { key: 'tg_live_nope' });
  assert.match(bad.headers['www-authenticate'], /resource_metadata=".*", error="invalid_token", error_description="/);
  const rest = await request(`${server.url}/v1/stories?q=x`);
  assert.equal(rest.status, 401);
  assert.match(rest.headers['www-authenticate'], /resource_metadata=/);

  for (const p of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp']) {
    const m = JSON.parse((await request(server.url + p)).body);
    assert.equal(m.resource, `${server.url}/mcp`);
    assert.deepEqual(m.authorization_servers, [server.url]);
    assert.deepEqual(m.bearer_methods_supported, ['header']);
  }
  for (const p of ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']) {
    const r2 = await request(server.url + p);
    assert.equal(r2.status, 200);
    const m = JSON.parse(r2.body);
    assert.equal(m.issuer, server.url);
    assert.equal(m.authorization_endpoint, `${server.url}/authorize`);
    assert.equal(m.token_endpoint, `${server.url}/token`);
    assert.equal(m.registration_endpoint, `${server.url}/register`);
    assert.equal(m.revocation_endpoint, `${server.url}/revoke`);
    assert.deepEqual(m.code_challenge_methods_supported, ['S256']);
    assert.deepEqual(m.grant_types_supported, ['authorization_code', 'refresh_token']);
    assert.deepEqual(m.response_types_supported, ['code']);
    assert.ok(m.token_endpoint_auth_methods_supported.includes('none'));
    assert.equal(m.authorization_response_iss_parameter_supported, true);
    assert.equal(m.client_id_metadata_document_supported, true);
  }
  assert.equal((await request(`${server.url}/.well-known/nothing`)).status, 404);
});

test('the SDK client: DCR, consent, tools/call on the token; refresh; call again', async () => {
  const provider = new BrowserProvider(server, server.keys.main);
  const client = await connectOAuth(server, provider);
  assert.equal(provider.iss, server.url, 'the redirect carries iss (RFC 9207)');
  assert.match(provider.tok.access_token, /^tgat_[0-9a-f]{64}$/);
  assert.match(provider.tok.refresh_token, /^tgrt_[0-9a-f]{64}$/);
  assert.equal(provider.tok.token_type, 'Bearer');
  assert.equal(provider.tok.expires_in, 3600);
  const before = (await usageOf(server, server.keys.main)).used;
  const res = await client.callTool({ name: 'search_stories', arguments: { query: story.query } });
  assert.notEqual(res.isError, true, JSON.stringify(res));
  assert.ok(parseToolText(res).stories.length > 0);
  await client.close();

  const first = provider.tok;
  assert.equal(await auth(provider, { serverUrl: `${server.url}/mcp` }), 'AUTHORIZED');
  assert.notEqual(provider.tok.access_token, first.access_token, 'a new access token');
  assert.notEqual(provider.tok.refresh_token, first.refresh_token, 'the refresh token rotated');
  const again = await connectOAuth(server, provider);
  const res2 = await again.callTool({ name: 'search_stories', arguments: { query: story.query } });
  assert.notEqual(res2.isError, true, JSON.stringify(res2));
  await again.close();
  // Usage figures are published on the reconcile timer (100 ms here).
  await eventually(async () => (await usageOf(server, server.keys.main)).used >= before + 2, 3000,
    'usage counted on the key');
});

test('the v2 client (@modelcontextprotocol/client): the same flow, then tools/call', async () => {
  const provider = new BrowserProvider(server, server.keys.main, 'v2 client');
  const client = await connectOAuth(server, provider, v2);
  assert.match(provider.tok.access_token, /^tgat_/);
  const res = await client.callTool({ name: 'search_stories', arguments: { query: story.query } });
  assert.notEqual(res.isError, true, JSON.stringify(res));
  await client.close();
});

test('a suspended account may authorize; a denial redirects access_denied', async () => {
  const c = await newClient(server);
  const p = pkce();
  const url = authorizeUrl(server, { client_id: c, code_challenge: p.challenge, code_challenge_method: 'S256' });
  const { answer } = await consent(server, url, server.keys.main, (f) => { f.action = 'deny'; });
  assert.equal(answer.status, 302);
  const loc = new URL(answer.headers.location);
  assert.equal(loc.searchParams.get('error'), 'access_denied');
  assert.equal(loc.searchParams.get('state'), 'st-1');
  assert.equal(loc.searchParams.get('iss'), server.url);
});

// ---------------------------------------------------------------------------- security cases

test('redirect_uri mismatch: an error page, never a redirect', async () => {
  const c = await newClient(server);
  const p = pkce();
  const r = await request(authorizeUrl(server, { client_id: c, redirect_uri: 'https://evil.example/cb',
    code_challenge: p.challenge, code_challenge_method: 'S256' }));
  assert.equal(r.status, 400);
  assert.equal(r.headers.location, undefined);
  assert.match(r.headers['content-type'], /text\/html/);
  const unknown = await request(authorizeUrl(server, { client_id: 'tgc_nope', code_challenge: p.challenge,
    code_challenge_method: 'S256' }));
  assert.equal(unknown.status, 400);
  assert.equal(unknown.headers.location, undefined);
});

test('registration: https or loopback http only, lengths limited, public clients only', async () => {
  assert.equal((await register(server, { redirect_uris: ['http://evil.example/cb'] })).status, 400);
  assert.equal((await register(server, { redirect_uris: ['https://a.example/cb#x'] })).status, 400);
  assert.equal((await register(server, { redirect_uris: [] })).status, 400);
  assert.equal((await register(server, { redirect_uris: [REDIRECT], client_name: 'x'.repeat(200) })).status, 400);
  assert.equal((await register(server, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'client_secret_basic' })).status, 400);
  const junk = await request(`${server.url}/register`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{not json' });
  assert.equal(junk.status, 400);
  assert.equal(JSON.parse(junk.body).error, 'invalid_client_metadata');
  const ok = await register(server, { redirect_uris: ['https://claude.ai/api/mcp/auth_callback'], client_name: 'Claude' });
  assert.equal(ok.status, 201);
  assert.equal(ok.json.token_endpoint_auth_method, 'none');
});

test('PKCE: missing and plain are refused at /authorize, a wrong verifier at /token', async () => {
  const c = await newClient(server);
  const p = pkce();
  for (const extra of [{}, { code_challenge: p.challenge, code_challenge_method: 'plain' },
    { code_challenge: p.challenge }]) {
    const r = await request(authorizeUrl(server, { client_id: c, ...extra }));
    assert.equal(r.status, 302, JSON.stringify(extra));
    const loc = new URL(r.headers.location);
    assert.equal(loc.searchParams.get('error'), 'invalid_request');
    assert.equal(loc.searchParams.get('iss'), server.url);
    assert.equal(loc.searchParams.get('state'), 'st-1');
  }
  const code = await codeFor(server, c);
  const t = await tokenReq(server, { grant_type: 'authorization_code', code: code.code,
    code_verifier: pkce().verifier, redirect_uri: REDIRECT, client_id: c });
  assert.equal(t.status, 400);
  assert.equal(t.json.error, 'invalid_grant');
  const code2 = await codeFor(server, c);
  const none = await tokenReq(server, { grant_type: 'authorization_code', code: code2.code, redirect_uri: REDIRECT, client_id: c });
  assert.equal(none.json.error, 'invalid_grant');
});

test('a code is redeemed once, only by its client, only with its redirect_uri', async () => {
  const a = await newClient(server, 'a');
  const b = await newClient(server, 'b');
  const c = await codeFor(server, a);
  const fields = { grant_type: 'authorization_code', code: c.code, code_verifier: c.verifier,
    redirect_uri: REDIRECT, client_id: a };
  const first = await tokenReq(server, fields);
  assert.equal(first.status, 200, first.body);
  assert.equal(first.headers['cache-control'], 'no-store');
  const replay = await tokenReq(server, fields);
  assert.equal(replay.status, 400);
  assert.equal(replay.json.error, 'invalid_grant');

  const c2 = await codeFor(server, a);
  const stolen = await tokenReq(server, { ...fields, code: c2.code, code_verifier: c2.verifier, client_id: b });
  assert.equal(stolen.json.error, 'invalid_grant');
  const c3 = await codeFor(server, a);
  const moved = await tokenReq(server, { ...fields, code: c3.code, code_verifier: c3.verifier, redirect_uri: 'http://127.0.0.1:9/other' });
  assert.equal(moved.json.error, 'invalid_grant');
  const unknownClient = await tokenReq(server, { ...fields, client_id: 'tgc_nope' });
  assert.equal(unknownClient.status, 401);
  assert.equal(unknownClient.json.error, 'invalid_client');
  const grantType = await tokenReq(server, { grant_type: 'password', client_id: a });
  assert.equal(grantType.json.error, 'unsupported_grant_type');
});

test('refresh: rotated each use; a spent token used again revokes the whole grant', async () => {
  const c = await newClient(server);
  const t1 = await tokensFor(server, c);
  const r1 = await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t1.refresh_token, client_id: c });
  assert.equal(r1.status, 200, r1.body);
  const t2 = r1.json;
  assert.equal((await callWith(server, t2.access_token)).status, 200);
  const reuse = await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t1.refresh_token, client_id: c });
  assert.equal(reuse.status, 400);
  assert.equal(reuse.json.error, 'invalid_grant');
  const next = await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t2.refresh_token, client_id: c });
  assert.equal(next.json.error, 'invalid_grant', 'the rotated token went with the grant');
  await eventually(async () => (await callWith(server, t2.access_token)).status === 401, 2000, 'access token revoked');
});

test('scope: the token response says what is granted (mcp), whatever was asked', async () => {
  const c = await newClient(server);
  const code = await codeFor(server, c, server.keys.main, { scope: 'mcp admin openid' });
  const t = await tokenReq(server, { grant_type: 'authorization_code', code: code.code, code_verifier: code.verifier,
    redirect_uri: REDIRECT, client_id: c });
  assert.equal(t.status, 200, t.body);
  assert.equal(t.json.scope, 'mcp');
  const r = await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t.json.refresh_token, client_id: c });
  assert.equal(r.json.scope, 'mcp');
});

test('resource: another resource is refused at /authorize and /token', async () => {
  const c = await newClient(server);
  const p = pkce();
  const r = await request(authorizeUrl(server, { client_id: c, code_challenge: p.challenge,
    code_challenge_method: 'S256', resource: 'https://evil.example/mcp' }));
  assert.equal(r.status, 302);
  assert.equal(new URL(r.headers.location).searchParams.get('error'), 'invalid_target');
  const code = await codeFor(server, c);
  const t = await tokenReq(server, { grant_type: 'authorization_code', code: code.code, code_verifier: code.verifier,
    redirect_uri: REDIRECT, client_id: c, resource: 'https://evil.example/mcp' });
  assert.equal(t.json.error, 'invalid_target');
});

test('a token in the query string is refused 401', async () => {
  const c = await newClient(server);
  const t = await tokensFor(server, c);
  const r = await request(`${server.url}/mcp?access_token=${t.access_token}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify(toolCall(1, 'search_stories', { query: story.query })),
  });
  assert.equal(r.status, 401);
  assert.match(r.headers['www-authenticate'], /error="invalid_token"/);
  const both = await mcpPost(server, toolCall(1, 'search_stories', { query: story.query }),
    { key: t.access_token, extra: {} });
  assert.equal(both.status, 200, 'the same token in the header works');
  const rest = await request(`${server.url}/v1/stories?q=x&access_token=${t.access_token}`,
    { headers: { Authorization: `Bearer ${t.access_token}` } });
  assert.equal(rest.status, 401, 'in the query, even beside the header');
});

test('an expired token is a 401 invalid_token', async () => {
  const c = await newClient(short);
  const t = await tokensFor(short, c);
  assert.equal(t.expires_in, 2);
  const r = await mcpPost(short, toolCall(1, 'search_stories', { query: 'x' }), { key: t.access_token });
  assert.equal(r.status, 200, r.body);
  await eventually(async () => (await mcpPost(short, toolCall(2, 'search_stories', { query: 'x' }),
    { key: t.access_token })).status === 401, 6000, 'the token expired');
  const late = await mcpPost(short, toolCall(3, 'search_stories', { query: 'x' }), { key: t.access_token });
  assert.match(late.headers['www-authenticate'], /error="invalid_token"/);
  const fresh = await tokenReq(short, { grant_type: 'refresh_token', refresh_token: t.refresh_token, client_id: c });
  assert.equal(fresh.status, 200, 'the refresh token outlives it');
});

test('consent page: client_name escaped, redirect host shown, framing and caching headers', async () => {
  const c = await newClient(server, '<script>alert("x")</script><img src=x onerror=alert(1)>');
  const p = pkce();
  const r = await request(authorizeUrl(server, { client_id: c, code_challenge: p.challenge, code_challenge_method: 'S256' }));
  assert.equal(r.status, 200);
  assert.equal(r.body.includes('<script>'), false, 'no markup from the client');
  assert.equal(r.body.includes('<img'), false);
  assert.ok(r.body.includes('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;'));
  assert.ok(r.body.includes('127.0.0.1:9'), 'the redirect host is shown');
  assert.match(r.headers['content-security-policy'], /frame-ancestors 'none'/);
  assert.match(r.headers['content-security-policy'], /default-src 'none'/);
  assert.equal(r.headers['x-frame-options'], 'DENY');
  assert.equal(r.headers['cache-control'], 'no-store');
  assert.equal(r.headers['referrer-policy'], 'no-referrer');
  assert.equal(/https?:\/\/(?!127\.0\.0\.1)/.test(r.body.replace(/value="[^"]*"/g, '')), false, 'no third-party asset');
});

test('consent: a wrong key re-renders with a message and never echoes the key', async () => {
  const c = await newClient(server);
  const p = pkce();
  const url = authorizeUrl(server, { client_id: c, code_challenge: p.challenge, code_challenge_method: 'S256' });
  const wrong = 'tg_live_0000000000000000000000000000000000000000';
  const { answer } = await consent(server, url, wrong);
  assert.equal(answer.status, 401);
  assert.equal(answer.headers.location, undefined);
  assert.match(answer.body, /not valid/);
  assert.equal(answer.body.includes(wrong), false, 'the key is not echoed');
  assert.equal(server.stderr().includes(wrong), false, 'nor logged');
  const again = formFields(answer.body);
  const ok = await postForm(`${server.url}/authorize`, { ...again, api_key: server.keys.main, action: 'allow' });
  assert.equal(ok.status, 302, 'the re-rendered form works with the right key');
  const tokenAsKey = await tokensFor(server, c);
  const { answer: viaToken } = await consent(server, url, tokenAsKey.access_token);
  assert.equal(viaToken.status, 401, 'an access token is not a key on the consent page');
});

test('consent: without a CSRF token, or with another request\'s, nothing is redirected', async () => {
  const c = await newClient(server);
  const p = pkce();
  const url = authorizeUrl(server, { client_id: c, code_challenge: p.challenge, code_challenge_method: 'S256' });
  const none = await consent(server, url, server.keys.main, (f) => { delete f.csrf; });
  assert.equal(none.answer.status, 400);
  assert.equal(none.answer.headers.location, undefined);
  const swapped = await consent(server, url, server.keys.main, (f) => { f.redirect_uri = 'https://evil.example/cb'; });
  assert.equal(swapped.answer.status, 400, 'the token binds the request');
  assert.equal(swapped.answer.headers.location, undefined);
  const stale = await consent(server, url, server.keys.main, (f) => {
    const [exp, mac] = f.csrf.split('.');
    f.csrf = `${Number(exp) - 700}.${mac}`;
  });
  assert.equal(stale.answer.status, 400);
});

test('revocation: POST /revoke (RFC 7009), `tollgate oauth revoke`, `tollgate keys revoke`', async () => {
  const c = await newClient(server);
  const t = await tokensFor(server, c);
  assert.equal((await callWith(server, t.access_token)).status, 200);
  const rv = await postForm(`${server.url}/revoke`, { token: t.access_token, client_id: c });
  assert.equal(rv.status, 200);
  await eventually(async () => (await callWith(server, t.access_token)).status === 401, 1000, 'revoked by /revoke');
  const junk = await postForm(`${server.url}/revoke`, { token: 'tgat_unknown', client_id: c });
  assert.equal(junk.status, 200, 'an unknown token is no error');

  const t2 = await tokensFor(server, c);
  const list = await runCli(['oauth', 'list', '--data-dir', server.dataDir]);
  assert.equal(list.code, 0, list.stderr);
  const row = list.stdout.split('\n').find((l) => l.includes(c) && l.includes('active'));
  assert.ok(row, list.stdout);
  const grantId = row.split(/\s+/)[0];
  const cli = await runCli(['oauth', 'revoke', grantId, '--data-dir', server.dataDir]);
  assert.equal(cli.code, 0, cli.stderr);
  await eventually(async () => (await callWith(server, t2.access_token)).status === 401, 1500, 'revoked by the CLI');
  assert.equal((await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t2.refresh_token, client_id: c })).json.error,
    'invalid_grant');

  const t3 = await tokensFor(server, c, server.keys.victim);
  assert.equal((await callWith(server, t3.access_token)).status, 200);
  await admin(server, ['keys', 'revoke', await server.keyId('victim')]);
  await eventually(async () => (await callWith(server, t3.access_token)).status === 401, 1500, 'revoked with its key');
  assert.equal((await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t3.refresh_token, client_id: c })).json.error,
    'invalid_grant');
  const bad = await runCli(['oauth', 'revoke', '--data-dir', server.dataDir]);
  assert.equal(bad.code, 2);
});

// ------------------------------------------------------------------ the seed's table via a token

test('the seed through a token: 401, 429 + Retry-After, suspended, quota_exceeded, usage on the key', async () => {
  const c = await newClient(server);
  const forged = `tgat_${'0'.repeat(64)}`;
  const r401 = await callWith(server, forged);
  assert.equal(r401.status, 401);
  assert.equal(JSON.parse(r401.body).code, 'invalid_key');

  const slow = await tokensFor(server, c, server.keys.slow);
  let limited;
  for (let i = 0; i < 5 && !limited; i++) {
    const r = await mcpPost(server, { jsonrpc: '2.0', id: i, method: 'ping' }, { key: slow.access_token });
    if (r.status === 429) limited = r;
  }
  assert.ok(limited, 'the slow plan limits its token');
  assert.ok(Number(limited.headers['retry-after']) >= 1);

  const susp = await tokensFor(server, c, server.keys.susp);
  await admin(server, ['accounts', 'suspend', 'acct-susp']);
  await eventually(async () => {
    const r = await callWith(server, susp.access_token);
    return r.status === 200 && toolErrorCode(r) === 'suspended';
  }, 3000, 'suspended through the token');
  await admin(server, ['accounts', 'resume', 'acct-susp']);

  const capped = await tokensFor(server, c, server.keys.capped);
  const codes = [];
  for (let i = 0; i < 3; i++) {
    const r = await callWith(server, capped.access_token, i);
    assert.equal(r.status, 200);
    const j = JSON.parse(r.body);
    codes.push(j.result.isError ? parseToolText(j.result).code : 'ok');
  }
  assert.deepEqual(codes, ['ok', 'ok', 'quota_exceeded']);
  await eventually(async () => (await usageOf(server, server.keys.capped)).used === 2, 3000,
    'the token\'s calls are the key\'s usage');
});

// --------------------------------------------------------------- durability and brute force

test('kill -9 and restart: a token keeps working; a spent refresh token or redeemed code never does', async () => {
  const c = await newClient(server);
  const t1 = await tokensFor(server, c);
  const r1 = await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t1.refresh_token, client_id: c });
  assert.equal(r1.status, 200);
  const live = r1.json;
  const code = await codeFor(server, c);
  const redeemed = await tokenReq(server, { grant_type: 'authorization_code', code: code.code,
    code_verifier: code.verifier, redirect_uri: REDIRECT, client_id: c });
  assert.equal(redeemed.status, 200);
  const p = pkce();
  const page = await request(authorizeUrl(server, { client_id: c, code_challenge: p.challenge, code_challenge_method: 'S256' }));
  const oldForm = formFields(page.body);

  await server.kill9();
  const idx = servers.indexOf(server);
  server = await restart(server);
  servers[idx] = server;

  assert.equal((await callWith(server, live.access_token)).status, 200, 'the issued token survives');
  assert.equal((await callWith(server, redeemed.json.access_token)).status, 200);
  const again = await tokenReq(server, { grant_type: 'authorization_code', code: code.code,
    code_verifier: code.verifier, redirect_uri: REDIRECT, client_id: c });
  assert.equal(again.json.error, 'invalid_grant', 'a redeemed code stays redeemed');
  const spent = await tokenReq(server, { grant_type: 'refresh_token', refresh_token: t1.refresh_token, client_id: c });
  assert.equal(spent.json.error, 'invalid_grant', 'a spent refresh token stays spent (and revokes)');
  await eventually(async () => (await callWith(server, live.access_token)).status === 401, 1500,
    'its reuse revoked the grant');
  const stale = await postForm(`${server.url}/authorize`, { ...oldForm, api_key: server.keys.main, action: 'allow' });
  assert.equal(stale.status, 400, 'a consent form from before the restart is stale');
});

test('consent brute force is slowed: after 8 wrong keys from one address, 429', async () => {
  const c = await newClient(short);
  const p = pkce();
  const url = authorizeUrl(short, { client_id: c, code_challenge: p.challenge, code_challenge_method: 'S256' });
  const statuses = [];
  for (let i = 0; i < 9; i++) {
    const { answer } = await consent(short, url, `tg_live_${crypto.randomBytes(20).toString('hex')}`);
    statuses.push(answer.status);
  }
  assert.deepEqual(statuses, [401, 401, 401, 401, 401, 401, 401, 401, 429]);
  const { answer } = await consent(short, url, short.keys.main);
  assert.equal(answer.status, 429, 'even the right key waits');
  assert.ok(Number(answer.headers['retry-after']) >= 1);
});

// ------------------------------------------------------------ client ID metadata documents
//
// The documents are served by this test over HTTPS on 127.0.0.1 with a throwaway self-signed
// certificate. The `cimd` server trusts it through [oauth] cimd_ca_file and allows 127.0.0.1
// through cimd_allow (loopback is refused otherwise, which the main server shows); its fetch
// timeout is 1 s so the slow document's test is quick.

let docs;      // {base, hits: Map(path → fetches), close()}
let cimd;      // the tollgate server that may fetch from 127.0.0.1
let tlsFiles;  // selfSignedCert()

function docServer(cert) {
  return new Promise((resolve, reject) => {
    const hits = new Map();
    const held = new Set();
    let base;
    const docFor = (p, extra = {}) => JSON.stringify({
      client_id: `${base}${p}`, client_name: 'CIMD <b>test</b> app', redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'],
      token_endpoint_auth_method: 'none', ...extra,
    });
    const srv = https.createServer({ key: fs.readFileSync(cert.key), cert: fs.readFileSync(cert.cert) }, (req, res) => {
      const p = req.url;
      hits.set(p, (hits.get(p) ?? 0) + 1);
      const json = (body, headers = {}) => {
        res.writeHead(200, { 'Content-Type': 'application/json', ...headers });
        res.end(body);
      };
      if (p.startsWith('/good')) json(docFor(p), { 'Cache-Control': 'max-age=600' });
      else if (p === '/wrong-id.json') json(docFor(p, { client_id: `${base}/someone-else.json` }));
      else if (p === '/other-redirect.json') json(docFor(p, { redirect_uris: ['http://127.0.0.1:9/elsewhere'] }));
      else if (p === '/big.json') json(docFor(p, { padding: 'x'.repeat(100 * 1024) }));
      else if (p.startsWith('/slow.json')) { held.add(res); }  // never answered: the fetch times out
      else { res.writeHead(404); res.end(); }
    });
    srv.on('tlsClientError', () => {});
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      base = `https://127.0.0.1:${srv.address().port}`;
      resolve({
        base, hits,
        close: () => new Promise((r) => { for (const h of held) h.destroy(); srv.closeAllConnections?.(); srv.close(() => r()); }),
      });
    });
  });
}

before(async () => {
  tlsFiles = selfSignedCert();
  assert.ok(tlsFiles, 'openssl makes the documents\' certificate');
  docs = await docServer(tlsFiles);
  cimd = await start({
    keys: { main: { account: 'acct-main', plan: 'big' } }, plans: PLANS,
    extraConfig: `[oauth]\nenabled = true\ncimd_allow = ["127.0.0.1"]\ncimd_ca_file = ${JSON.stringify(tlsFiles.cert)}\ncimd_timeout_ms = 1000\n`,
  });
  servers.push(cimd);
});

after(async () => {
  await docs?.close();
  if (tlsFiles) fs.rmSync(tlsFiles.dir, { recursive: true, force: true });
});

/** A provider that identifies itself by a metadata document URL (the SDK uses it when the
 * server's metadata says client_id_metadata_document_supported). */
class DocumentProvider extends BrowserProvider {
  constructor(s, key, url) {
    super(s, key);
    this.url = url;
  }
  get clientMetadataUrl() { return this.url; }
  saveClientInformation(i) {
    assert.equal(i.client_id, this.url, 'a metadata document client never registers');
    this.info = i;
  }
}

/** GET /authorize for a document client; resolves the page or the refusal. */
function authorizeDoc(s, clientId, extra = {}) {
  const p = pkce();
  return request(authorizeUrl(s, { client_id: clientId, code_challenge: p.challenge,
    code_challenge_method: 'S256', ...extra }), { timeoutMs: 15000 });
}

test('CIMD: the SDK client with a metadata document URL: consent, token, tools/call, refresh', async () => {
  const url = `${docs.base}/good/sdk.json`;
  const provider = new DocumentProvider(cimd, cimd.keys.main, url);
  const client = await connectOAuth(cimd, provider);
  assert.equal(new URL(provider.authUrl).searchParams.get('client_id'), url, 'the URL is the client_id');
  assert.match(provider.tok.access_token, /^tgat_[0-9a-f]{64}$/);
  const res = await client.callTool({ name: 'search_stories', arguments: { query: story.query } });
  assert.notEqual(res.isError, true, JSON.stringify(res));
  await client.close();
  assert.equal(await auth(provider, { serverUrl: `${cimd.url}/mcp` }), 'AUTHORIZED', 'refresh with the URL client');
  const again = await connectOAuth(cimd, provider);
  const res2 = await again.callTool({ name: 'search_stories', arguments: { query: story.query } });
  assert.notEqual(res2.isError, true, JSON.stringify(res2));
  await again.close();
  assert.equal(docs.hits.get('/good/sdk.json'), 1, 'fetched once: max-age=600 keeps it');
  const revoke = await postForm(`${cimd.url}/revoke`, { token: provider.tok.access_token, client_id: url });
  assert.equal(revoke.status, 200, revoke.body);
});

test('CIMD: the consent page names the document\'s client, escaped; its redirect_uris bind', async () => {
  const url = `${docs.base}/good/page.json`;
  const page = await authorizeDoc(cimd, url);
  assert.equal(page.status, 200, page.body);
  assert.ok(page.body.includes(`CIMD &lt;b&gt;test&lt;/b&gt; app (from ${new URL(docs.base).host})`),
    'client_name escaped, and the host its document came from');
  const other = await authorizeDoc(cimd, url, { redirect_uri: 'http://127.0.0.1:9/not-listed' });
  assert.equal(other.status, 400);
  assert.equal(other.headers.location, undefined, 'no redirect to a URI the document does not list');
  assert.match(other.body, /metadata document/);
});

test('CIMD: a document whose client_id differs from its URL is refused (a page, no redirect)', async () => {
  const r = await authorizeDoc(cimd, `${docs.base}/wrong-id.json`);
  assert.equal(r.status, 400);
  assert.equal(r.headers.location, undefined);
  assert.match(r.body, /client_id is not the URL it was fetched from/);
  const t = await tokenReq(cimd, { grant_type: 'authorization_code', code: 'tgac_x', code_verifier: 'x'.repeat(43),
    redirect_uri: REDIRECT, client_id: `${docs.base}/wrong-id.json` });
  assert.equal(t.status, 401, 'nor does /token take it');
  assert.equal(t.json.error, 'invalid_client');
});

test('CIMD: a URL on a loopback or private address not in cimd_allow is refused', async () => {
  // The main server has no allow list: the same good document on 127.0.0.1 is refused before
  // any byte is sent to it.
  const before = docs.hits.get('/good/private.json') ?? 0;
  const r = await authorizeDoc(server, `${docs.base}/good/private.json`);
  assert.equal(r.status, 400);
  assert.equal(r.headers.location, undefined);
  assert.match(r.body, /loopback address 127\.0\.0\.1/);
  assert.equal(docs.hits.get('/good/private.json') ?? 0, before, 'never fetched');
  for (const u of ['https://10.1.2.3/c.json', 'https://[::ffff:127.0.0.1]/c.json', 'https://169.254.169.254/latest']) {
    const p = await authorizeDoc(server, u);
    assert.equal(p.status, 400, u);
    assert.match(p.body, /(private|loopback|link-local) address/, u);
  }
  const http = await authorizeDoc(cimd, `http://127.0.0.1:9/c.json`.replace(':9', `:${await freePort()}`));
  assert.equal(http.status, 400, 'http:// to an allowed loopback host is tried (nothing listens)');
  const root = await authorizeDoc(cimd, `${docs.base}/`);
  assert.match(root.body, /must have a path/);
});

test('CIMD: an oversize document and a fetch timeout are refused with a clear page', async () => {
  const big = await authorizeDoc(cimd, `${docs.base}/big.json`);
  assert.equal(big.status, 400);
  assert.match(big.body, /larger than 65536 bytes/);
  const t0 = Date.now();
  const slow = await authorizeDoc(cimd, `${docs.base}/slow.json`);
  assert.equal(slow.status, 400);
  assert.match(slow.body, /did not answer/);
  assert.ok(Date.now() - t0 < 5000, `answered by the 1 s timeout (${Date.now() - t0} ms)`);
  // Meanwhile the core served others: a request sent while the slow fetch ran was not held.
  const p = authorizeDoc(cimd, `${docs.base}/slow.json?again`);
  const t1 = Date.now();
  const health = await request(`${cimd.url}/healthz`);
  assert.equal(health.status, 200);
  assert.ok(Date.now() - t1 < 500, 'the core did not wait for the fetch');
  assert.equal((await p).status, 400);
});

// ------------------------------------------------------------------------------- mcp-remote
//
// mcp-remote (pinned in package.json) as a user runs it: `mcp-remote URL PORT` spoken to over
// stdio. It registers (DCR), opens the authorization URL with the `open` package, which runs
// xdg-open, which runs $BROWSER: here a script that writes the URL to a file. The test is the
// browser: it submits the consent form and follows the 302 to mcp-remote's callback on
// 127.0.0.1:PORT; mcp-remote then redeems the code and the MCP session goes on. HOME and
// MCP_REMOTE_CONFIG_DIR are a temporary directory, so nothing lands in the real home.

const MCP_REMOTE = path.join(path.dirname(new URL(import.meta.url).pathname), 'node_modules', 'mcp-remote', 'dist', 'proxy.js');

test('mcp-remote: DCR, the browser step, its callback, then tools/call through its stdio', { timeout: 120000 }, async () => {
  const home = tempDir('tollgate-mcp-remote-');
  const opened = path.join(home, 'opened.txt');
  const browser = path.join(home, 'browser.sh');
  fs.writeFileSync(browser, `#!/bin/sh\nprintf '%s\\n' "$1" >> '${opened}'\n`, { mode: 0o755 });
  const configDir = path.join(home, 'mcp-auth');
  const port = await freePort();
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [MCP_REMOTE, `${server.url}/mcp`, String(port), '--host', '127.0.0.1'],
    // No DISPLAY: xdg-open's generic mode, which runs $BROWSER.
    env: { PATH: process.env.PATH, HOME: home, MCP_REMOTE_CONFIG_DIR: configDir, BROWSER: browser },
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d) => { err += d; });
  const client = new Client({ name: 'via-mcp-remote', version: '1.0.0' });
  try {
    const connected = client.connect(transport, { timeout: 90000 });
    connected.catch(() => {});  // awaited below; a failure before then is reported there
    const authUrl = await eventually(() => fs.existsSync(opened) && fs.readFileSync(opened, 'utf8').trim(),
      60000, `mcp-remote opening the browser (stderr: ${err.slice(-2000)})`);
    const u = new URL(authUrl.split('\n')[0]);
    assert.equal(u.origin + u.pathname, `${server.url}/authorize`);
    assert.equal(u.searchParams.get('redirect_uri'), `http://127.0.0.1:${port}/oauth/callback`);
    const { answer } = await consent(server, u, server.keys.main);
    assert.equal(answer.status, 302, answer.body);
    // The browser follows the redirect. mcp-remote 0.15.1 opens the browser before its callback
    // server listens (it starts it on demand, a moment later): a person never wins that race,
    // this test can, so it waits for the port as a browser's reload would.
    const back = await eventually(() => request(answer.headers.location), 20000,
      `mcp-remote's callback on port ${port} (stderr: ${err.slice(-2000)})`);
    assert.equal(back.status, 200, `mcp-remote's callback: ${back.status} ${back.body}`);
    await connected;
    const res = await client.callTool({ name: 'search_stories', arguments: { query: story.query } });
    assert.notEqual(res.isError, true, JSON.stringify(res));
    assert.ok(parseToolText(res).stories.length > 0);
    const usage = await client.callTool({ name: 'get_usage', arguments: {} });
    assert.notEqual(usage.isError, true, JSON.stringify(usage));
    const stored = fs.readdirSync(configDir, { recursive: true }).map(String);
    assert.ok(stored.some((f) => f.endsWith('tokens.json')), `tokens kept in the temporary dir: ${stored}`);
  } finally {
    const pid = transport.pid;
    await client.close().catch(() => {});
    if (pid) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    }
    fs.rmSync(home, { recursive: true, force: true });
  }
});
