#!/usr/bin/env node
// Browser benchmark of a large listen's first snapshot from the relay: a real hearth-relay
// holds N documents of about 1 KB (loaded through the npm package by one browser profile);
// then, alternating, a fresh browser profile either listens to the whole collection (timed
// from `Hearth.open` to the first snapshot with `fromCache: false` and N documents) or, the
// baseline, reads the same collection once with `get({ source: 'server' })` (the same bytes
// over the same wire, stored in the same cache, without the listen's bookkeeping). The
// relay's CPU time (user + system, from /proc) is measured around each. One JSON line per
// run on stdout; progress on stderr.
//
//   node scripts/bench-listen.mjs [--docs N] [--runs R] [--timeout-s S]
//
// Needs pkg/ (bash scripts/build-pkg) and hearth-relay (target/release if built, else
// target/debug; or $HEARTH_RELAY_BIN). Exits non-zero on a failed check or the timeout.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, startBrowser } from '../pkg-tests/e2e/harness.mjs';

const root = new URL('../', import.meta.url).pathname;
const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const docs = Number(arg('docs', 10000));
const runs = Number(arg('runs', 3));
const timeoutMs = Number(arg('timeout-s', 600)) * 1000;
const err = (...a) => console.error(...a);

const bin = process.env.HEARTH_RELAY_BIN
  || [join(root, 'target/release/hearth-relay'), join(root, 'target/debug/hearth-relay')].find(existsSync);
if (!bin || !existsSync(join(root, 'pkg/hearth_bg.wasm'))) {
  err('needs pkg/ (bash scripts/build-pkg) and hearth-relay (cargo build --release -p hearth-relay)');
  process.exit(1);
}
setTimeout(() => { err(`bench-listen: timed out after ${timeoutMs / 1000} s`); process.exit(2); }, timeoutMs).unref();

/** CPU seconds (user + system) process `pid` has used. */
function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks
}

const data = mkdtempSync(join(tmpdir(), 'hearth-bench-listen-'));
const relay = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--data', data],
  { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, HEARTH_LOG: 'warn' } });
const url = await new Promise((resolve, reject) => {
  let out = '';
  relay.stdout.on('data', (d) => {
    out += d;
    const m = out.match(/listening on (\S+)/);
    if (m) resolve(`ws://${m[1]}`);
  });
  relay.on('exit', (code) => reject(new Error(`relay exited ${code}`)));
});
const server = await startServer();
const pageUrl = `${server.origin}/pkg-tests/e2e/page.html`;
err(`bench-listen: relay ${bin} at ${url}, ${docs} documents, ${runs} runs of each`);

try {
  const loader = await startBrowser();
  const p = await loader.page(pageUrl);
  const t0 = Date.now();
  await p.evaluate(async ({ url, docs }) => {
    const db = await window.hearth.Hearth.open({ name: 'listen', relay: url });
    const filler = 'x'.repeat(900);
    for (let start = 0; start < docs; start += 500) {
      const b = db.batch();
      for (let i = start; i < Math.min(docs, start + 500); i++) {
        const id = `d${String(i).padStart(6, '0')}`;
        b.set(db.doc(`items/${id}`), { i, group: i % 10, name: `item ${i}`, filler });
      }
      await b.commit();
    }
  }, { url, docs });
  err(`bench-listen: loaded ${docs} documents in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  await loader.stop();

  for (let run = 0; run < runs; run++) {
    for (const kind of ['get', 'listen']) {
      const b = await startBrowser();
      const page = await b.page(pageUrl);
      const cpu0 = cpuSeconds(relay.pid);
      const r = await page.evaluate(async ({ url, docs, kind }) => {
        const t0 = performance.now();
        const db = await window.hearth.Hearth.open({ name: 'listen', relay: url });
        if (kind === 'get') {
          const s = await db.collection('items').get({ source: 'server' });
          return { ms: performance.now() - t0, size: s.size, changes: s.docChanges().length };
        }
        return new Promise((resolve) => {
          const stop = db.collection('items').onSnapshot((s) => {
            if (!s.metadata.fromCache && s.size === docs) {
              const ms = performance.now() - t0;
              const changes = s.docChanges().length;
              stop();
              resolve({ ms, size: s.size, changes });
            }
          });
        });
      }, { url, docs, kind });
      const relayCpu = cpuSeconds(relay.pid) - cpu0;
      if (r.size !== docs) throw new Error(`${kind}: ${r.size} documents, expected ${docs}`);
      console.log(JSON.stringify({ bench: 'first-snapshot', kind, docs, run, ms: Math.round(r.ms),
        relay_cpu_ms: Math.round(relayCpu * 1000), changes: r.changes }));
      await b.stop();
    }
  }
} finally {
  await server.stop();
  relay.kill('SIGTERM');
  await new Promise((r) => { if (relay.exitCode !== null) r(); else relay.on('exit', r); });
  rmSync(data, { recursive: true, force: true });
}
