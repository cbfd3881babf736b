// End-to-end tests of the cache budget (`cacheSizeBytes`) and of a local commit the quota
// refuses, in headless Chromium against a real hearth-relay. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertTrackersClean, installTracker, startServer, useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;

const MiB = 1024 * 1024;

/** Writes documents `from`..`count` of about `bytes` each into `bulk`, in batches of 50. */
async function writeBulk(p, count, bytes, from = 0) {
  await p.evaluate(async ({ count, bytes, from }) => {
    const filler = 'x'.repeat(bytes);
    for (let i = from; i < count; i += 50) {
      const batch = window.db.batch();
      for (let j = i; j < Math.min(i + 50, count); j++) {
        batch.set(window.db.doc(`bulk/b${String(j).padStart(4, '0')}`), { n: j, filler });
      }
      await batch.commit();
    }
  }, { count, bytes, from });
}

const cachedBulk = (p) => p.evaluate(async () => {
  const snap = await window.db.collection('bulk').get({ source: 'cache' });
  return snap.docs.map((d) => d.data().n);
});

test('the cache budget evicts the least recently written documents nothing holds; the relay keeps them', { timeout: 90000 }, async () => {
  const p = await page();
  await installTracker(p);
  await p.evaluate(async (url) => {
    const { Hearth } = window.hearth;
    window.db = await Hearth.open({ name: 'cache-budget', relay: url, cacheSizeBytes: 1024 * 1024 });
    // Held: a watched document, a listened query's result, a recently read document.
    await window.db.doc('held/watched').set({ v: 'w', filler: 'y'.repeat(6000) });
    await window.db.doc('live/a').set({ v: 1, filler: 'y'.repeat(6000) });
    await window.db.doc('live/b').set({ v: 2, filler: 'y'.repeat(6000) });
    window.seen = { doc: null, live: [] };
    window.trackDoc(window.db.doc('held/watched'), undefined, (s) => { window.seen.doc = s.exists ? s.data().v : null; });
    window.track(window.db.collection('live'), undefined, (s) => { window.seen.live = s.docs.map((d) => d.data().v); });
  }, env.relay.url);
  await p.waitForFunction(() => window.seen.live.length === 2 && window.seen.doc === 'w');
  // About 1.9 MB of documents, each acknowledged, so none stays pending. The oldest is
  // read early on, and so held as recently read.
  await writeBulk(p, 50, 6000);
  await p.evaluate(async () => { await window.db.doc('bulk/b0000').get({ source: 'cache' }); });
  await writeBulk(p, 300, 6000, 50);
  // Writes push the estimate over the budget; the collection runs in the background.
  let bytes = Infinity;
  for (let i = 0; i < 100 && bytes > MiB; i++) {
    bytes = await p.evaluate(() => window.db.cacheSizeBytes());
    if (bytes > MiB) await new Promise((r) => setTimeout(r, 100));
  }
  // Down to 75 % of the budget.
  assert.ok(bytes <= 0.75 * MiB, `${bytes} bytes cached`);
  const cached = await cachedBulk(p);
  assert.ok(cached.length < 300 && cached.length > 10, `${cached.length} documents cached`);
  // The recently read document is held; apart from it, the oldest went first.
  assert.ok(cached.includes(0), 'the recently read document stays');
  const rest = cached.filter((n) => n !== 0).sort((a, b) => a - b);
  const oldestKept = rest[0];
  const batchOf = (n) => Math.floor(n / 50);
  for (let n = 1; n < 300; n++) {
    if (batchOf(n) > batchOf(oldestKept)) assert.ok(cached.includes(n), `b${n} is newer than a kept one`);
  }
  // Held documents are in the cache, listeners keep their results and stay live.
  const held = await p.evaluate(async () => {
    const w = await window.db.doc('held/watched').get({ source: 'cache' });
    const live = await window.db.collection('live').get({ source: 'cache' });
    return { watched: w.exists, live: live.size };
  });
  assert.deepEqual(held, { watched: true, live: 2 });
  await p.evaluate(() => window.db.doc('live/c').set({ v: 3 }));
  await p.waitForFunction(() => window.seen.live.length === 3);
  // Nothing is lost: the relay has every document, and a read brings an evicted one back.
  const server = await p.evaluate(async () => {
    const all = await window.db.collection('bulk').get({ source: 'server' });
    const one = await window.db.doc('bulk/b0001').get();
    return { size: all.size, one: one.exists && one.data().n };
  });
  assert.deepEqual(server, { size: 300, one: 1 });
  await assertTrackersClean(p);
  await p.evaluate(() => window.db.close());
  await p.close();
});

test('without a relay nothing is evicted, and cacheSizeBytes is checked', { timeout: 90000 }, async () => {
  const p = await page();
  const bad = await p.evaluate(async () => {
    const { Hearth } = window.hearth;
    const codes = [];
    for (const cacheSizeBytes of [1000, 1.5 * 1024 * 1024 + 0.5, 'big', -2]) {
      try {
        await Hearth.open({ name: 'cache-bad', cacheSizeBytes });
        codes.push('opened');
      } catch (e) {
        codes.push(e.code);
      }
    }
    const unlimited = await Hearth.open({ name: 'cache-unlimited', cacheSizeBytes: Hearth.CACHE_SIZE_UNLIMITED });
    unlimited.close();
    window.db = await Hearth.open({ name: 'cache-local', cacheSizeBytes: 1024 * 1024 });
    return codes;
  });
  assert.deepEqual(bad, ['invalid-argument', 'invalid-argument', 'invalid-argument', 'invalid-argument']);
  await writeBulk(p, 300, 6000);
  await new Promise((r) => setTimeout(r, 2000));
  assert.ok(await p.evaluate(() => window.db.cacheSizeBytes()) > 300 * 6000);
  assert.equal((await cachedBulk(p)).length, 300);
  await p.evaluate(() => window.db.close());
  await p.close();
});

