// Plain Node `http` peer for perf/: answers every request (any method, any path) with one
// fixed body, after reading the request body. The floor for "a Node server that does nothing".
//
//   node plain-http.mjs --port 9002 [--host 127.0.0.1] [--body-file F] [--content-type T]
import http from 'node:http';
import fs from 'node:fs';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const port = Number(arg('port', '9002'));
const host = arg('host', '127.0.0.1');
const bodyFile = arg('body-file', '');
const contentType = arg('content-type', 'application/json');
const body = bodyFile ? fs.readFileSync(bodyFile) : Buffer.from('{"status":"ok"}');

const server = http.createServer((req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    res.writeHead(200, { 'Content-Type': contentType, 'Content-Length': body.length });
    res.end(body);
  });
});
server.keepAliveTimeout = 300_000;
server.listen(port, host, () => console.log(`plain-http listening on ${host}:${port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
process.on('SIGINT', () => server.close(() => process.exit(0)));
