// Serves the dashboard straight from ui/web (edit, reload, no rebuild) and
// passes every other path to a running warden:
//   node ui/dev_server.mjs --warden http://127.0.0.1:8080 [--listen 127.0.0.1:5173]
// Page routes and /ui/<path> map as in src/ui/ui_assets.cpp.
import http from 'node:http';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml', '.json': 'application/json', '.png': 'image/png' };

function fileFor(pathname) {
  if (pathname === '/' || pathname === '/stats' || pathname === '/models' || /^\/models\/.+/.test(pathname)) {
    return path.join(here, 'web', 'index.html');
  }
  const m = pathname.match(/^\/ui\/((?:[A-Za-z0-9_.-]+\/)*[A-Za-z0-9_.-]+)$/);
  if (!m || m[1].split('/').some((s) => s === '.' || s === '..')) return null;
  if (m[1].startsWith('vendor/')) return path.join(here, 'node_modules', 'uplot', 'dist', m[1].slice(7));
  return path.join(here, 'web', m[1]);
}

export function startDevServer({ warden, listen = '127.0.0.1:0' }) {
  const target = new URL(warden);
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    const file = req.method === 'GET' || req.method === 'HEAD' ? fileFor(url.pathname) : null;
    if (file) {
      try {
        const body = await readFile(file);
        res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-cache' });
        res.end(req.method === 'HEAD' ? undefined : body);
      } catch {
        res.writeHead(404).end('not found');
      }
      return;
    }
    const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url,
      headers: { ...req.headers, host: target.host } }, (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
    up.on('error', (e) => { res.writeHead(502).end(String(e)); });
    req.pipe(up);
  });
  const [host, port] = listen.split(':');
  return new Promise((resolve) => server.listen(Number(port), host, () => {
    resolve({ url: `http://${host}:${server.address().port}`, close: () => new Promise((r) => server.close(r)) });
  }));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name, dflt) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : dflt; };
  const s = await startDevServer({ warden: arg('--warden', 'http://127.0.0.1:8080'), listen: arg('--listen', '127.0.0.1:5173') });
  console.log(`dashboard on ${s.url}`);
}
