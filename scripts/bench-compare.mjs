#!/usr/bin/env node
// The runner behind scripts/bench-compare (which builds both trees first): runs each
// benchmark for REV's build and the working tree's, alternating (REV first in the first
// round, the working tree first in the second, so that a drift of the machine falls on both),
// prints a table of every figure with the ratio working tree / REV, and writes it to --out
// (markdown) and every raw measurement to --out's .jsonl.
import { spawn } from 'node:child_process';
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}
const parts = arg('parts', 'both');
const rev = arg('rev');
const out = arg('out');
const trees = {
  base: { label: rev, tree: resolve(arg('base-tree')), bin: resolve(arg('base-bin')) },
  new: { label: 'working tree', tree: resolve(arg('new-tree')), bin: resolve(arg('new-bin')) },
};
const ROUNDS = Number(process.env.HEARTH_COMPARE_ROUNDS ?? 2);
const YCSB_QPS = (process.env.HEARTH_COMPARE_QPS ?? '20000,40000,60000,80000').split(',');

/** Runs `cmd args`, echoing stderr; gives the JSON lines it printed on stdout. */
function jsonLines(cmd, args, cwd) {
  return new Promise((ok, fail) => {
    const p = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    p.stdout.on('data', (b) => { text += b; });
    p.stderr.on('data', (b) => process.stderr.write(b));
    p.on('error', fail);
    p.on('exit', (code) => {
      if (code !== 0) { fail(new Error(`${cmd} ${args.join(' ')}: exit ${code}`)); return; }
      ok(text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)));
    });
  });
}

const bench = (t, args) => jsonLines(join(t.bin, 'hearth-bench'),
  ['--spawn', '--relay-bin', join(t.bin, 'hearth-relay'), ...args], t.tree);

/** Each benchmark: how to run it for a tree, and the figures of its measurements as
 *  `[name, value, higherIsBetter]`. */
const relayBenches = [
  {
    run: (t) => bench(t, ['ycsb', '--workload', 'b', '--records', '10000', '--clients', '16',
      '--seconds', '5', '--warmup', '2', ...YCSB_QPS.flatMap((q) => ['--target-qps', q])]),
    // The load phase's line has no target rate: not a figure.
    figures: (m) => (m.params?.target_qps === undefined ? [] : [
      [`YCSB B at ${m.params.target_qps} offered: ops/s`, m.throughput, true],
      [`YCSB B at ${m.params.target_qps} offered: read p99 ms`, m.read_ms?.p99, false],
      [`YCSB B at ${m.params.target_qps} offered: update p99 ms`, m.update_ms?.p99, false],
    ]),
  },
  {
    run: (t) => bench(t, ['fanout', '--listeners', '2000', '--writes', '20', '--interval-ms', '100']),
    figures: (m) => [
      [`fan-out to ${m.params?.listeners ?? 2000} listeners: all delivered p50 ms`, m.all_delivered_ms?.p50, false],
      [`fan-out to ${m.params?.listeners ?? 2000} listeners: all delivered p99 ms`, m.all_delivered_ms?.p99, false],
    ],
  },
  {
    run: (t) => bench(t, ['hot', '--clients', '32', '--seconds', '5', '--no-baseline']),
    figures: (m) => [
      ['hot counter, 32 clients: increments/s', m.throughput, true],
      ['hot counter, 32 clients: lost', m.lost, false],
    ],
  },
];

const browserBench = {
  run: (t) => jsonLines('node', [join(t.tree, 'scripts/bench-browser.mjs'), '--docs', '10000', '--cold-runs', '3'], t.tree),
  figures: (m) => [
    [`browser ${m.measurement} (${m.unit})`, m.hearth, /\/s/.test(m.unit)],
    [`browser ${m.measurement}: raw IndexedDB, same page (${m.unit})`, m.idb, /\/s/.test(m.unit)],
    [`browser ${m.measurement}: Dexie, same page (${m.unit})`, m.dexie, /\/s/.test(m.unit)],
  ],
};

const benches = [...(parts === 'browser' ? [] : relayBenches), ...(parts === 'relay' ? [] : [browserBench])];
/** figure name -> { base: [values], new: [values], higher } */
const figures = new Map();
const raw = [];
for (let round = 0; round < ROUNDS; round++) {
  const order = round % 2 === 0 ? ['base', 'new'] : ['new', 'base'];
  for (const b of benches) {
    for (const side of order) {
      const t = trees[side];
      console.error(`bench-compare: round ${round + 1}, ${t.label}`);
      for (const m of await b.run(t)) {
        raw.push({ side, rev: side === 'base' ? rev : 'working tree', round, ...m });
        for (const [name, value, higher] of b.figures(m)) {
          if (typeof value !== 'number') continue;
          if (!figures.has(name)) figures.set(name, { base: [], new: [], higher });
          figures.get(name)[side].push(value);
        }
      }
    }
  }
}

const fmt = (xs) => xs.map((x) => (Math.abs(x) >= 100 ? Math.round(x) : Number(x.toFixed(2)))).join(' / ');
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const lines = [
  `# bench-compare: working tree against ${rev}`,
  '',
  `${new Date().toISOString()}, ${ROUNDS} rounds alternating (each cell: round 1 / round 2 ...). Ratio: working tree / ${rev} of the means; "better" says which way the figure should go.`,
  '',
  `| figure | ${rev} | working tree | ratio | better |`,
  '|---|---|---|---|---|',
];
for (const [name, f] of figures) {
  if (!f.base.length || !f.new.length) continue;
  const ratio = mean(f.base) === 0 ? '—' : (mean(f.new) / mean(f.base)).toFixed(2);
  lines.push(`| ${name} | ${fmt(f.base)} | ${fmt(f.new)} | ${ratio} | ${f.higher ? 'higher' : 'lower'} |`);
}
const table = lines.join('\n');
console.log(table);
mkdirSync(dirname(resolve(out)), { recursive: true });
writeFileSync(out, `${table}\n`);
writeFileSync(out.replace(/\.md$/, '.jsonl'), raw.map((m) => JSON.stringify(m)).join('\n') + '\n');
console.error(`bench-compare: ${out} and ${out.replace(/\.md$/, '.jsonl')}`);
