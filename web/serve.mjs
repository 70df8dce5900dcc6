// serve.mjs - a small static HTTP server for the browser package: the demo
// (/demo/), the build (/dist/) and local GGUF files (/models/, from
// build/models by default), with the cross-origin isolation headers that the
// threaded wasm build needs (SharedArrayBuffer). Loopback only.
//
//   make wasm && node web/serve.mjs [--port 8000] [--models DIR] [--plain]
//   then open http://127.0.0.1:8000/demo/
//
// --plain serves what a plain static host (GitHub Pages, most CDNs) serves:
// no COOP/COEP, so the page gets the single-threaded cores (WebGPU included).
//
// Also imported by tests/web/browser.test.mjs (startServer).

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css', '.ts': 'text/plain; charset=utf-8',
  '.gguf': 'application/octet-stream',
};

const BLANK = '<!doctype html><html><head><meta charset="utf-8"><title>wgllm test</title></head><body></body></html>';

/** Starts the server; resolves to {url, port, close()}. mounts: {'/prefix/': dir};
 * hook(req, res, headers): tests answer a request themselves by returning true;
 * isolate: false serves pages without cross-origin isolation (the single-threaded core). */
export function startServer({ port = 0, host = '127.0.0.1', models = path.join(here, '..', 'build', 'models'), mounts = {}, hook,
  isolate = true } = {}) {
  const table = {
    '/dist/': path.join(here, 'dist'),
    '/demo/': path.join(here, 'demo'),
    '/models/': models,
    ...mounts,
  };
  const server = http.createServer((req, res) => {
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'Cache-Control': 'no-store',
    };
    if (!isolate) { // isolate: false serves a page without cross-origin isolation (the single-threaded core)
      delete headers['Cross-Origin-Opener-Policy'];
      delete headers['Cross-Origin-Embedder-Policy'];
    }
    if (hook && hook(req, res, headers)) return;
    // the path as a file name: refused when it cannot be decoded, holds a NUL
    // (fs throws on one), or names a parent folder (`..`, also encoded: %2e%2e,
    // ..%2f) -- a request never reaches a file outside its mount's folder
    let pathname;
    try { pathname = decodeURIComponent(new URL(req.url, 'http://localhost').pathname); } catch {
      res.writeHead(400, headers); res.end('bad request path'); return;
    }
    if (pathname.includes('\0')) { res.writeHead(400, headers); res.end('bad request path'); return; }
    if (pathname.split(/[\\/]/).includes('..')) { res.writeHead(403, headers); res.end('forbidden'); return; }
    if (pathname === '/' || pathname === '/blank.html') {
      if (pathname === '/') { res.writeHead(302, { ...headers, Location: '/demo/' }); res.end(); return; }
      res.writeHead(200, { ...headers, 'Content-Type': TYPES['.html'] });
      res.end(BLANK);
      return;
    }
    const prefix = Object.keys(table).find((p) => pathname.startsWith(p) || pathname + '/' === p);
    if (!prefix) { res.writeHead(404, headers); res.end('not found'); return; }
    const root = path.resolve(table[prefix]);
    let file = path.join(root, pathname.slice(prefix.length));
    // inside the folder itself, not a sibling that merely starts with its name
    const rel = path.relative(root, file);
    if (rel.startsWith('..') || path.isAbsolute(rel)) { res.writeHead(403, headers); res.end('forbidden'); return; }
    fs.stat(file, (err, st) => {
      if (!err && st.isDirectory()) { file = path.join(file, 'index.html'); st = fs.existsSync(file) ? fs.statSync(file) : null; }
      if (err || !st) { res.writeHead(404, headers); res.end('not found'); return; }
      const type = TYPES[path.extname(file)] || 'application/octet-stream';
      // one byte range (what the browser package reads a model with when it is not stored in OPFS)
      const m = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || '');
      if (m && (m[1] !== '' || m[2] !== '')) {
        let a = m[1] === '' ? Math.max(0, st.size - Number(m[2])) : Number(m[1]);
        let b = m[1] === '' || m[2] === '' ? st.size - 1 : Math.min(Number(m[2]), st.size - 1);
        if (a >= st.size || a > b) {
          res.writeHead(416, { ...headers, 'Content-Range': `bytes */${st.size}` });
          res.end();
          return;
        }
        res.writeHead(206, { ...headers, 'Content-Type': type, 'Accept-Ranges': 'bytes', 'Content-Length': b - a + 1,
                             'Content-Range': `bytes ${a}-${b}/${st.size}` });
        if (req.method === 'HEAD') { res.end(); return; }
        fs.createReadStream(file, { start: a, end: b }).pipe(res);
        return;
      }
      res.writeHead(200, { ...headers, 'Content-Type': type, 'Accept-Ranges': 'bytes', 'Content-Length': st.size });
      if (req.method === 'HEAD') { res.end(); return; }
      fs.createReadStream(file).pipe(res);
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const p = server.address().port;
      resolve({ url: `http://${host}:${p}`, port: p, close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }) });
    });
  });
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (name, def) => { const i = process.argv.indexOf(name); return i > 0 ? process.argv[i + 1] : def; };
  const plain = process.argv.includes('--plain');
  const s = await startServer({ port: Number(arg('--port', 8000)), models: arg('--models', undefined) ?? undefined,
                                isolate: !plain });
  console.log(`wgllm demo: ${s.url}/demo/  (models from /models/, ${plain ? 'no cross-origin isolation, ' : ''}Ctrl-C stops)`);
}
