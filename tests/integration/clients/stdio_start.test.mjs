// Verifies local `tollgate stdio` answers at once while it indexes its corpus (issue 29 item 6):
// initialize, ping, tools/list and server/discover are answered before the corpus is loaded, and
// a tools/call that arrives meanwhile waits for it and is then served. The AI SDK (@ai-sdk/mcp),
// which gives server/discover one second before it falls back to initialize, connects over the
// stateless revision with a burst-1 key (before, its late discover and its initialize both
// spent the one token, and the connection failed).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createMCPClient } from '@ai-sdk/mcp';
import { Experimental_StdioMCPTransport as AiStdio } from '@ai-sdk/mcp/mcp-stdio';
import { prepare, cleanup, runCli, tempDir, StdioSession, BIN, DEFAULT_PLANS } from './harness.mjs';

let prepared;
let corpusDir;
let corpus;

before(async () => {
  prepared = await prepare({
    plans: { ...DEFAULT_PLANS, burst1: { rate_per_sec: 1, burst: 1, monthly_quota: 1000000, overage: 'bill' } },
    keys: {
      main: { account: 'acct-main', plan: 'big' },
      one: { account: 'acct-one', plan: 'burst1' },
    },
  });
  // A corpus that takes seconds to index, so that "before the corpus is loaded" is a window.
  corpusDir = tempDir('tollgate-start-corpus-');
  corpus = path.join(corpusDir, 'stories.jsonl');
  const g = await runCli(['corpus', 'generate', '--count', '150000', '--seed', '29']);
  assert.equal(g.code, 0, g.stderr);
  fs.writeFileSync(corpus, g.stdout);
});

after(() => {
  cleanup(prepared);
  fs.rmSync(corpusDir, { recursive: true, force: true });
});

// A fresh index each start (the file beside the corpus would make a later start fast).
function freshCorpusArgs() {
  for (const f of fs.readdirSync(corpusDir)) {
    if (f !== 'stories.jsonl') fs.rmSync(path.join(corpusDir, f), { recursive: true, force: true });
  }
  return ['--corpus', corpus];
}

const loaded = (stderr) => /corpus: .*loaded|serving .* stories|stories in \d/i.test(stderr);

test('lifecycle methods are answered while the corpus loads; a tools/call waits for it', async () => {
  const s = new StdioSession(null, prepared.keys.main, {
    args: ['stdio', '--config', prepared.configPath, '--data-dir', prepared.dataDir, ...freshCorpusArgs()],
  });
  try {
    const init = await s.send({ jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'start', version: '1' } } }, { timeoutMs: 60000 });
    assert.equal(init.result?.protocolVersion, '2025-06-18', JSON.stringify(init));
    s.notify({ jsonrpc: '2.0', method: 'notifications/initialized' });
    assert.deepEqual((await s.send({ jsonrpc: '2.0', id: 2, method: 'ping' })).result, {});
    const list = await s.send({ jsonrpc: '2.0', id: 3, method: 'tools/list' });
    assert.equal(list.result.tools.length, 3);
    const discover = await s.send({ jsonrpc: '2.0', id: 4, method: 'server/discover',
      params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } });
    assert.ok(discover.result?.supportedVersions?.includes('2026-07-28'), JSON.stringify(discover));
    assert.ok(!loaded(s.stderr), `the lifecycle answers came before the corpus was loaded; stderr: ${s.stderr}`);
    // get_usage needs no corpus; search_stories waits for it (or, past 5 s, says it is loading).
    const usage = await s.send({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'get_usage', arguments: {} } });
    assert.equal(usage.result?.isError, false, JSON.stringify(usage));
    let found;
    for (let id = 6; id < 40 && !found; id++) {
      const r = await s.send({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'search_stories', arguments: { query: 'the' } } }, { timeoutMs: 60000 });
      const text = JSON.parse(r.result.content[0].text);
      if (r.result.isError) {
        assert.equal(text.code, 'unavailable', JSON.stringify(r));
        assert.match(text.message, /still loading its story corpus/);
        assert.ok(text.retry_after_secs >= 1);
      } else {
        found = text;
      }
    }
    assert.ok(found?.total > 0, 'the search is served once the corpus is loaded');
    assert.equal((await s.close()).code, 0, s.stderr);
  } finally {
    await s.close();
  }
});

test('the AI SDK connects over 2026-07-28 with a burst-1 key while the corpus loads', async () => {
  const transport = new AiStdio({
    command: BIN,
    args: ['stdio', '--config', prepared.configPath, '--data-dir', prepared.dataDir, ...freshCorpusArgs()],
    env: { ...process.env, TOLLGATE_API_KEY: prepared.keys.one },
    stderr: 'ignore',
  });
  const client = await createMCPClient({ transport });
  try {
    // server/discover was answered within the SDK's one-second probe: the stateless revision,
    // and the key's one token spent on it alone.
    assert.equal(client.initializeResult.protocolVersion, '2026-07-28', JSON.stringify(client.initializeResult));
    await new Promise((r) => setTimeout(r, 1100));  // the next token (1 per second)
    const tools = await client.listTools();
    assert.equal(tools.tools.length, 3);
  } finally {
    await client.close();
  }
});
