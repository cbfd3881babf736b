// The CI entry of the randomized model-based sync test (pkg-tests/model/): a few seeds with
// a modest number of operations, each run through 3 headless Chromium profiles against a
// real hearth-relay with offline spells, reloads and relay crashes, checked after every
// snapshot and at quiescence. A failure prints the seed, the failing checks, the op log's
// tail and the replay command. Longer runs: bash scripts/model-sync. Run:
// node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runSeed, report } from '../model/runner.mjs';

const SEEDS = [1, 2, 3];
const OPS = 120;
for (const seed of SEEDS) {
  test(`model-based sync: seed ${seed}, ${OPS} ops, 3 clients`, { timeout: 240000 }, async (t) => {
    const r = await runSeed({ seed, ops: OPS, clients: 3, print: (l) => t.diagnostic(l) });
    t.diagnostic(`seed ${seed}: ${(r.ms / 1000).toFixed(1)} s`);
    for (const n of r.notes) t.diagnostic(n);
    assert.ok(r.ok, report(r));
  });
}
