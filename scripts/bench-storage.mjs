#!/usr/bin/env node
// IndexedDB bytes of the bench's documents (www/bench/, seed 000's instruments) as Hearth,
// the hand-written raw baseline and Dexie store them: for each store, a fresh Chromium
// profile, the documents written in batches of 500 (`window.bench.storageFill`), the browser
// closed, then the profile's IndexedDB directory measured. The directory is measured twice:
// as the writes left it (LevelDB's log included), and after the browser was opened again
// and left for a few seconds (the log turned into compressed tables). Prints one JSON line
// per store, and the ratios against Dexie and raw to stderr.
//
//   node scripts/bench-storage.mjs [--docs N] [--rounds N] [--stores hearth,raw,dexie]
import { readdirSync, statSync, rmSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { root, startServer, newProfile, launch, openPage } from './lib/bench-page.mjs';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}
const docs = Number(arg('docs', 10000));
const rounds = Number(arg('rounds', 1));
const stores = arg('stores', 'hearth,raw,dexie').split(',');
const err = (...a) => console.error(...a);

for (const [what, path] of [['pkg/', 'pkg/hearth_bg.wasm'], ['dexie (npm ci)', 'node_modules/dexie/dist/dexie.mjs']]) {
  if (!existsSync(join(root, path))) { err(`${what} is missing`); process.exit(1); }
}

/** Bytes of every file under the profile's IndexedDB directory, and of the LevelDB logs. */
function idbBytes(profile) {
  const out = { total: 0, logs: 0 };
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) { walk(p); continue; }
      const n = statSync(p).size;
      out.total += n;
      if (e.name.endsWith('.log') && e.name !== 'LOG') out.logs += n;
    }
  };
  const dir = join(profile, 'Default', 'IndexedDB');
  if (existsSync(dir)) walk(dir);
  return out;
}

async function measure(server, kind) {
  const profile = newProfile();
  try {
    const url = `${server.origin}/www/bench/`;
    let context = await launch(profile);
    const page = await openPage(context, url, err);
    const fill = await page.evaluate(([k, o]) => window.bench.storageFill(k, o), [kind, { docs }]);
    await context.close();
    const written = idbBytes(profile);
    // Open the origin's IndexedDB again: LevelDB replays its log into a table.
    context = await launch(profile);
    const again = await openPage(context, url, err);
    await again.evaluate(() => indexedDB.databases());
    await new Promise((r) => setTimeout(r, 5000));
    await context.close();
    const settled = idbBytes(profile);
    return { store: kind, docs, insert_docs_per_s: fill.docsPerSec, estimate: fill.estimate,
      bytes_written: written.total, log_bytes_written: written.logs,
      bytes_settled: settled.total, log_bytes_settled: settled.logs,
      bytes_per_doc_settled: Math.round(settled.total / docs) };
  } finally {
    rmSync(profile, { recursive: true, force: true });
  }
}

const server = await startServer();
const results = [];
try {
  for (let r = 0; r < rounds; r++) {
    for (const kind of r % 2 ? [...stores].reverse() : stores) {
      const m = await measure(server, kind);
      results.push(m);
      console.log(JSON.stringify(m));
    }
  }
} finally {
  await server.stop();
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[(s.length - 1) >> 1]; };
const settled = (k) => median(results.filter((m) => m.store === k).map((m) => m.bytes_settled));
for (const k of stores) {
  const ratios = ['dexie', 'raw'].filter((p) => p !== k && stores.includes(p))
    .map((p) => `${(settled(k) / settled(p)).toFixed(2)}× ${p}`).join(', ');
  err(`${k}: ${settled(k)} bytes settled${ratios ? ` (${ratios})` : ''}`);
}
