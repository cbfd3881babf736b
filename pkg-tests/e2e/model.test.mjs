// The CI entry of the randomized model-based sync test (pkg-tests/model/): a few seeds with
// a modest number of operations, each run through 2-3 headless Chromium profiles (of 1-2
// tabs) against a real hearth-relay with offline spells, reloads, tab crashes, browser kills
// and relay crashes, checked after every
// snapshot and at quiescence. A failure prints the seed, the failing checks, the op log's
// tail and the replay command. Longer runs: bash scripts/model-sync. Run:
// node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runSeed, report } from '../model/runner.mjs';

// [seed, profiles, tabs per profile]: the tabs of a profile share one engine.
const RUNS = [[1, 3, 1], [2, 3, 1], [3, 3, 1], [4, 2, 2], [5, 2, 2]];
const OPS = 120;
for (const [seed, clients, tabs] of RUNS) {
  test(`model-based sync: seed ${seed}, ${OPS} ops, ${clients} profiles of ${tabs} tab${tabs > 1 ? 's' : ''}`, { timeout: 240000 }, async (t) => {
    const r = await runSeed({ seed, ops: OPS, clients, tabs, print: (l) => t.diagnostic(l) });
    t.diagnostic(`seed ${seed}: ${(r.ms / 1000).toFixed(1)} s`);
    for (const n of r.notes) t.diagnostic(n);
    assert.ok(r.ok, report(r));
  });
}
