// Verifies the v2 client (@modelcontextprotocol/client 2.4.0) pinned to 2026-07-28 over stdio
// (its StdioClientTransport spawning `tollgate stdio`): server/discover, the per-request _meta
// envelope, resultType on every result; list tools, call each tool (text == REST body).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { start, prepare, cleanup, BIN, corpusLoaded } from './harness.mjs';
import { checkToolList, checkEachToolAgainstRest, toolError } from './common.mjs';

const REVISION = '2026-07-28';
let server;  // answers the REST side of the comparison (own data dir, same --sample corpus)

before(async () => {
  server = await start({ keys: { main: { account: 'acct-rest', plan: 'big' } } });
});

after(async () => {
  await server?.stop();
  cleanup(server);
});

test('pinned to 2026-07-28 over stdio: discover, list tools, call each tool', async () => {
  const own = await prepare({ keys: { main: { account: 'acct-v2-stdio', plan: 'big' } } });
  const t = new StdioClientTransport({
    command: BIN, args: ['stdio', '--config', own.configPath, '--data-dir', own.dataDir, '--sample'],
    env: { TOLLGATE_API_KEY: own.keys.main }, stderr: 'pipe',
  });
  const c = new Client({ name: 'tollgate-it-v2-stdio', version: '1.0.0' },
    { versionNegotiation: { mode: { pin: REVISION }, probe: { timeoutMs: 90000 } } });
  const loaded = corpusLoaded(t.stderr);
  try {
    await c.connect(t, { timeout: 90000 });  // a Debug build indexes --sample for seconds
    await loaded;
    assert.equal(c.getNegotiatedProtocolVersion(), REVISION);
    checkToolList((await c.listTools()).tools);
    await checkEachToolAgainstRest(server, server.keys.main,
      (name, args) => c.callTool({ name, arguments: args }, { timeout: 10000 }), { usageSameProcess: false });
    toolError(await c.callTool({ name: 'get_story', arguments: { id: 'no-such-story-4242424242' } }), 'not_found');
  } finally {
    await c.close().catch(() => {});
    cleanup(own);
  }
});