test('a write the local database cannot store rejects, listeners go back, and earlier data stays', { timeout: 90000 }, async () => {
  // An origin of its own: Chromium applies a quota override to a storage bucket opened after it.
  const own = await startServer();
  const p = await env.browser.page(`${own.origin}/pkg-tests/e2e/page.html`);
  // A small quota (Chromium's DevTools protocol): small writes fit, a document near the
  // 1 MiB limit does not.
  const cdp = await p.context().newCDPSession(p);
  await cdp.send('Storage.overrideQuotaForOrigin', { origin: own.origin, quotaSize: 64 * 1024 });
  await installTracker(p);
  await p.evaluate(async () => {
    const { Hearth } = window.hearth;
    window.db = await Hearth.open({ name: 'quota' });
    await window.db.doc('q/kept').set({ v: 'kept' });
    window.sizes = [];
    window.track(window.db.collection('q'), undefined, (s) => window.sizes.push(s.size));
  });
  await p.waitForFunction(() => window.sizes.length === 1);
  const failed = await p.evaluate(async () => {
    const batch = window.db.batch();
    for (let i = 0; i < 20; i++) batch.set(window.db.doc(`q/big${i}`), { filler: 'z'.repeat(i === 0 ? 900000 : 100) });
    try {
      await batch.commit();
      return 'stored';
    } catch (e) {
      return e.code;
    }
  });
  assert.equal(failed, 'resource-exhausted');
  await p.waitForFunction(() => window.sizes[window.sizes.length - 1] === 1);
  await cdp.send('Storage.overrideQuotaForOrigin', { origin: own.origin });
  const after = await p.evaluate(async () => {
    const snap = await window.db.collection('q').get({ source: 'cache' });
    return { size: snap.size, v: snap.docs[0].data().v, seen: window.sizes };
  });
  assert.equal(after.size, 1);
  assert.equal(after.v, 'kept');
  // Listeners saw the write at once (21 documents), then went back to 1.
  assert.deepEqual(after.seen, [1, 21, 1]);
  await assertTrackersClean(p);
  await p.evaluate(() => window.db.close());
  await p.close();
  await own.stop();
});

test('eviction keeps what offset listeners skip, and their windows stay right across a change and a reload', { timeout: 120000 }, async () => {
  const name = 'cache-offset';
  let p = await page();
  await installTracker(p);
  const want = (from, count) => Array.from({ length: 10 }, (_, i) => i).slice(from, count === undefined ? undefined : from + count);
  const listen = () => p.evaluate(async ({ url, name }) => {
    window.db = await window.hearth.Hearth.open({ name, relay: url, cacheSizeBytes: 1024 * 1024 });
    const q = window.db.collection('win').orderBy('n');
    window.skip3 = window.track(q.offset(3), { includeMetadataChanges: true });
    window.skip3limit2 = window.track(q.offset(3).limit(2), { includeMetadataChanges: true });
  }, { url: env.relay.url, name });
  const shown = () => p.evaluate(() => ({
    skip3: window.skip3.list.map((d) => JSON.parse(d.data).n),
    skip3limit2: window.skip3limit2.list.map((d) => JSON.parse(d.data).n),
  }));
  await listen();
  // The window's documents are the oldest written: the first an eviction would take.
  await p.evaluate(async () => {
    const b = window.db.batch();
    for (let i = 0; i < 10; i++) b.set(window.db.doc(`win/w${i}`), { n: i, filler: 'y'.repeat(6000) });
    await b.commit();
  });
  await p.waitForFunction(() => window.skip3.list.length === 7 && window.skip3limit2.list.length === 2);
  await writeBulk(p, 300, 6000);
  let bytes = Infinity;
  for (let i = 0; i < 100 && bytes > MiB; i++) {
    bytes = await p.evaluate(() => window.db.cacheSizeBytes());
    if (bytes > MiB) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(bytes <= 0.75 * MiB, `${bytes} bytes cached`);
  const skipped = await p.evaluate(async () => (await window.db.collection('win').get({ source: 'cache' })).docs.map((d) => d.data().n));
  assert.deepEqual(skipped.sort((a, b) => a - b), want(0), 'every document of the windows and what they skip is cached');
  // A change inside the window moves nothing; one before it shifts it.
  await p.evaluate(() => window.db.doc('win/w1').update({ n: 1.5 }));
  await p.evaluate(() => window.db.doc('win/w1').update({ n: 1 }));
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual(await shown(), { skip3: want(3), skip3limit2: want(3, 2) });
  await assertTrackersClean(p);
  // After a reload the listens resume (or start again): the same windows.
  await p.reload();
  await p.waitForFunction(() => window.hearthReady === true);
  await installTracker(p);
  await listen();
  await p.waitForFunction(() => window.skip3.snaps.some((s) => !s.cache) && window.skip3limit2.snaps.some((s) => !s.cache));
  await p.evaluate(() => window.db.doc('win/w0').delete());
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(await shown(), { skip3: want(4), skip3limit2: want(4, 2) });
  await assertTrackersClean(p);
  await p.evaluate(() => window.db.close());
  await p.close();
});
