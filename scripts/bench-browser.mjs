#!/usr/bin/env node
// Headless driver of the browser benchmark page (www/bench/): serves the repository on
// 127.0.0.1:0, opens the page in a fresh headless Chromium profile, runs measurements 1–5
// through page.evaluate, then measures cold start (6) in new pages of the same profile, and
// prints one JSON line per measurement to stdout (progress and checks go to stderr).
//
//   node scripts/bench-browser.mjs [--docs N] [--cold-runs N] [--timeout-s S] [--keep-profile]
//
// Needs the built package in pkg/ (bash scripts/build-pkg), playwright-core (npm install)
// and /usr/bin/chromium (or $CHROMIUM). Exits non-zero on a failed check or the timeout.
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname, normalize } from 'node:path';
import { chromium } from 'playwright-core';

const root = new URL('../', import.meta.url).pathname;

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}
const options = { docs: Number(arg('docs', 10000)) };
const coldRuns = Number(arg('cold-runs', 5));
const timeoutMs = Number(arg('timeout-s', 900)) * 1000;
const keepProfile = process.argv.includes('--keep-profile');

const err = (...a) => console.error(...a);

if (!existsSync(join(root, 'pkg/hearth_bg.wasm'))) {
  err('pkg/ is missing: run `bash scripts/build-pkg` first');
  process.exit(1);
}

const types = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css' };

/** Serves the repository read-only. COOP/COEP make the page cross-origin isolated, which
 *  gives performance.now() 5 µs resolution instead of 100 µs. */
async function startServer() {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname));
    if (path.includes('..')) { res.writeHead(400).end(); return; }
    const file = join(root, path.endsWith('/') ? path + 'index.html' : path);
    try {
      const body = readFileSync(file);
      res.writeHead(200, { 'content-type': types[extname(file)] || 'application/octet-stream',
        'cache-control': 'no-store',
        'cross-origin-opener-policy': 'same-origin',
        'cross-origin-embedder-policy': 'require-corp' });
      res.end(body);
    } catch {
      res.writeHead(404).end('not found');
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { origin: `http://127.0.0.1:${server.address().port}`,
    stop: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }) };
}

let server;
let context;
let profile;

async function cleanup() {
  try { await context?.close(); } catch { /* already gone */ }
  try { await server?.stop(); } catch { /* already closed */ }
  if (profile && !keepProfile) rmSync(profile, { recursive: true, force: true });
}

const watchdog = setTimeout(async () => {
  err(`bench-browser: timed out after ${timeoutMs / 1000} s`);
  await Promise.race([cleanup(), new Promise((r) => setTimeout(r, 10000))]);
  process.exit(2);
}, timeoutMs);

async function openPage(url) {
  const page = await context.newPage();
  page.on('console', (m) => err(`  [page] ${m.text()}`));
  page.on('pageerror', (e) => err('  [page error]', e));
  await page.goto(url);
  await page.waitForFunction(() => window.benchReady === true, null, { timeout: 30000 });
  return page;
}

async function main() {
  server = await startServer();
  profile = mkdtempSync(join(tmpdir(), 'hearth-bench-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage'],
  });
  const url = `${server.origin}/www/bench/`;
  err(`bench-browser: ${url}, profile ${profile}, browser ${context.browser()?.version() ?? '(persistent)'}`);

  // 1–5 in one page.
  const page = await openPage(url);
  const { meta, results } = await page.evaluate((o) => window.bench.run(o), options);
  await page.evaluate(() => window.bench.close());
  await page.close();
  err(`bench-browser: userAgent ${meta.userAgent}; crossOriginIsolated=${meta.crossOriginIsolated}`);

  // 6. Cold start: new pages in the same profile, alternating Hearth and the baseline.
  const hs = [];
  const rs = [];
  for (let i = 0; i < coldRuns; i++) {
    for (const which of i % 2 ? ['raw', 'hearth'] : ['hearth', 'raw']) {
      const p = await openPage(url);
      const r = await p.evaluate(([w, o]) => (w === 'hearth' ? window.bench.coldHearth(o) : window.bench.coldRaw(o)),
        [which, options]);
      await p.close();
      const same = r.ids.length === meta.finalTop5Ids.length && r.ids.every((x, k) => x === meta.finalTop5Ids[k]);
      if (!same) throw new Error(`cold start (${which}) returned ${JSON.stringify(r.ids)}, expected ${JSON.stringify(meta.finalTop5Ids)}`);
      (which === 'hearth' ? hs : rs).push(r);
      err(`  cold ${which} #${i + 1}: ${r.total.toFixed(1)} ms`);
    }
  }
  // coldMeasurement is pure; run it in a page to share the formatting code.
  const p = await openPage(url);
  results.push(await p.evaluate(([h, r]) => window.bench.coldMeasurement(h, r), [hs, rs]));
  await p.close();

  for (const m of results) console.log(JSON.stringify({ ...m, docs: options.docs }));
}

main().then(async () => {
  clearTimeout(watchdog);
  await cleanup();
  process.exit(0);
}, async (e) => {
  err('bench-browser: FAILED:', e);
  clearTimeout(watchdog);
  await cleanup();
  process.exit(1);
});
