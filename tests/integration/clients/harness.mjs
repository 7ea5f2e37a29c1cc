// Test harness for the tollgate integration tests: temp data dir + config, keys made with the real
// CLI, the real server spawned and always ended by its PID. Every wait is bounded.
//
// The binary comes from env TOLLGATE_BIN (ctest sets it to $<TARGET_FILE:tollgate>).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';

export const BIN = process.env.TOLLGATE_BIN;

/** Fails fast with a clear message when the binary is not available. */
export function requireBin() {
  if (!BIN || !fs.existsSync(BIN)) {
    throw new Error(`TOLLGATE_BIN is not set or does not exist (${BIN ?? 'unset'}); build the tollgate target first`);
  }
  return BIN;
}

// Every process we start, so that even a crashing test run never leaves one behind.
const live = new Set();
process.on('exit', () => {
  for (const child of live) {
    try { process.kill(child.pid, 'SIGKILL'); } catch { /* already gone */ }
  }
});

/** A fresh temporary directory (removed by cleanup()). */
export function tempDir(prefix = 'tollgate-it-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Plans used by the tests unless a test passes its own. Rates are high so that only the tests
 * about rate limiting ever see a 429. */
export const DEFAULT_PLANS = {
  big: { rate_per_sec: 1000000, burst: 1000000, monthly_quota: 100000000, overage: 'bill' },
};

/** Renders the TOML config of design §10 from plain objects. */
export function renderConfig({ plans = DEFAULT_PLANS, quota = { reconcile_ms: 100, fsync_ms: 50 }, extra = '' } = {}) {
  const lines = [];
  if (quota) {
    lines.push('[quota]');
    for (const [k, v] of Object.entries(quota)) lines.push(`${k} = ${JSON.stringify(v)}`);
    lines.push('');
  }
  for (const [name, p] of Object.entries(plans)) {
    lines.push(`[plans.${name}]`);
    lines.push(`rate_per_sec = ${p.rate_per_sec}`);
    lines.push(`burst = ${p.burst}`);
    lines.push(`monthly_quota = ${p.monthly_quota}`);
    lines.push(`overage = "${p.overage}"`);
    lines.push('');
  }
  if (extra) lines.push(extra);
  return lines.join('\n');
}

/**
 * Runs the binary to completion (bounded). Returns {code, signal, stdout, stderr}. `unset` names
 * environment variables to remove.
 * On timeout the process is SIGKILLed and the promise rejects.
 */
export function runCli(args, { env = {}, unset = [], input, timeoutMs = 90000 } = {}) {
  requireBin();
  const fullEnv = { ...process.env, ...env };
  for (const name of unset) delete fullEnv[name];
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, { env: fullEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    live.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ }
      reject(new Error(`tollgate ${args.join(' ')} timed out after ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    let stdinError = null;
    // A process may exit before it reads its stdin (a refused start does): the pipe then breaks
    // under our write. That EPIPE is the process's business, told by its exit code and stderr;
    // any other write error is the harness's and fails the call.
    child.stdin.on('error', (e) => { if (e.code !== 'EPIPE') stdinError = e; });
    child.on('error', (e) => { clearTimeout(timer); live.delete(child); reject(e); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      if (stdinError) reject(stdinError);
      else resolve({ code, signal, stdout, stderr });
    });
    if (input !== undefined) child.stdin.end(input);
    else child.stdin.end();
  });
}

/** The key id of `account`'s key (for `keys revoke`): taken from an `id` line that `keys create`
 * printed after the key if there is one, otherwise from the `keys list` row naming `account`
 * (the tests keep accounts unique per key). */
export async function keyIdOf(dataDir, account, createOutput) {
  const m = /\bcreated\s+([A-Za-z0-9_\-]+)\s+for account/i.exec(createOutput ?? '') ??
    /\bid\b\s*[:=]?\s*([A-Za-z0-9_\-]+)/i.exec(createOutput ?? '');
  if (m) return m[1];
  const r = await runCli(['keys', 'list', '--data-dir', dataDir]);
  if (r.code !== 0) throw new Error(`keys list exited ${r.code}: ${r.stderr}`);
  const row = r.stdout.split('\n').find((l) => l.split(/[\s,|]+/).includes(account));
  if (!row) throw new Error(`keys list shows no key for account ${account}: ${r.stdout}`);
  return row.trim().split(/[\s,|]+/)[0];
}

/** Waits (bounded) for a line matching `re` on a stream; resolves with the match. */
function waitForLine(stream, re, child, timeoutMs, what, collected) {
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (d) => {
      buf += d;
      const m = re.exec(buf);
      if (m) { cleanup(); resolve(m); }
    };
    const onExit = (code, signal) => {
      cleanup();
      reject(new Error(`tollgate exited (code ${code}, signal ${signal}) before printing ${what}; stderr: ${collected()}`));
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`no ${what} within ${timeoutMs} ms; stderr: ${collected()}`));
    }, timeoutMs);
    function cleanup() {
      clearTimeout(timer);
      stream.off('data', onData);
      child.off('exit', onExit);
    }
    stream.on('data', onData);
    child.on('exit', onExit);
  });
}

/**
 * A running `tollgate serve`. Use start() to make one.
 *   port, url (http://127.0.0.1:PORT), mcpUrl, pid, dataDir, configPath, keys (name -> key string),
 *   demoKey (if printed), stderr() (all stderr so far), stop() (SIGTERM, then SIGKILL after a
 *   timeout; resolves {code, signal}), kill9(), reload() (SIGHUP).
 */
export class Server {
  constructor(child, { port, dataDir, configPath, keys, keyOutputs, errText }) {
    this.child = child;
    this.pid = child.pid;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.mcpUrl = `${this.url}/mcp`;
    this.dataDir = dataDir;
    this.configPath = configPath;
    this.keys = keys;
    this.keyOutputs = keyOutputs;
    this._errText = errText;
    this._ending = false;  // set by stop()/kill9(): any other exit is a crash
    this.exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
      else child.once('exit', (code, signal) => resolve({ code, signal }));
    });
    this.exited.then(({ code, signal }) => {
      if (this._ending) return;
      // A crash would otherwise only show as ECONNREFUSED in every later test: say it once, with
      // the server's own last words (a sanitizer report, an assertion).
      setTimeout(() => {
        process.stderr.write(`\n*** tollgate serve (pid ${this.pid}) exited on its own: code ${code}, signal ${signal}; ` +
          `its stderr (last 8 KB):\n${this._errText().slice(-8192)}\n***\n`);
      }, 100);
    });
  }

  stderr() { return this._errText(); }

  /** The key from a `demo key: KEY` line on stdout (first serve on an empty data dir), if any. */
  get demoKey() { return /demo key:\s*(\S+)/.exec(this.stdoutText?.() ?? '')?.[1]; }

  /** SIGHUP: the server re-reads the config file's plans, and keys and accounts. */
  reload() { try { process.kill(this.pid, 'SIGHUP'); } catch { /* gone */ } }

  /** SIGTERM; SIGKILL if still running after timeoutMs. */
  async stop(timeoutMs = 5000) {
    this._ending = true;
    if (this.child.exitCode === null && this.child.signalCode === null) {
      try { process.kill(this.pid, 'SIGTERM'); } catch { /* gone */ }
      const t = setTimeout(() => { try { process.kill(this.pid, 'SIGKILL'); } catch { /* gone */ } }, timeoutMs);
      const r = await this.exited;
      clearTimeout(t);
      live.delete(this.child);
      return r;
    }
    live.delete(this.child);
    return this.exited;
  }

  /** kill -9, as a crash. */
  async kill9() {
    this._ending = true;
    try { process.kill(this.pid, 'SIGKILL'); } catch { /* gone */ }
    const r = await this.exited;
    live.delete(this.child);
    return r;
  }

  /** Id of the key named `name` (for `keys revoke`). */
  keyId(name) { return keyIdOf(this.dataDir, this.keyAccounts[name], this.keyOutputs[name]); }
}

/**
 * Starts a server.
 *   keys: { name: {account, plan} } created with the CLI before start (unless reusing dataDir
 *         with keys already made: pass `existingKeys`).
 *   plans/quota/extraConfig: see renderConfig. threads: --threads.
 *   dataDir: reuse (e.g. restart after a crash); otherwise a fresh temp dir.
 */
/** Runs an admin command with `--config FILE` (plans live in the config, so `keys create` needs it
 * to know a plan); if that fails, once more in the bare design §10 form. */
async function cliWithConfigFallback(args, configPath) {
  if (!configPath) return runCli(args);
  const r = await runCli([...args, '--config', configPath]);
  if (r.code === 0) return r;
  const r2 = await runCli(args);
  return r2.code === 0 ? r2 : r;
}

/**
 * A temp data dir with its config written and keys created by the CLI (no server started).
 * Returns {dataDir, configPath, keys (name -> key), keyOutputs, keyAccounts}.
 */
export async function prepare({ keys = {}, plans = DEFAULT_PLANS, quota, extraConfig = '', dataDir } = {}) {
  requireBin();
  const dir = dataDir ?? tempDir();
  const configPath = path.join(path.dirname(dir), `${path.basename(dir)}.toml`);
  fs.writeFileSync(configPath, renderConfig({ plans, quota, extra: extraConfig }));
  const made = {};
  const keyOutputs = {};
  const keyAccounts = {};
  for (const [name, spec] of Object.entries(keys)) {
    const r = await cliWithConfigFallback(['keys', 'create', '--account', spec.account, '--plan', spec.plan,
      '--data-dir', dir], configPath);
    if (r.code !== 0) throw new Error(`keys create (${spec.account}/${spec.plan}) exited ${r.code}: ${r.stderr}`);
    const key = r.stdout.split('\n')[0].trim();
    if (!key || /\s/.test(key)) throw new Error(`keys create printed no key on its first line: ${JSON.stringify(r.stdout)}`);
    made[name] = key;
    keyOutputs[name] = r.stdout.split('\n').slice(1).join('\n') + '\n' + r.stderr;
    keyAccounts[name] = spec.account;
  }
  return { dataDir: dir, configPath, keys: made, keyOutputs, keyAccounts };
}

/**
 * Starts a server.
 *   keys: { name: {account, plan} } created with the CLI before start.
 *   plans/quota/extraConfig: see renderConfig. threads: --threads.
 *   prepared: reuse the result of prepare() or of an earlier server (restart after a crash);
 *   then `keys` must be empty.
 */
export async function start({
  keys = {}, plans = DEFAULT_PLANS, quota, extraConfig = '', threads = 2, prepared,
  startTimeoutMs = 90000, extraArgs = [], corpusArgs = ['--sample'], listen = '127.0.0.1:0',
  launcher = [],
} = {}) {
  // corpusArgs: what to serve (e.g. ['--corpus', FILE], or [] for the binary's default);
  // listen: HOST:PORT (a fixed port to come back on after a restart); launcher: a command that
  // execs the server with its arguments (e.g. ['prlimit', '--nofile=256:256', '--']), so the
  // pid stays the server's.
  const prep = prepared ?? await prepare({ keys, plans, quota, extraConfig });
  const { dataDir: dir, configPath } = prep;
  const made = prep.keys;
  const keyOutputs = prep.keyOutputs;
  const keyAccounts = prep.keyAccounts;
  const args = ['serve', '--config', configPath, '--listen', listen, '--threads', String(threads),
    '--data-dir', dir, ...corpusArgs, ...extraArgs];
  const child = launcher.length > 0
    ? spawn(launcher[0], [...launcher.slice(1), BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let err = '';
  let out = '';
  child.stderr.setEncoding('utf8');
  child.stdout.setEncoding('utf8');
  child.stderr.on('data', (d) => { err += d; if (err.length > 1 << 20) err = err.slice(-(1 << 19)); });
  child.stdout.on('data', (d) => { out += d; });
  try {
    const m = await waitForLine(child.stderr, /listening on http:\/\/127\.0\.0\.1:(\d+)/, child, startTimeoutMs,
      'the "listening on" line', () => err);
    const port = Number(m[1]);
    const s = new Server(child, { port, dataDir: dir, configPath, keys: made, keyOutputs, errText: () => err });
    s.keyAccounts = keyAccounts;
    s.prepared = prep;
    s.stdoutText = () => out;
    s.startOptions = { threads, startTimeoutMs, extraArgs, corpusArgs, launcher };
    return s;
  } catch (e) {
    try { process.kill(child.pid, 'SIGKILL'); } catch { /* gone */ }
    live.delete(child);
    throw e;
  }
}

/**
 * Starts `server` again (after stop() or kill9()) with the same data dir, config, arguments and
 * port; resolves the new Server. A bind refused while the old socket lingers is retried until
 * timeoutMs.
 */
export async function restart(server, { timeoutMs = 15000 } = {}) {
  if (server.child.exitCode === null && server.child.signalCode === null) {
    throw new Error(`restart: pid ${server.pid} is still running; stop() or kill9() it first`);
  }
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await start({ ...server.startOptions, prepared: server.prepared, listen: `127.0.0.1:${server.port}` });
    } catch (e) {
      if (Date.now() > end) throw new Error(`restart on port ${server.port} failed for ${timeoutMs} ms: ${e.message}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** Runs `tollgate ADMIN-ARGS --data-dir DIR`, then SIGHUPs the server. */
export async function admin(server, args) {
  const r = await cliWithConfigFallback([...args, '--data-dir', server.dataDir], server.configPath);
  if (r.code !== 0) throw new Error(`tollgate ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  server.reload();
  return r;
}

/** Polls `probe` (async, returns truthy when done) every 50 ms for at most timeoutMs. */
export async function eventually(probe, timeoutMs = 3000, what = 'condition') {
  const end = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await probe();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`${what} not reached within ${timeoutMs} ms (last: ${last?.message ?? JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * SIGSTOP to `pid`, resolved once every one of its threads is stopped. kill() returns before the
 * process stops: the kernel hands a stop signal to one thread, and a thread in an uninterruptible
 * wait (an fdatasync on a loaded disk) takes it only when that wait ends. Until then the others
 * run on and may answer. /proc/PID/task/TID/stat shows each thread's state ('T' when stopped).
 */
export async function stopProcess(pid, timeoutMs = 10000) {
  process.kill(pid, 'SIGSTOP');
  const allStopped = () => {
    const tids = fs.readdirSync(`/proc/${pid}/task`);
    return tids.length > 0 && tids.every((tid) => {
      try {
        const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        return /^[Tt]$/.test(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
      } catch {
        return true;  // the thread has exited
      }
    });
  };
  const end = Date.now() + timeoutMs;
  while (!allStopped()) {
    if (Date.now() > end) throw new Error(`pid ${pid} not stopped ${timeoutMs} ms after SIGSTOP`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Removes a temp dir and its config file. */
export function cleanup(server) {
  if (!server) return;
  try { fs.rmSync(server.dataDir, { recursive: true, force: true }); } catch { /* ignore */ }
  try { fs.rmSync(server.configPath, { force: true }); } catch { /* ignore */ }
}

// ------------------------------------------------------------------------------ raw HTTP helpers

/**
 * One HTTP request with node:http (exact control over headers; nothing added but Host and
 * Content-Length). Resolves {status, headers, body}. Bounded by timeoutMs.
 */
export function request(url, { method = 'GET', headers = {}, body, agent, timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers, agent },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${url} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.end(body);
    else req.end();
  });
}

/** Headers of a well-formed MCP POST carrying `key` (Bearer unless keyHeader = 'x-api-key'). */
export function mcpHeaders(key, { keyHeader = 'bearer', version, extra = {} } = {}) {
  const h = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
  if (key !== undefined) {
    if (keyHeader === 'bearer') h.Authorization = `Bearer ${key}`;
    else h['X-API-Key'] = key;
  }
  if (version) h['MCP-Protocol-Version'] = version;
  return { ...h, ...extra };
}

/** POSTs one JSON-RPC message (object, or raw string) to /mcp. */
export function mcpPost(server, message, { key, keyHeader, version, extra, agent } = {}) {
  const body = typeof message === 'string' ? message : JSON.stringify(message);
  return request(server.mcpUrl, { method: 'POST', headers: mcpHeaders(key, { keyHeader, version, extra }), body, agent });
}

/** GET a REST path with the key as Bearer (or X-API-Key). */
export function restGet(server, pathAndQuery, { key, keyHeader = 'bearer', agent } = {}) {
  const headers = {};
  if (key !== undefined) {
    if (keyHeader === 'bearer') headers.Authorization = `Bearer ${key}`;
    else headers['X-API-Key'] = key;
  }
  return request(server.url + pathAndQuery, { headers, agent });
}

/** tools/call message. */
export function toolCall(id, name, args = {}) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } };
}

/** Queries tried in order to find stories in whatever corpus --sample ships. */
export const PROBE_QUERIES = ['the', 'a', 'e', 'show', 'rust', 'story', 'linux', 'ask', 'i', 'o'];

/** A query that finds at least one story over REST, and the id of its first story. */
export async function findStory(server, key) {
  for (const q of PROBE_QUERIES) {
    const r = await restGet(server, `/v1/stories?q=${encodeURIComponent(q)}`, { key });
    if (r.status !== 200) throw new Error(`GET /v1/stories?q=${q} -> ${r.status} ${r.body}`);
    const j = JSON.parse(r.body);
    if (j.stories && j.stories.length > 0) return { query: q, id: String(j.stories[0].id), body: r.body };
  }
  throw new Error(`none of ${PROBE_QUERIES.join(',')} finds a story in the sample corpus`);
}

/** Reads the used-units figure the server reports for `key`: the X-Quota-Used header of
 * GET /v1/usage (design §2: on every authenticated response). Also returns the body. */
export async function usageOf(server, key) {
  const r = await restGet(server, '/v1/usage', { key });
  if (r.status !== 200) throw new Error(`GET /v1/usage -> ${r.status} ${r.body}`);
  const used = Number(r.headers['x-quota-used']);
  return { used, body: r.body, headers: r.headers };
}

/** The text of the single content block of a tools/call result, parsed. */
export function parseToolText(result) {
  if (!Array.isArray(result.content) || result.content.length !== 1 || result.content[0].type !== 'text') {
    throw new Error(`expected exactly one text block, got ${JSON.stringify(result.content)}`);
  }
  return JSON.parse(result.content[0].text);
}

/**
 * A loopback HTTP proxy in front of `server` that adds `Authorization: Bearer KEY` to requests
 * that carry no key, and forwards everything else unchanged (Host and Origin included). For
 * clients that cannot send headers (the conformance suite). Resolves {url, close()}.
 */
export function authProxy(server, key) {
  return new Promise((resolve, reject) => {
    const agent = new http.Agent({ keepAlive: true });
    const proxy = http.createServer((req, res) => {
      const headers = { ...req.headers };
      if (!headers.authorization && !headers['x-api-key']) headers.authorization = `Bearer ${key}`;
      const up = http.request({ host: '127.0.0.1', port: server.port, path: req.url, method: req.method, headers, agent },
        (ur) => {
          res.writeHead(ur.statusCode, ur.headers);
          ur.pipe(res);
        });
      up.setTimeout(15000, () => up.destroy(new Error('upstream timeout')));
      up.on('error', (e) => {
        if (!res.headersSent) res.writeHead(502, { 'Content-Type': 'text/plain' });
        res.end(`proxy: ${e.message}`);
      });
      req.pipe(up);
    });
    proxy.on('error', reject);
    proxy.listen(0, '127.0.0.1', () => {
      const { port } = proxy.address();
      resolve({
        url: `http://127.0.0.1:${port}`,
        close: () => new Promise((r) => { agent.destroy(); proxy.closeAllConnections?.(); proxy.close(() => r()); }),
      });
    });
  });
}

// What `tollgate stdio` logs once its corpus is indexed. A tool call made before that waits up to
// 5 s and then answers "still loading" (by design); on a loaded machine the sample can take longer
// than that to index, so a test that wants the call's real answer waits for this line first.
const CORPUS_LINE = /corpus: \d+ stories/;

/** Resolves when `stderr` (a `tollgate stdio` child's, e.g. an SDK StdioClientTransport's with
 * stderr: 'pipe', attached before connect) says its corpus is loaded. */
export function corpusLoaded(stderr, timeoutMs = 90000) {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`no corpus line on stderr in ${timeoutMs} ms: ${seen}`)), timeoutMs);
    stderr.setEncoding('utf8');
    stderr.on('data', (d) => {
      seen += d;
      if (CORPUS_LINE.test(seen)) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

/**
 * A raw `tollgate stdio` session: newline-delimited JSON-RPC. send(msg) resolves with the response
 * carrying msg's id (bounded); close() ends stdin and waits for the exit (SIGKILL after a timeout).
 */
export class StdioSession {
  constructor(prepared, key, { extraArgs = [], args } = {}) {
    // args: the whole command line instead (e.g. `stdio --remote URL`; prepared is then unused)
    requireBin();
    this.child = spawn(BIN, args ?? ['stdio', '--config', prepared.configPath, '--data-dir', prepared.dataDir, '--sample', ...extraArgs],
      { env: { ...process.env, TOLLGATE_API_KEY: key }, stdio: ['pipe', 'pipe', 'pipe'] });
    live.add(this.child);
    this.pending = new Map();
    this.lines = [];  // every stdout line, parsed
    this.stderr = '';
    let buf = '';
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (!line.trim()) continue;
        let msg;
        try { msg = JSON.parse(line); } catch { msg = { unparsable: line }; }
        this.lines.push(msg);
        const key = JSON.stringify(msg.id ?? null);
        const p = this.pending.get(key);
        if (p) { this.pending.delete(key); p(msg); }
      }
    });
    this.child.stderr.on('data', (d) => { this.stderr += d; });
    // Writes to a session whose process has gone break the pipe; the waiting send() then fails
    // on the exit below with the exit code and stderr, which say more than the EPIPE.
    this.child.stdin.on('error', (e) => { if (e.code !== 'EPIPE') throw e; });
    // 'close' comes after stdout has drained, so an answer written just before the exit is
    // delivered first.
    this.failOnExit = new Set();
    this.closed = null;
    this.child.on('close', (code, signal) => {
      this.closed = { code, signal };
      for (const fail of this.failOnExit) fail(code, signal);
      this.failOnExit.clear();
    });
    this.exited = new Promise((resolve) => this.child.on('exit', (code, signal) => {
      live.delete(this.child);
      resolve({ code, signal });
    }));
  }

  /** Resolves once the process's stderr says its corpus is loaded (see corpusLoaded). */
  async loaded(timeoutMs = 90000) {
    const until = Date.now() + timeoutMs;
    while (!CORPUS_LINE.test(this.stderr)) {
      if (this.closed || Date.now() > until) {
        throw new Error(`tollgate stdio did not load its corpus (${this.closed ? 'exited' : 'timed out'}); stderr: ${this.stderr}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Writes one message (object or raw line) and awaits the response with `id` (null for parse
   * errors); `ids` accepts the first response carrying any of several ids. */
  send(msg, { id, ids, timeoutMs = 90000 } = {}) {
    const line = typeof msg === 'string' ? msg : JSON.stringify(msg);
    const wanted = (ids ?? [id !== undefined ? id : (typeof msg === 'object' ? msg.id ?? null : null)]).map((x) => JSON.stringify(x));
    return new Promise((resolve, reject) => {
      const gone = (code, signal) => {
        clearTimeout(timer);
        for (const w of wanted) this.pending.delete(w);
        reject(new Error(`tollgate stdio exited (code ${code}, signal ${signal}) before answering id ` +
          `${wanted.join(' or ')}; stderr: ${this.stderr}`));
      };
      const done = (m) => {
        clearTimeout(timer);
        this.failOnExit.delete(gone);
        for (const w of wanted) this.pending.delete(w);
        resolve(m);
      };
      const timer = setTimeout(() => {
        this.failOnExit.delete(gone);
        for (const w of wanted) this.pending.delete(w);
        reject(new Error(`no stdio response with id ${wanted.join(' or ')} within ${timeoutMs} ms; stdout so far: ` +
          `${JSON.stringify(this.lines.slice(-3))}; stderr: ${this.stderr}`));
      }, timeoutMs);
      for (const w of wanted) this.pending.set(w, done);
      if (this.closed) { gone(this.closed.code, this.closed.signal); return; }
      this.failOnExit.add(gone);
      this.child.stdin.write(line + '\n');
    });
  }

  /** Writes a line that expects no response (a notification). */
  notify(msg) { this.child.stdin.write((typeof msg === 'string' ? msg : JSON.stringify(msg)) + '\n'); }

  async close(timeoutMs = 5000) {
    this.child.stdin.end();
    const t = setTimeout(() => { try { process.kill(this.child.pid, 'SIGKILL'); } catch { /* gone */ } }, timeoutMs);
    const r = await this.exited;
    clearTimeout(t);
    return r;
  }
}

/** A keep-alive agent for load tests: up to `sockets` connections. Destroy it when done. */
export function loadAgent(sockets) {
  return new http.Agent({ keepAlive: true, maxSockets: sockets, maxFreeSockets: sockets });
}
