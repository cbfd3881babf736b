// The model test's command line (scripts/model-sync runs it): seeds one after another,
// a line per seed, a full report for each failure, and a summary. Exit status 1 if any
// seed failed.
//   node pkg-tests/model/cli.mjs [--seeds 1-50 | --seed N] [--ops 300] [--clients 3] [--tabs 1]
//                                [--skip kind,kind] [--only 0-5,9] [--stop-on-failure]
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runSeed, report } from './runner.mjs';
import { WEIGHTS } from './ops.mjs';

function parse(argv) {
  const o = { seeds: [1, 10], ops: 300, clients: 3, tabs: 1, skip: [], only: null, stop: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--seed') { const n = Number(value()); o.seeds = [n, n]; }
    else if (a === '--seeds') {
      const m = value().match(/^(\d+)(?:-(\d+))?$/);
      if (!m) throw new Error('--seeds takes N or N-M');
      o.seeds = [Number(m[1]), Number(m[2] ?? m[1])];
    } else if (a === '--ops') o.ops = Number(value());
    else if (a === '--clients') o.clients = Number(value());
    else if (a === '--tabs') o.tabs = Number(value());
    else if (a === '--skip') o.skip = value().split(',').filter(Boolean);
    else if (a === '--only') {
      o.only = value().split(',').flatMap((part) => {
        const [lo, hi = lo] = part.split('-').map(Number);
        return Array.from({ length: hi - lo + 1 }, (_, k) => lo + k);
      });
    } else if (a === '--stop-on-failure') o.stop = true;
    else if (a === '--help' || a === '-h') {
      console.log(`usage: bash scripts/model-sync [--seeds 1-50 | --seed N] [--ops 300] [--clients 3] [--tabs 1] [--skip names] [--only ops] [--stop-on-failure]
  --clients: browser profiles; --tabs: tabs of each (one origin: they share one engine)
  --skip: operation kinds, or listeners, to leave out, comma-separated: ${Object.keys(WEIGHTS).join(', ')},
          or a query name of pkg-tests/model/schema.mjs, counters, txn, or a document listener path
  --only: run only these ops of the seed's schedule (indices and ranges: 0-5,9), to reduce a failure`);
      process.exit(0);
    } else throw new Error(`unknown argument ${a} (see --help)`);
  }
  if (!(o.clients >= 2) || !(o.tabs >= 1) || !(o.ops >= 1) || o.clients * o.tabs < 3) throw new Error('--clients must be at least 2, --tabs at least 1 (3 tabs in all) and --ops at least 1');
  return o;
}

const o = parse(process.argv.slice(2));
const results = [];
for (let seed = o.seeds[0]; seed <= o.seeds[1]; seed++) {
  const r = await runSeed({ seed, ops: o.ops, clients: o.clients, tabs: o.tabs, skip: o.skip, only: o.only, print: () => {} });
  results.push(r);
  const phases = Object.entries(r.phases).map(([k, v]) => `${k} ${(v / 1000).toFixed(1)}`).join(', ');
  const caches = r.notes.map((n) => n.match(/cache holds (\d+) bytes/)?.[1]).filter(Boolean);
  console.log(`seed ${seed}: ${r.ok ? 'ok' : `FAILED (${r.failures.length} failures)`} in ${(r.ms / 1000).toFixed(1)} s (${phases})${caches.length ? `; leaders' caches ${caches.join(', ')} bytes` : ''}`);
  if (!r.ok) {
    // The whole run (every failure, the full op log) for diagnosis; the report is its head.
    const file = join(tmpdir(), `hearth-model-seed-${seed}.json`);
    writeFileSync(file, JSON.stringify(r, null, 1));
    console.log(`${report(r)}\nfull record: ${file}`);
  }
  if (!r.ok && o.stop) break;
}
const failed = results.filter((r) => !r.ok);
const total = results.reduce((s, r) => s + r.ms, 0);
console.log(`summary: ${results.length - failed.length}/${results.length} seeds passed, ${o.ops} ops and ${o.clients} profiles of ${o.tabs} tab(s) each, ${(total / 1000).toFixed(0)} s in all`);
if (failed.length) {
  console.log(`failed seeds: ${failed.map((r) => r.seed).join(' ')}`);
  for (const r of failed) console.log(`  seed ${r.seed}: ${r.failures[0]}\n    replay: ${r.replay}`);
  process.exitCode = 1;
}
