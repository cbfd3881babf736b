// Browser clients (the npm package, two Chromium profiles) on two relays over one
// PostgreSQL database (scripts/pg-server starts a server of the test's own): each sees the
// other's writes live, a batch arrives whole, and every listener's docChanges() replay
// checks out (tracker.js). Run: node --test pkg-tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, chmodSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { root, startRelay, startServer, startBrowser, installTracker, assertTrackersClean, freePort } from './harness.mjs';

const env = {};


before(async () => {
  env.dir = mkdtempSync(join(tmpdir(), 'hearth-e2e-pg-'));
  chmodSync(env.dir, 0o755);
  const script = join(root, 'scripts/pg-server');
  env.pg = join(env.dir, 'server');
  const url = execFileSync(script, ['start', env.pg, String(await freePort()), String(process.pid)])
    .toString().trim();
  env.relays = [await startRelay(['--postgres', url]), await startRelay(['--postgres', url])];
  env.server = await startServer();
  env.browsers = [await startBrowser(), await startBrowser()];
});

after(async () => {
  for (const b of env.browsers ?? []) await b.stop();
  await env.server?.stop();
  for (const r of env.relays ?? []) await r.stop();
  try { execFileSync(join(root, 'scripts/pg-server'), ['stop', env.pg]); } catch { /* gone */ }
  rmSync(env.dir, { recursive: true, force: true });
});

/** Page `i`: browser `i`, database `shared` on relay `i`, tracking `items` by rank. With
 * metadata changes: when another relay's write arrives while this page's own write is pending,
 * the acknowledgement changes only metadata, which raises no snapshot otherwise (as in
 * Firestore), and the page's last confirmed result would never be seen. */
async function client(i) {
  const p = await env.browsers[i].page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  await installTracker(p);
  await p.evaluate(async (url) => {
    window.db = await window.hearth.Hearth.open({ name: 'shared', relay: url });
    window.seen = [];
    window.all = [];
    window.t = window.track(window.db.collection('items').orderBy('rank'), { includeMetadataChanges: true }, (snap) => {
      const ids = snap.docs.map((d) => d.id);
      window.all.push({ ids, pending: snap.metadata.hasPendingWrites, cache: snap.metadata.fromCache });
      if (!snap.metadata.hasPendingWrites) window.seen.push(ids);
    });
  }, env.relays[i].url);
  return p;
}

/** Waits until page `p`'s last confirmed snapshot of `items` is `ids`. */
async function waitFor(p, ids, what) {
  await p.waitForFunction((ids) => JSON.stringify(window.seen.at(-1)) === JSON.stringify(ids),
    ids, { timeout: 15000 }).catch(async () => {
    const all = await p.evaluate(() => window.all);
    assert.fail(`${what}: expected ${JSON.stringify(ids)}, every snapshot: ${JSON.stringify(all)}`);
  });
}

test('clients on two relays see each other\'s writes live, batches whole', { timeout: 120000 }, async () => {
  const a = await client(0);
  const b = await client(1);
  await a.evaluate(() => window.db.collection('items').doc('a').set({ rank: 1 }));
  await waitFor(b, ['a'], 'relay 2 sees the write made through relay 1');
  await b.evaluate(() => window.db.collection('items').doc('b').set({ rank: 2 }));
  await waitFor(a, ['a', 'b'], 'relay 1 sees the write made through relay 2');
  // A batch of three through relay 1: relay 2's listener never shows part of it.
  await a.evaluate(async () => {
    const batch = window.db.batch();
    for (const [id, rank] of [['c', 3], ['d', 4], ['e', 5]]) batch.set(window.db.collection('items').doc(id), { rank });
    batch.delete(window.db.collection('items').doc('a'));
    await batch.commit();
  });
  await waitFor(b, ['b', 'c', 'd', 'e'], 'the batch reaches relay 2');
  const partial = await b.evaluate(() => window.seen.filter((ids) => {
    const n = ['c', 'd', 'e'].filter((id) => ids.includes(id)).length;
    return (n > 0 && n < 3) || (n === 3 && ids.includes('a'));
  }));
  assert.deepEqual(partial, [], 'no snapshot on relay 2 shows part of the batch');
  // Both write at once: both converge on the same result.
  await Promise.all([
    a.evaluate(() => window.db.collection('items').doc('f').set({ rank: 6 })),
    b.evaluate(() => window.db.collection('items').doc('g').set({ rank: 7 })),
  ]);
  await waitFor(a, ['b', 'c', 'd', 'e', 'f', 'g'], 'relay 1 converges');
  await waitFor(b, ['b', 'c', 'd', 'e', 'f', 'g'], 'relay 2 converges');
  await assertTrackersClean(a);
  await assertTrackersClean(b);
  await a.close();
  await b.close();
});
