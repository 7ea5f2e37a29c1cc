// MCP peer for perf/: the official MCP TypeScript SDK (@modelcontextprotocol/sdk) serving the
// same `search_stories` tool as tollgate over Streamable HTTP, stateless, JSON responses (no
// SSE), behind an API-key check and a per-key monthly quota kept in a Map. The tool returns
// a fixed payload, so what is measured is the SDK's own per-request cost plus Node's HTTP.
// Stateless mode follows the SDK's documented pattern: a fresh McpServer and transport per
// request (a shared one is not safe to reuse across concurrent stateless requests).
//
//   node sdk-server.mjs --port 9003 [--host 127.0.0.1] [--keys k1,k2] [--quota N]
//                       [--payload-file F]
// Errors follow tollgate's model: no/unknown key -> 401; quota used up -> tool error
// `quota_exceeded` (isError: true, JSON text block).
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const here = path.dirname(fileURLToPath(import.meta.url));
const port = Number(arg('port', '9003'));
const host = arg('host', '127.0.0.1');
const keys = new Set(arg('keys', 'tg_perf_demo_key').split(',').filter(Boolean));
const quota = Number(arg('quota', '1000000000'));
const payload = fs.readFileSync(arg('payload-file', path.join(here, 'payload.json')), 'utf8').trim();
const used = new Map();

function keyOf(req) {
  const auth = req.headers['authorization'];
  if (typeof auth === 'string' && auth.startsWith('Bearer ')) return auth.slice(7).trim();
  const x = req.headers['x-api-key'];
  return typeof x === 'string' ? x.trim() : '';
}

function newServer(key) {
  const server = new McpServer({ name: 'sdk-peer', version: '0.1.0' });
  server.registerTool(
    'search_stories',
    {
      description: 'Search stories by full-text query. Returns {"total":N,"stories":[...]}.',
      inputSchema: {
        query: z.string().min(1).max(500).describe('Words to search for'),
        limit: z.number().int().min(1).max(50).optional().describe('Results to return (default 10)'),
      },
    },
    async () => {
      const n = used.get(key) ?? 0;
      if (n >= quota) {
        const text = JSON.stringify({
          code: 'quota_exceeded',
          message: 'Monthly quota exceeded; this key stops at its quota.',
          quota_limit: quota, quota_used: n, quota_remaining: 0,
        });
        return { isError: true, content: [{ type: 'text', text }] };
      }
      used.set(key, n + 1);
      return { isError: false, content: [{ type: 'text', text: payload }] };
    },
  );
  return server;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

const httpServer = http.createServer(async (req, res) => {
  const url = req.url ?? '/';
  if (url !== '/mcp') {
    res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"code":"not_found"}');
    return;
  }
  if (req.method !== 'POST') {
    res.writeHead(405, { Allow: 'POST' }).end();
    return;
  }
  const key = keyOf(req);
  if (!keys.has(key)) {
    await readBody(req).catch(() => '');
    res.writeHead(401, {
      'Content-Type': 'application/json',
      'WWW-Authenticate': 'Bearer realm="sdk-peer"',
    }).end('{"code":"invalid_key","message":"Missing or unknown API key."}');
    return;
  }
  let body;
  try {
    body = JSON.parse(await readBody(req));
  } catch {
    res.writeHead(400, { 'Content-Type': 'application/json' }).end(
      '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}');
    return;
  }
  const server = newServer(key);
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  res.on('close', () => {
    transport.close();
    server.close();
  });
  try {
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  } catch (e) {
    if (!res.headersSent) {
      res.writeHead(500, { 'Content-Type': 'application/json' }).end(
        '{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error"}}');
    }
  }
});
httpServer.keepAliveTimeout = 300_000;
httpServer.listen(port, host, () => console.log(`sdk-server listening on ${host}:${port}`));
process.on('SIGTERM', () => httpServer.close(() => process.exit(0)));
process.on('SIGINT', () => httpServer.close(() => process.exit(0)));
