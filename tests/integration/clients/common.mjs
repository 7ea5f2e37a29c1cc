// Assertions shared by the client tests (v1 over HTTP, v2 over HTTP, v1 over stdio): what a real
// client must see from tollgate, whatever the transport.
import assert from 'node:assert/strict';
import { restGet, findStory, parseToolText } from './harness.mjs';

export const TOOL_NAMES = ['get_story', 'get_usage', 'search_stories'];

/** tools/list as a client sees it: exactly the three tools, each described for a model, each with
 * an object inputSchema, none with an outputSchema (design §3). */
export function checkToolList(tools) {
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOL_NAMES);
  for (const t of tools) {
    assert.equal(typeof t.description, 'string', `${t.name} has a description`);
    assert.ok(t.description.length >= 20, `${t.name}: description written for a model: ${t.description}`);
    assert.equal(t.inputSchema?.type, 'object', `${t.name}: inputSchema is an object schema`);
    assert.equal(t.outputSchema, undefined, `${t.name} must not declare an outputSchema`);
  }
  const search = tools.find((t) => t.name === 'search_stories');
  assert.ok(search.inputSchema.properties?.query, 'search_stories has a query argument');
  assert.ok((search.inputSchema.required ?? []).includes('query'), 'query is required');
  const get = tools.find((t) => t.name === 'get_story');
  assert.ok((get.inputSchema.required ?? []).includes('id'), 'get_story requires id');
}

/** A success result: one text block, isError false, text parses once (no double encoding). */
export function successText(result) {
  assert.notEqual(result.isError, true, `expected success, got ${JSON.stringify(result)}`);
  assert.equal(result.content?.length, 1, `one content block: ${JSON.stringify(result.content)}`);
  assert.equal(result.content[0].type, 'text');
  const text = result.content[0].text;
  const parsed = JSON.parse(text);
  assert.equal(typeof parsed, 'object', 'the text is a JSON object, not a double-encoded string');
  return text;
}

/** A tool error: isError true, one text block whose JSON has `code` and a sentence `message`. */
export function toolError(result, code) {
  assert.equal(result.isError, true, `expected a tool error, got ${JSON.stringify(result)}`);
  const err = parseToolText(result);
  assert.equal(err.code, code, `tool error code: ${JSON.stringify(err)}`);
  assert.equal(typeof err.message, 'string');
  assert.ok(err.message.length > 10, `message is a sentence: ${err.message}`);
  return err;
}

/**
 * Calls each tool through `call(name, args)` (returns the CallToolResult) and checks each success
 * text equals the REST body for the same request byte for byte (`server`/`key` answer the REST
 * side; for get_usage only when the tools run in that same server: usageSameProcess).
 */
export async function checkEachToolAgainstRest(server, key, call, { usageSameProcess = true } = {}) {
  const { query, id } = await findStory(server, key);

  const search = successText(await call('search_stories', { query }));
  const rest = await restGet(server, `/v1/stories?q=${encodeURIComponent(query)}`, { key });
  assert.equal(rest.status, 200);
  assert.equal(search, rest.body, 'search_stories text == GET /v1/stories body, byte for byte');
  const parsed = JSON.parse(search);
  assert.equal(typeof parsed.total, 'number');
  assert.ok(Array.isArray(parsed.stories) && parsed.stories.length > 0);
  for (const f of ['id', 'title', 'url', 'by', 'time', 'score', 'comments', 'tags']) {
    assert.ok(f in parsed.stories[0], `story has ${f}: ${JSON.stringify(parsed.stories[0])}`);
  }

  const story = successText(await call('get_story', { id }));
  const restStory = await restGet(server, `/v1/stories/${encodeURIComponent(id)}`, { key });
  assert.equal(restStory.status, 200);
  assert.equal(story, restStory.body, 'get_story text == GET /v1/stories/{id} body, byte for byte');
  assert.equal(String(JSON.parse(story).id), id);
  assert.ok('text' in JSON.parse(story), 'get_story payload carries the story text');

  if (!usageSameProcess) {
    // The caller's tools run in another process (stdio) with its own data dir and key: the
    // payloads must have the same shape as GET /v1/usage, not the same figures.
    const usage = JSON.parse(successText(await call('get_usage', {})));
    const restUsage = JSON.parse((await restGet(server, '/v1/usage', { key })).body);
    assert.deepEqual(Object.keys(usage).sort(), Object.keys(restUsage).sort(), 'get_usage has the shape of GET /v1/usage');
    return { query, id };
  }
  // get_usage is never billed, but its rate-state figures may move between two requests: accept
  // equality with the REST body taken just before or just after. Cores see each other's billing
  // only after a reconcile (design §6: figures lag by at most one interval, 100 ms in these
  // tests), so let one pass first.
  let ok = false;
  let last;
  for (let attempt = 0; attempt < 3 && !ok; attempt++) {
    await new Promise((r) => setTimeout(r, 250));
    const before = await restGet(server, '/v1/usage', { key });
    const usage = successText(await call('get_usage', {}));
    const after = await restGet(server, '/v1/usage', { key });
    ok = usage === before.body || usage === after.body;
    last = { usage, before: before.body, after: after.body };
  }
  assert.ok(ok, `get_usage text == GET /v1/usage body: ${JSON.stringify(last)}`);
  return { query, id };
}

/** Checks that `data` of a -32602 error names `argument`. */
export function namesArgument(data, argument) {
  const s = typeof data === 'string' ? data : JSON.stringify(data);
  assert.ok(s !== undefined && s.includes(argument), `error data names "${argument}": ${s}`);
}
