// Verifies the v1 TypeScript SDK client over stdio (StdioClientTransport spawning
// `tollgate stdio` with TOLLGATE_API_KEY): connect, list tools, call each tool (text == REST body
// of a server on the same data dir), JSON-RPC errors, isError results; a missing or invalid key
// makes `tollgate stdio` refuse to start with a message on stderr and exit 2.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { start, prepare, cleanup, runCli, BIN, corpusLoaded } from './harness.mjs';
import { checkToolList, checkEachToolAgainstRest, toolError, namesArgument } from './common.mjs';

let server;  // a server (own data dir, same --sample corpus) provides the REST bodies to compare
let stdioDir;  // the stdio process's own data dir and key (two processes never share a journal)
let client;
let transport;

function stdioArgs() {
  return ['stdio', '--config', stdioDir.configPath, '--data-dir', stdioDir.dataDir, '--sample'];
}

before(async () => {
  server = await start({ keys: { main: { account: 'acct-rest', plan: 'big' } } });
  stdioDir = await prepare({ keys: { main: { account: 'acct-stdio', plan: 'big' } } });
  transport = new StdioClientTransport({
    command: BIN, args: stdioArgs(), env: { TOLLGATE_API_KEY: stdioDir.keys.main }, stderr: 'pipe',
  });
  const loaded = corpusLoaded(transport.stderr);
  client = new Client({ name: 'tollgate-it-stdio', version: '1.0.0' });
  await client.connect(transport, { timeout: 90000 });  // a Debug build indexes --sample for seconds
  await loaded;
});

after(async () => {
  const pid = transport?.pid;
  await client?.close().catch(() => {});
  if (pid) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* already exited, as it should on EOF */ }
  }
  await server?.stop();
  cleanup(server);
  cleanup(stdioDir);
});

test('tools/list over stdio: three tools, no outputSchema', async () => {
  const { tools } = await client.listTools();
  checkToolList(tools);
});

test('each tool over stdio succeeds with a text block equal to the REST body', async () => {
  await checkEachToolAgainstRest(server, server.keys.main,
    (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 10000 }),
    { usageSameProcess: false });
});

test('ping over stdio', async () => {
  await client.ping();
});

test('unknown tool over stdio: McpError -32602', async () => {
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => {
    assert.equal(e.code, -32602, e.message);
    assert.match(e.message, /Unknown tool: no_such_tool/);
    return true;
  });
});

test('bad argument over stdio: McpError -32602 naming the argument', async () => {
  await assert.rejects(client.callTool({ name: 'search_stories', arguments: { query: 'rust', limit: 1000 } }), (e) => {
    assert.equal(e.code, -32602, e.message);
    namesArgument(e.data, 'limit');
    return true;
  });
});

test('not found over stdio: isError result, code not_found', async () => {
  const r = await client.callTool({ name: 'get_story', arguments: { id: 'no-such-story-4242424242' } });
  toolError(r, 'not_found');
});

test('stdout carries only JSON-RPC: raw lines in, one JSON response per request line out', async () => {
  const lines = [
    { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 2, method: 'ping' },
    { jsonrpc: '2.0', id: 3, method: 'no/such/method' },
  ].map((m) => JSON.stringify(m)).join('\n') + '\n{not json\n';
  // its own data dir: the SDK client's stdio process still holds stdioDir
  const own = await prepare({ keys: { main: { account: 'acct-stdio-raw', plan: 'big' } } });
  const r = await runCli(['stdio', '--config', own.configPath, '--data-dir', own.dataDir, '--sample'],
    { env: { TOLLGATE_API_KEY: own.keys.main }, input: lines });
  cleanup(own);
  assert.equal(r.code, 0, `EOF on stdin -> exit 0; stderr: ${r.stderr}`);
  const out = r.stdout.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  assert.equal(out.length, 4, `4 responses (no answer to the notification): ${r.stdout}`);
  assert.equal(out[0].id, 1);
  assert.ok(out[0].result.protocolVersion);
  assert.deepEqual(out[1], { jsonrpc: '2.0', id: 2, result: {} });
  assert.equal(out[2].id, 3);
  assert.equal(out[2].error.code, -32601);
  assert.equal(out[3].id, null);
  assert.equal(out[3].error.code, -32700);
});

test('missing TOLLGATE_API_KEY: message on stderr, exit 2, nothing on stdout', async () => {
  const r = await runCli(stdioArgs(), { unset: ['TOLLGATE_API_KEY'], input: '' });
  assert.equal(r.code, 2, `exit code; stderr: ${r.stderr}`);
  assert.ok(r.stderr.trim().length > 0, 'a clear message on stderr');
  assert.equal(r.stdout, '');
});

test('invalid TOLLGATE_API_KEY: message on stderr, exit 2', async () => {
  const r = await runCli(stdioArgs(), { env: { TOLLGATE_API_KEY: 'tg_not_a_real_key_000000000000' }, input: '' });
  assert.equal(r.code, 2, `exit code; stderr: ${r.stderr}`);
  assert.ok(r.stderr.trim().length > 0, 'a clear message on stderr');
  assert.equal(r.stdout, '');
});

test('the SDK client surfaces the refusal as a failed connect', async () => {
  const t = new StdioClientTransport({ command: BIN, args: stdioArgs(), env: { TOLLGATE_API_KEY: 'tg_bogus' }, stderr: 'pipe' });
  const c = new Client({ name: 'tollgate-it-stdio-bad', version: '1.0.0' });
  await assert.rejects(c.connect(t, { timeout: 10000 }));
  await c.close().catch(() => {});
});
