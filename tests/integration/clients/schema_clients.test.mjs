// Verifies what clients that enforce the tools' JSON Schema do with tollgate's tools (issue 29
// items 4 and 5): LangChain's MCP adapters (@langchain/mcp-adapters), which validate a call's
// arguments against the tool's inputSchema before sending it, call search_stories with
// `since`/`until` as the unix seconds the description promises; the schema's type and its
// description agree for every argument; and an integer argument written as an integral JSON
// number (3.0, as Python clients and some models send it) is served as 3.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MultiServerMCPClient } from '@langchain/mcp-adapters';
import { start, cleanup, mcpPost, restGet } from './harness.mjs';

let server;

before(async () => {
  server = await start({ keys: { main: { account: 'acct-schema', plan: 'big' } } });
});

after(async () => {
  await server?.stop();
  cleanup(server);
});

/** The text of a LangChain tool result (a string, or content blocks). */
function textOf(out) {
  if (typeof out === 'string') return out;
  const blocks = Array.isArray(out) ? out : out?.content ?? [out];
  const b = blocks.find((x) => x?.type === 'text') ?? blocks[0];
  return typeof b === 'string' ? b : b?.text;
}

test('LangChain validates against the inputSchema and calls search_stories with integer since/until', async () => {
  const client = new MultiServerMCPClient({
    mcpServers: {
      tollgate: {
        transport: 'http',
        url: server.mcpUrl,
        headers: { Authorization: `Bearer ${server.keys.main}` },
      },
    },
    useStandardContentBlocks: true,
  });
  try {
    const tools = await client.getTools();
    const search = tools.find((t) => t.name.endsWith('search_stories'));
    assert.ok(search, `search_stories among ${tools.map((t) => t.name)}`);
    const since = 1600000000;
    const until = 4102444800;
    const out = await search.invoke({ query: 'the', since, until, limit: 3 });
    const payload = JSON.parse(textOf(out));
    assert.ok(payload.total > 0, textOf(out));
    // The same search over REST, which reads unix seconds the same way.
    const rest = await restGet(server, `/v1/stories?q=the&since=${since}&until=${until}&limit=3`, { key: server.keys.main });
    assert.equal(rest.status, 200, rest.body);
    assert.deepEqual(payload, JSON.parse(rest.body));
    for (const s of payload.stories) assert.ok(s.time >= since, JSON.stringify(s));
    // What the schema refuses is refused before it is sent (so the check can fail).
    await assert.rejects(search.invoke({ query: 'the', since: 'yesterday' }));
  } finally {
    await client.close();
  }
});

test('every argument: one JSON type, and a description that says the same', async () => {
  const r = await mcpPost(server, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { key: server.keys.main });
  const tools = JSON.parse(r.body).result.tools;
  const search = tools.find((t) => t.name === 'search_stories');
  for (const name of ['since', 'until']) {
    const p = search.inputSchema.properties[name];
    assert.equal(p.type, 'integer', `${name}: ${JSON.stringify(p)}`);
    assert.match(p.description, /unix seconds/, `${name}: ${p.description}`);
    assert.doesNotMatch(p.description, /RFC 3339|date-time|"\d{4}-/, `${name} describes only what its type allows: ${p.description}`);
    assert.equal(p.minimum, 0);
  }
  for (const t of tools) {
    for (const [name, p] of Object.entries(t.inputSchema.properties ?? {})) {
      assert.equal(typeof p.type, 'string', `${t.name}.${name} has one type`);
    }
  }
});

test('an integral number for an integer argument (limit: 3.0) is served as 3; 2.5 is refused', async () => {
  const key = server.keys.main;
  const body = (limit) => `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_stories","arguments":{"query":"the","limit":${limit}}}}`;
  const three = await mcpPost(server, body('3'), { key });
  const threeDotZero = await mcpPost(server, body('3.0'), { key });
  assert.equal(threeDotZero.status, 200, threeDotZero.body);
  const res = JSON.parse(threeDotZero.body).result;
  assert.equal(res?.isError, false, threeDotZero.body);
  assert.equal(JSON.parse(res.content[0].text).stories.length, 3);
  assert.equal(res.content[0].text, JSON.parse(three.body).result.content[0].text);
  const half = JSON.parse((await mcpPost(server, body('2.5'), { key })).body);
  assert.equal(half.error?.code, -32602);
  assert.equal(half.error.data.argument, 'limit');
});
