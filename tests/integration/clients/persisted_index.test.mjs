// Verifies the persisted index end to end: the first `serve --corpus F` builds the index,
// writes it beside F and serves from it; a second start maps it (says so) and answers every
// request the same; a corrupted index is rebuilt, never served; `tollgate index build` writes
// the file a start then maps, and its --help and errors behave as the other commands'.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { start, restart, cleanup, runCli, restGet, tempDir, BIN } from './harness.mjs';

let dir;
let corpus;
let server;

const QUERIES = ['the', 'rust linux', '"of the"', 'show the a', 'story&sort=date&offset=40',
  'the&since=1600000000&until=1650000000&limit=50'];

async function answers(s) {
  const key = s.keys.main;
  const out = [];
  for (const q of QUERIES) {
    const [text, rest] = q.split(/&(.*)/s);
    const r = await restGet(s, `/v1/stories?q=${encodeURIComponent(text)}${rest ? `&${rest}` : ''}`, { key });
    assert.equal(r.status, 200, r.body);
    out.push(r.body);
  }
  const first = JSON.parse(out[0]).stories[0];
  const story = await restGet(s, `/v1/stories/${encodeURIComponent(first.id)}`, { key });
  assert.equal(story.status, 200, story.body);
  out.push(story.body);
  return out;
}

before(async () => {
  dir = tempDir('tollgate-index-it-');
  corpus = path.join(dir, 'stories.jsonl');
  const g = await runCli(['corpus', 'generate', '--count', '4000', '--seed', '11']);
  assert.equal(g.code, 0, g.stderr);
  fs.writeFileSync(corpus, g.stdout);
});

after(async () => {
  await server?.stop();
  if (server) cleanup(server);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a second start maps the index the first wrote, and answers the same', async () => {
  const index = `${corpus}.tollgate-index`;
  server = await start({ threads: 1, keys: { main: { account: 'a', plan: 'big' } }, corpusArgs: ['--corpus', corpus] });
  assert.match(server.stderr(), new RegExp(`index: wrote ${index.replace(/[.]/g, '\\.')}`), server.stderr());
  // and serves from it, as the second start will
  assert.match(server.stderr(), new RegExp(`index: serving from ${index.replace(/[.]/g, '\\.')} `), server.stderr());
  assert.ok(fs.existsSync(index));
  const built = await answers(server);
  assert.ok(JSON.parse(built[0]).total > 100, 'the queries match');
  assert.equal((await server.stop()).code, 0);

  server = await restart(server);
  assert.match(server.stderr(), /index: mapped /, server.stderr());
  assert.doesNotMatch(server.stderr(), /index: wrote /);
  assert.deepEqual(await answers(server), built);
  assert.equal((await server.stop()).code, 0);

  // a flipped byte in the middle of the file: noted, rebuilt, rewritten, same answers
  const bytes = fs.readFileSync(index);
  bytes[Math.floor(bytes.length / 2)] ^= 0x01;
  fs.writeFileSync(index, bytes);
  server = await restart(server);
  assert.match(server.stderr(), /index: index .* not used: corrupt .*; rebuilding/, server.stderr());
  assert.match(server.stderr(), /index: wrote /);
  assert.deepEqual(await answers(server), built);
  assert.equal((await server.stop()).code, 0);
  server = await restart(server);
  assert.match(server.stderr(), /index: mapped /, server.stderr());
});

test('tollgate index build writes the file serve maps; bad usage exits 2, a missing corpus 1', async () => {
  const index = `${corpus}.tollgate-index`;
  fs.rmSync(index, { force: true });
  const b = await runCli(['index', 'build', '--corpus', corpus]);
  assert.equal(b.code, 0, b.stderr);
  assert.match(b.stderr, /wrote .*stories\.jsonl\.tollgate-index \(4000 stories, 0 skipped, 4 shards\)/);
  // the file's bytes per story by part
  assert.match(b.stderr, /tollgate index: \d+(\.\d)? [KM]B; per story: stories \d+ B, postings \d+ B, positions \d+ B, other \d+ B\n/);
  const other = path.join(dir, 'elsewhere.idx');
  const o = await runCli(['index', 'build', '--corpus', corpus, '--out', other, '--shards', '2']);
  assert.equal(o.code, 0, o.stderr);
  assert.ok(fs.statSync(other).size > 0);
  assert.ok(!fs.readdirSync(dir).some((f) => f.includes('.tmp.')), 'no temporary file left');

  await server?.stop();
  server = await restart(server);
  assert.match(server.stderr(), /index: mapped /, server.stderr());
  assert.match(server.stderr(), /index: mapped .* \(\d+(\.\d)? [KM]B; per story: stories \d+ B, postings \d+ B/);
  assert.doesNotMatch(server.stderr(), /rebuilding/);

  const help = await runCli(['index', 'build', '--help']);
  assert.equal(help.code, 0);
  for (const flag of ['--corpus', '--out', '--shards', '--help']) assert.ok(help.stdout.includes(flag), flag);
  const bad = await runCli(['index', 'build', '--corpus', corpus, '--nope']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /unknown option "--nope"/);
  const none = await runCli(['index', 'build']);
  assert.equal(none.code, 2);
  const missing = await runCli(['index', 'build', '--corpus', path.join(dir, 'missing.jsonl')]);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /cannot open/);
});

test('index build off a terminal prints sparse progress lines, 100% once, and one final line', async () => {
  // A corpus big enough that the build outlasts the meter's first second, its stderr a pipe:
  // plain lines (no redraws), each share of the work at most once, never a repeated 100%
  // (the index is still being built after the last story is parsed), and a final line.
  const big = path.join(dir, 'big.jsonl');
  const fd = fs.openSync(big, 'w');
  const g = spawnSync(BIN, ['corpus', 'generate', '--count', '100000', '--seed', '5'],
    { stdio: ['ignore', fd, 'pipe'], timeout: 120000 });
  fs.closeSync(fd);
  assert.equal(g.status, 0, String(g.stderr));
  const t0 = Date.now();
  const b = await runCli(['index', 'build', '--corpus', big, '--out', path.join(dir, 'big.idx')]);
  const ms = Date.now() - t0;
  assert.equal(b.code, 0, b.stderr);
  assert.ok(!b.stderr.includes('\r'), 'no redraws off a terminal');
  const lines = b.stderr.split('\n').filter((l) => l.startsWith('tollgate: indexing '));
  if (ms >= 1500) assert.ok(lines.length >= 2, `a ${ms} ms build shows progress:\n${b.stderr}`);
  assert.ok(lines.length <= 12, b.stderr);
  assert.ok(lines.filter((l) => l.includes('100%')).length <= 1, b.stderr);
  if (lines.length > 0) {
    assert.match(lines.at(-1), /: 100\.0k stories, [\d.]+k?\/s, done in /, b.stderr);
    assert.equal(lines.filter((l) => l.includes('done in')).length, 1, b.stderr);
    const shares = lines.slice(0, -1).map((l) => Number(l.match(/, (\d+)%/)?.[1]));
    for (let i = 1; i < shares.length; ++i) assert.ok(shares[i] > shares[i - 1], b.stderr);
  }
  fs.rmSync(big, { force: true });
  fs.rmSync(path.join(dir, 'big.idx'), { force: true });
});
