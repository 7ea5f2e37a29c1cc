// Verifies tollgate passes the official MCP conformance suite (@modelcontextprotocol/conformance
// 0.1.13) scenarios server-initialize, ping, tools-list and dns-rebinding-protection.
//
// The suite sends no API key and has no option to add a header, and tollgate has no key-less
// mode, so the suite talks to a loopback proxy (harness authProxy) that adds
// `Authorization: Bearer KEY` and forwards every other byte unchanged (Host and Origin too, which
// is what dns-rebinding-protection varies).
//
// The suite prints "Total: N passed, N failed" (or "Passed: P/N, F failed" for one scenario); its
// output is captured and parsed here and never reaches ctest's output as is (CI's own summary
// parser would read it as ctest's): failure messages quote it with those lines defused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { start, cleanup, authProxy, tempDir } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'dns-rebinding-protection'];

let server;
let proxy;
let outDir;

before(async () => {
  server = await start({ keys: { main: { account: 'acct-conformance', plan: 'big' } } });
  proxy = await authProxy(server, server.keys.main);
  outDir = tempDir('tollgate-conformance-');
});

after(async () => {
  await proxy?.close();
  await server?.stop();
  cleanup(server);
  if (outDir) fs.rmSync(outDir, { recursive: true, force: true });
});

/** Runs one scenario (bounded); resolves {code, output}. */
function runScenario(scenario, timeoutMs = 60000) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, 'server', '--url', `${proxy.url}/mcp`, '--scenario', scenario,
      '-o', path.join(outDir, scenario)], { cwd: outDir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } });
    let output = '';
    child.stdout.on('data', (d) => { output += d; });
    child.stderr.on('data', (d) => { output += d; });
    const timer = setTimeout(() => {
      try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ }
      reject(new Error(`conformance ${scenario} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, output }); });
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
  });
}

/** The suite's output with its summary line defused, for our own failure messages. */
const defuse = (s) => s.replace(/^(\s*)(Total|Passed):/gm, '$1conformance $2 ->');

for (const scenario of SCENARIOS) {
  test(`conformance: ${scenario}`, async () => {
    const { code, output } = await runScenario(scenario);
    // one scenario prints "Passed: P/N, F failed, W warnings"; several print "Total: P passed, F failed"
    const one = /Passed:\s*(\d+)\/(\d+),\s*(\d+)\s+failed/.exec(output);
    const many = /Total:\s*(\d+)\s+passed,\s*(\d+)\s+failed/.exec(output);
    assert.ok(one || many, `no summary line in the suite's output (exit ${code}):\n${defuse(output)}`);
    const [passed, failed] = one ? [Number(one[1]), Number(one[3])] : [Number(many[1]), Number(many[2])];
    assert.equal(failed, 0, `${scenario}: ${failed} check(s) failed (exit ${code}):\n${defuse(output)}`);
    assert.ok(passed > 0, `${scenario}: nothing passed:\n${defuse(output)}`);
    assert.equal(code, 0, `${scenario}: suite exit code ${code}:\n${defuse(output)}`);
  });
}
