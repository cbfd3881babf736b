// What the browser benchmark drivers share: a read-only server of the repository (the
// npm package's end-to-end tests use it too) and a headless Chromium on a fresh profile
// (Debian's /usr/bin/chromium, or $CHROMIUM).
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname, normalize } from 'node:path';
import { chromium } from 'playwright-core';

export const root = new URL('../../', import.meta.url).pathname;

const types = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css' };

/** Serves the repository read-only on 127.0.0.1 as `hearth-relay --static-dir` serves an
 *  app: each file with a validator (`etag`, from its size and modification time) and
 *  `cache-control: no-cache`, so a page asks again on every load and an unchanged file is
 *  answered `304` from the browser's cache. With `isolated` (the benchmarks' default),
 *  COOP/COEP make the pages cross-origin isolated, which gives performance.now() 5 µs
 *  resolution instead of 100 µs. The npm package's end-to-end tests serve with it too
 *  (`pkg-tests/e2e/harness.mjs`, not isolated). */
export async function startServer({ isolated = true } = {}) {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname));
    if (path.includes('..')) { res.writeHead(400).end(); return; }
    const file = join(root, path.endsWith('/') ? path + 'index.html' : path);
    try {
      const stat = statSync(file);
      const tag = `"${stat.size.toString(16)}-${Math.floor(stat.mtimeMs).toString(16)}"`;
      const isolation = isolated ? { 'cross-origin-opener-policy': 'same-origin',
        'cross-origin-embedder-policy': 'require-corp' } : {};
      const headers = { etag: tag, 'cache-control': 'no-cache', ...isolation };
      if (req.headers['if-none-match'] === tag) {
        res.writeHead(304, headers).end();
        return;
      }
      const body = readFileSync(file);
      res.writeHead(200, { 'content-type': types[extname(file)] || 'application/octet-stream',
        ...headers });
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

/** Opens the bench page in `context` and waits until it is ready. With `firstVisit`, the
 *  page loads nothing from the HTTP cache (as DevTools' "Disable cache"), as on a first
 *  visit: what it fetches is downloaded and compiled. */
export async function openPage(context, url, log, { firstVisit = false } = {}) {
  const page = await context.newPage();
  if (firstVisit) {
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  }
  page.on('console', (m) => log(`  [page] ${m.text()}`));
  page.on('pageerror', (e) => log('  [page error]', e));
  await page.goto(url);
  await page.waitForFunction(() => window.benchReady === true, null, { timeout: 30000 });
  return page;
}
