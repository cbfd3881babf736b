// What the browser benchmark drivers share: a read-only server of the repository (the
// npm package's end-to-end tests use it too) and a headless Chromium on a fresh profile
// (Debian's /usr/bin/chromium, or $CHROMIUM).
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname, normalize } from 'node:path';
import { chromium } from 'playwright-core';

export const root = new URL('../../', import.meta.url).pathname;

const types = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css' };

/** Serves the repository read-only on 127.0.0.1, `no-store`. With `isolated` (the benchmarks'
 *  default), COOP/COEP make the pages cross-origin isolated, which gives performance.now()
 *  5 µs resolution instead of 100 µs. The npm package's end-to-end tests serve with it too
 *  (`pkg-tests/e2e/harness.mjs`, not isolated). */
export async function startServer({ isolated = true } = {}) {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname));
    if (path.includes('..')) { res.writeHead(400).end(); return; }
    const file = join(root, path.endsWith('/') ? path + 'index.html' : path);
    try {
      const body = readFileSync(file);
      const isolation = isolated ? { 'cross-origin-opener-policy': 'same-origin',
        'cross-origin-embedder-policy': 'require-corp' } : {};
      res.writeHead(200, { 'content-type': types[extname(file)] || 'application/octet-stream',
        'cache-control': 'no-store', ...isolation });
      res.end(body);
    } catch {
      res.writeHead(404).end('not found');
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  // Browsers keep connections alive: close them, or close() waits for them.
  return { origin: `http://127.0.0.1:${server.address().port}`,
    stop: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }) };
}

/** A new profile directory. */
export function newProfile() {
  return mkdtempSync(join(tmpdir(), 'hearth-bench-chromium-'));
}

/** Headless Chromium on `profile`, with the flags a root container needs. */
export function launch(profile) {
  return chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage'],
  });
}

/** Opens the bench page in `context` and waits until it is ready. */
export async function openPage(context, url, log) {
  const page = await context.newPage();
  page.on('console', (m) => log(`  [page] ${m.text()}`));
  page.on('pageerror', (e) => log('  [page error]', e));
  await page.goto(url);
  await page.waitForFunction(() => window.benchReady === true, null, { timeout: 30000 });
  return page;
}
