// End-to-end tests of listeners on queries with offset(): the window moves when a document
// in the skipped prefix is deleted or inserted, on the writer and on a reader in another
// browser profile that knows the documents only from the relay, also across an offline
// spell; every snapshot's docChanges() replays onto the previous result. Run:
// node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startBrowser, useEnvironment, installTracker, assertTrackersClean } from './harness.mjs';

const env = useEnvironment();

/** Opens database `name` in a page of a fresh browser profile. */
async function reader(name) {
  const b = await startBrowser();
  const p = await b.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  await env.open(p, name);
  await installTracker(p);
  return { b, p };
}

// The last snapshot's ids (its fromCache may stay true: as in Firestore, a listener without
// includeMetadataChanges is not told when only that changes).
const waitIds = (p, t, want) => p.waitForFunction(({ t, want }) =>
  window[t].snaps.at(-1)?.ids.join() === want, { t, want }, { timeout: 20000 });

test('an offset window moves when a skipped document is deleted or inserted', { timeout: 120000 }, async () => {
  const w = await env.page();
  await env.open(w, 'offset-prefix');
  await installTracker(w);
  await w.evaluate(async () => {
    for (let i = 0; i < 4; i++) await window.db.doc(`o/d${i}`).set({ i });
  });
  const { b, p: r } = await reader('offset-prefix');
  try {
    for (const p of [w, r]) {
      await p.evaluate(() => {
        const c = window.db.collection('o');
        window.win = window.track(c.orderBy('i').offset(1).limit(2));
        window.tail = window.track(c.orderBy('i').offset(2));
      });
    }
    await waitIds(r, 'win', 'd1,d2');
    await waitIds(r, 'tail', 'd2,d3');
    await w.evaluate(() => window.db.doc('o/d0').delete());
    for (const p of [w, r]) {
      await waitIds(p, 'win', 'd2,d3');
      await waitIds(p, 'tail', 'd3');
    }
    // A document entering the skipped prefix pushes the window back.
    await w.evaluate(() => window.db.doc('o/a').set({ i: -1 }));
    for (const p of [w, r]) {
      await waitIds(p, 'win', 'd1,d2');
      await waitIds(p, 'tail', 'd2,d3');
    }
    // Offline, the reader misses a deletion in the prefix; back online it catches up.
    await r.evaluate(() => window.db.disableNetwork());
    await w.evaluate(() => window.db.doc('o/a').delete());
    await r.evaluate(() => window.db.enableNetwork());
    await waitIds(r, 'win', 'd2,d3');
    await waitIds(r, 'tail', 'd3');
    const server = await w.evaluate(async () => {
      const s = await window.db.collection('o').orderBy('i').offset(1).limit(2).get({ source: 'server' });
      return s.docs.map((d) => d.id).join();
    });
    assert.equal(server, 'd2,d3');
    await assertTrackersClean(w);
    await assertTrackersClean(r);
  } finally {
    await b.stop();
  }
});

test('a limitToLast window with an offset follows deletions at its end', { timeout: 90000 }, async () => {
  const w = await env.page();
  await env.open(w, 'offset-last');
  await w.evaluate(async () => {
    for (let i = 0; i < 5; i++) await window.db.doc(`o/d${i}`).set({ i });
  });
  const { b, p: r } = await reader('offset-last');
  try {
    await r.evaluate(() => {
      window.win = window.track(window.db.collection('o').orderBy('i').limitToLast(2).offset(1));
    });
    await waitIds(r, 'win', 'd2,d3');
    await w.evaluate(() => window.db.doc('o/d4').delete());
    await waitIds(r, 'win', 'd1,d2');
    await assertTrackersClean(r);
  } finally {
    await b.stop();
  }
});
