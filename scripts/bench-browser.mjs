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
import { rmSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { root, startServer, newProfile, launch, openPage as open } from './lib/bench-page.mjs';

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

const openPage = (url, o) => open(context, url, err, o);

async function main() {
  server = await startServer();
  profile = newProfile();
  context = await launch(profile);
  const url = `${server.origin}/www/bench/`;
  err(`bench-browser: ${url}, profile ${profile}, browser ${context.browser()?.version() ?? '(persistent)'}`);

  // 1–5 in one page.
  const page = await openPage(url);
  const { meta, results } = await page.evaluate((o) => window.bench.run(o), options);
  await page.evaluate(() => window.bench.close());
  await page.close();
  err(`bench-browser: userAgent ${meta.userAgent}; crossOriginIsolated=${meta.crossOriginIsolated}`);

  // 6. Cold start: new pages in the same profile, rotating the three kinds. A first visit
  // loads nothing from the HTTP cache, so the package is downloaded and compiled; a
  // returning page gets it from the cache (the server answers 304, as hearth-relay
  // --static-dir does).
  const samples = { first: [], returning: [], raw: [] };
  const kinds = ['first', 'returning', 'raw'];
  for (let i = 0; i < coldRuns; i++) {
    for (const k of [0, 1, 2]) {
      const which = kinds[(i + k) % 3];
      const p = await openPage(url, { firstVisit: which === 'first' });
      const r = await p.evaluate(([w, o]) => (w === 'raw' ? window.bench.coldRaw(o) : window.bench.coldHearth(o)),
        [which, options]);
      await p.close();
      const same = r.ids.length === meta.finalTop5Ids.length && r.ids.every((x, k) => x === meta.finalTop5Ids[k]);
      if (!same) throw new Error(`cold start (${which}) returned ${JSON.stringify(r.ids)}, expected ${JSON.stringify(meta.finalTop5Ids)}`);
      samples[which].push(r);
      err(`  cold ${which} #${i + 1}: ${r.total.toFixed(1)} ms`);
    }
  }
  // coldMeasurement is pure; run it in a page to share the formatting code.
  const p = await openPage(url);
  for (const [which, name] of [['first', 'cold_start_init_open_first_query'], ['returning', 'cold_start_returning_page']]) {
    results.push(await p.evaluate(([h, r, n]) => window.bench.coldMeasurement(h, r, n), [samples[which], samples.raw, name]));
  }
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
