// A resumed listen never keeps a document the relay's result lacks (issue 23, item 3), in
// headless Chromium against a real hearth-relay: the relay sends, with a resumed target,
// its whole result's size and a filter of its names, and the client drops (by reading
// again) what it kept from before that the result lacks, or listens again from scratch.
// Run: node --test pkg-tests/e2e/resume_existence.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { assertTrackersClean, installTracker, startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();
/** Another browser profile: the other clients (their own IndexedDB). */
let other;
before(async () => { other = await startBrowser(); });
after(async () => { await other?.stop(); });

/** A page of the other profile with database `name` open. */
async function otherClient(name) {
  const p = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  await p.evaluate(async ({ name, url }) => {
    window.db = await window.hearth.Hearth.open({ name, relay: url });
  }, { name, url: env.relay.url });
  return p;
}

/** In page `p` (database `name` open): listens to `items where n > 10` with the tracker,
 *  and waits for a snapshot from the relay. */
async function listenOver10(p) {
  await installTracker(p);
  await p.evaluate(() => {
    window.over10 = window.track(window.db.collection('items').where('n', '>', 10), { includeMetadataChanges: true });
  });
  await p.waitForFunction(() => window.over10.snaps.some((s) => !s.cache));
}

/** What page `p`'s listener shows once nothing is pending and it is from the relay, as
 *  `id:n` strings, waiting up to `ms` for it to equal `want`. */
async function shown(p, want, ms = 10000) {
  const t0 = Date.now();
  for (;;) {
    const now = await p.evaluate(() => {
      const last = window.over10.snaps.at(-1);
      return { list: window.over10.list.map((d) => `${d.id}:${JSON.parse(d.data).n}`), pending: last.pending, cache: last.cache };
    });
    if ((JSON.stringify(now.list) === JSON.stringify(want) && !now.pending && !now.cache) || Date.now() - t0 > ms) return now;
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('a listen resumed after a reload drops a document the relay\'s result lacks (an estimate over a stale base)', { timeout: 90000 }, async () => {
  const name = 'phantom';
  const w = await otherClient(name);
  await w.evaluate(() => window.db.doc('items/x').set({ n: 9 }));

  // This tab reads x once (its cache holds {n: 9}) and listens to n > 10.
  let p = await env.page();
  await env.open(p, name);
  await p.evaluate(() => window.db.doc('items/x').get({ source: 'server' }));
  await listenOver10(p);
  // The target's resume version is stored after its snapshot.
  await new Promise((r) => setTimeout(r, 500));

  // Reload: the listen resumes from the stored version.
  await p.reload();
  await p.waitForFunction(() => window.hearthReady === true);
  await env.open(p, name);
  await listenOver10(p);

  // Another client sets x to 5; this tab, not knowing it, adds 3 (its estimate: 12, while
  // the relay commits 8, which does not match); another client adds y.
  await w.evaluate(() => window.db.doc('items/x').set({ n: 5 }));
  await p.evaluate(() => window.db.doc('items/x').update({ n: window.hearth.FieldValue.increment(3) }));
  await w.evaluate(() => window.db.doc('items/y').set({ n: 20 }));
  const server = await w.evaluate(async () => (await window.db.doc('items/x').get({ source: 'server' })).data());
  assert.deepEqual(server, { n: 8 });

  const seen = await shown(p, ['y:20']);
  assert.deepEqual(seen.list, ['y:20'], `the listener shows ${JSON.stringify(seen)}; the relay has x = 8 (not > 10)`);
  await assertTrackersClean(p);

  // And again after another reload (the resume version stored since is the one checked).
  await p.reload();
  await p.waitForFunction(() => window.hearthReady === true);
  await env.open(p, name);
  await listenOver10(p);
  const again = await shown(p, ['y:20']);
  assert.deepEqual(again.list, ['y:20'], `after a reload: ${JSON.stringify(again)}`);
  await assertTrackersClean(p);
  await p.close();
  await w.close();
});

test('a resumed listen whose cache lacks part of the result listens again from scratch', { timeout: 90000 }, async () => {
  // The cache loses documents of a result behind the resume version's back (as a browser
  // evicting or a crash could): the relay's count is larger than what the client holds,
  // and a delta would never bring them back.
  const name = 'existence-short';
  const w = await otherClient(name);
  await w.evaluate(async () => {
    const b = window.db.batch();
    for (let i = 0; i < 5; i++) b.set(window.db.doc(`items/d${i}`), { n: 11 + i });
    await b.commit();
  });
  let p = await env.page();
  await env.open(p, name);
  await listenOver10(p);
  await new Promise((r) => setTimeout(r, 500));
  await p.reload();
  await p.waitForFunction(() => window.hearthReady === true);
  // Two documents go from the cache (the object store of documents, behind the engine).
  const removed = await p.evaluate(async (name) => {
    const db = await new Promise((res, rej) => {
      const r = indexedDB.open(`hearth:${name}`);
      r.onsuccess = () => res(r.result);
      r.onerror = () => rej(r.error);
    });
    let gone = 0;
    // The local view and the server state: keys are the documents' encoded names.
    for (const store of ['documents', 'remote']) {
      const tx = db.transaction(store, 'readwrite');
      const os = tx.objectStore(store);
      const keys = await new Promise((res) => { const r = os.getAllKeys(); r.onsuccess = () => res(r.result); });
      for (const k of keys) {
        const text = String.fromCharCode(...new Uint8Array(k));
        if (text.includes('items') && /d1|d3/.test(text)) { os.delete(k); gone++; }
      }
      await new Promise((res) => { tx.oncomplete = res; tx.onerror = res; });
    }
    db.close();
    return gone;
  }, name);
  assert.ok(removed >= 2, `removed ${removed} records`);
  await env.open(p, name);
  await listenOver10(p);
  const want = ['d0:11', 'd1:12', 'd2:13', 'd3:14', 'd4:15'];
  const seen = await shown(p, want);
  assert.deepEqual(seen.list, want, JSON.stringify(seen));
  await assertTrackersClean(p);
  await p.close();
  await w.close();
});
