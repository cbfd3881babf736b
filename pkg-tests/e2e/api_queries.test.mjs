// End-to-end tests of the JS API's queries, aggregations, listeners, snapshots and network
// switch through the npm package in headless Chromium against a real hearth-relay, each
// succeeding and refused with the error `code` Firestore documents; the coverage table of the
// whole API is at the top of api.test.mjs. Tests marked `todo` show Hearth differing from
// Firestore (the reason says how). Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertTrackersClean, installTracker, startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();
const open = env.open;
const serverRead = env.serverRead;

const page = env.page;

/** Runs the query `build(collection, hearth)` (its source) from the cache and from the relay in
 *  page `p`: each side's ids, or its error code (a refusal while building counts too). */
async function bothSides(p, coll, build) {
  return p.evaluate(async ({ coll, build }) => {
    const make = new Function('c', 'hearth', `return (${build})(c, hearth);`);
    const out = {};
    for (const source of ['cache', 'server']) {
      out[source] = await window.code(async () => {
        const snap = await make(window.db.collection(coll), window.hearth).get({ source });
        out.ids = snap.docs.map((d) => d.id);
      });
      if (out[source] === 'ok') out[source] = out.ids;
    }
    delete out.ids;
    return out;
  }, { coll, build: build.toString() });
}

test('query builders: where, Filter.and/or, orderBy, limit, limitToLast, offset and the four cursors, from the cache and the relay', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-query');
  await p.evaluate(async () => {
    const batch = window.db.batch();
    for (let n = 1; n <= 6; n++) batch.set(window.db.doc(`q/d${n}`), { n, odd: n % 2 === 1 });
    await batch.commit();
  });
  const cases = [
    [(c) => c.where('n', '>', 2).orderBy('n').limit(2), ['d3', 'd4']],
    [(c) => c.orderBy('n').limitToLast(2), ['d5', 'd6']],
    [(c) => c.orderBy('n', 'desc').limitToLast(2), ['d2', 'd1']],
    [(c) => c.orderBy('n').offset(1).limit(2), ['d2', 'd3']],
    [(c) => c.orderBy('n').startAt(2).endAt(4), ['d2', 'd3', 'd4']],
    [(c) => c.orderBy('n').startAfter(2).endBefore(5), ['d3', 'd4']],
    [(c, h) => c.where(h.Filter.and(h.Filter.where('odd', '==', true), h.Filter.where('n', 'in', [3, 5, 6]))), ['d3', 'd5']],
    [(c, h) => c.where(h.Filter.or(h.Filter.where('n', '==', 1), h.Filter.where('n', '==', 6))), ['d1', 'd6']],
    [(c) => c.where('n', 'in', [2, 4]).where('odd', '==', false), ['d2', 'd4']],
    [(c, h) => c.orderBy(h.FieldPath.documentId()).startAfter('d4'), ['d5', 'd6']],
  ];
  // select(): the named fields only; none, the names only.
  const projected = await p.evaluate(async () => {
    const out = {};
    for (const source of ['cache', 'server']) {
      const some = await window.db.collection('q').where('n', '<', 3).select('odd').get({ source });
      const none = await window.db.collection('q').where('n', '<', 3).select().get({ source });
      out[source] = [some.docs.map((d) => d.data()), none.docs.map((d) => [d.id, d.data()])];
    }
    return out;
  });
  const wantProjected = [[{ odd: true }, { odd: false }], [['d1', {}], ['d2', {}]]];
  assert.deepEqual(projected, { cache: wantProjected, server: wantProjected });
  for (const [build, want] of cases) {
    const got = await bothSides(p, 'q', build);
    assert.deepEqual(got, { cache: want, server: want }, `${build}`);
  }
  // Cursors from snapshots: the document's position in the query's order.
  const snapCursors = await p.evaluate(async () => {
    const c = window.db.collection('q');
    const d4 = await window.db.doc('q/d4').get();
    const ids = async (q) => (await q.get()).docs.map((d) => d.id);
    return [await ids(c.orderBy('n').startAt(d4)), await ids(c.orderBy('n').startAfter(d4)),
      await ids(c.orderBy('n').endAt(d4).limit(2)), await ids(c.orderBy('n').endBefore(d4).limitToLast(1))];
  });
  assert.deepEqual(snapCursors, [['d4', 'd5', 'd6'], ['d5', 'd6'], ['d1', 'd2'], ['d3']]);
  await p.close();
});

test('query builders refuse what Firestore refuses, with invalid-argument', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-query-refused');
  await p.evaluate(() => window.db.doc('q/d1').set({ n: 1, a: [1] }));
  const refused = [
    (c) => c.where('n', '<>', 1),
    (c) => c.where('n', 'in', 5),
    (c) => c.where('n', 'in', []),
    (c) => c.where('n', 'in', Array.from({ length: 31 }, (_, i) => i)),
    (c) => c.where('n', 'not-in', [1]).where('n', '!=', 2),
    (c) => c.where('a', 'array-contains', 1).where('a', 'array-contains', 2),
    (c) => c.orderBy('n', 'sideways'),
    (c) => c.limit(-1),
    (c) => c.offset(-1),
    (c) => c.orderBy('n').startAt(1, 2),
    (c) => c.orderBy('n').endBefore(1, 2),
    (c, h) => c.where(h.Filter.where('n', 'contains', 1)),
    (c, h) => c.where(h.Filter.or('n')),
  ];
  for (const build of refused) {
    const got = await bothSides(p, 'q', build);
    assert.deepEqual(got, { cache: 'invalid-argument', server: 'invalid-argument' }, `${build}`);
  }
  const missingCursor = await p.evaluate(async () => {
    const missing = await window.db.doc('q/none').get();
    return window.code(() => window.db.collection('q').orderBy('n').startAfter(missing).get());
  });
  assert.equal(missingCursor, 'invalid-argument');
  await p.close();
});

test('limitToLast() without orderBy() is refused with unimplemented', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-limittolast');
  // Firestore's SDK: "limitToLast() queries require specifying at least one orderBy() clause"
  // (validateHasExplicitOrderByForLimitToLast, code unimplemented), for get() and onSnapshot().
  const got = await bothSides(p, 'q', (c) => c.limitToLast(1));
  assert.deepEqual(got, { cache: 'unimplemented', server: 'unimplemented' });
  const listen = await p.evaluate(() => window.code(() => new Promise((resolve, reject) => {
    window.db.collection('q').limitToLast(1).onSnapshot(() => resolve(), reject);
  })));
  assert.equal(listen, 'unimplemented');
  await p.close();
});

test('limit(0) is refused with invalid-argument', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-limit0');
  // Firestore's SDK: "Function limit() requires a positive number, but it was: 0."
  assert.deepEqual(await bothSides(p, 'q', (c) => c.limit(0)), { cache: 'invalid-argument', server: 'invalid-argument' });
  await p.close();
});

test('count() and aggregate() with sum and average, from the relay and offline from the cache; refused specs', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-aggregate');
  const r = await p.evaluate(async () => {
    const { AggregateField } = window.hearth;
    const db = window.db;
    for (const n of [1, 2, 3, 6]) await db.doc(`a/d${n}`).set({ n, even: n % 2 === 0 });
    const spec = { c: AggregateField.count(), s: AggregateField.sum('n'), avg: AggregateField.average('n') };
    const run = async () => ({
      count: (await db.collection('a').count().get()).data(),
      even: (await db.collection('a').where('even', '==', true).count().get()).data(),
      agg: (await db.collection('a').aggregate(spec).get()).data(),
      none: (await db.collection('a').where('n', '>', 100).aggregate(spec).get()).data(),
    });
    const online = await run();
    await db.disableNetwork();
    const offline = await run();
    await db.enableNetwork();
    const local = await window.hearth.Hearth.open({ name: 'api-aggregate-local' });
    const refused = [await window.code(() => db.collection('a').aggregate({ x: 5 }).get()),
      await window.code(() => AggregateField.average('a~b')),
      await window.code(() => local.collection('a').where('x', '==', 1).orderBy('y', 'desc').count().get())];
    return { online, offline, refused };
  });
  const want = { count: { count: 4 }, even: { count: 2 }, agg: { c: 4, s: 12, avg: 3 }, none: { c: 0, s: 0, avg: null } };
  assert.deepEqual(r.online, want);
  assert.deepEqual(r.offline, want);
  assert.deepEqual(r.refused, ['invalid-argument', 'invalid-argument', 'failed-precondition']);
  await p.close();
});

test('onSnapshot: positional, options and observer forms; unsubscribe stops both kinds of listener; listens no index serves report to the error callback', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-listen');
  await installTracker(p);
  const r = await p.evaluate(async () => {
    const db = window.db;
    const wait = (ms) => new Promise((res) => setTimeout(res, ms));
    await db.doc('l/a').set({ n: 1 });
    // Query listeners, each replaying its docChanges(): plain, with metadata changes, limited
    // from the end; a document listener with metadata changes.
    const plain = window.track(db.collection('l').orderBy('n'));
    const meta = window.track(db.collection('l').orderBy('n'), { includeMetadataChanges: true });
    const last = window.track(db.collection('l').orderBy('n').limitToLast(2));
    const doc = window.trackDoc(db.doc('l/b'), { includeMetadataChanges: true });
    // The observer form: { next, error }.
    const observed = [];
    const stopObserver = db.collection('l').onSnapshot({ next: (s) => observed.push(s.size), error: (e) => observed.push(e.code) });
    const docObserved = [];
    const stopDocObserver = db.doc('l/b').onSnapshot({ next: (s) => docObserved.push(s.exists) });
    await wait(500);
    await db.doc('l/b').set({ n: 2 });
    await db.doc('l/c').set({ n: 3 });
    await db.doc('l/b').update({ n: 2.5 });
    await wait(500);
    stopObserver();
    stopDocObserver();
    plain.stop();
    doc.stop();
    const counts = [plain.snaps.length, doc.snaps.length, observed.length, docObserved.length];
    await db.doc('l/b').delete();
    await db.doc('l/d').set({ n: 5 });
    await wait(500);
    const after = [plain.snaps.length, doc.snaps.length, observed.length, docObserved.length];
    // A listen no index serves fails through the error callback (positional and observer).
    const local = await window.hearth.Hearth.open({ name: 'api-listen-local' });
    const unserved = local.collection('l').where('x', '==', 1).orderBy('y', 'desc');
    const errors = [];
    unserved.onSnapshot(() => errors.push('snapshot'), (e) => errors.push(e.code));
    unserved.onSnapshot({ includeMetadataChanges: true }, () => errors.push('snapshot'), (e) => errors.push(e.code));
    unserved.onSnapshot({ next: () => errors.push('snapshot'), error: (e) => errors.push(e.code) });
    await wait(500);
    const noCallback = [() => db.collection('l').onSnapshot(), () => db.collection('l').onSnapshot({ includeMetadataChanges: true }),
      () => db.doc('l/a').onSnapshot(), () => db.doc('l/a').onSnapshot({})]
      .map((f) => { try { f(); return 'ok'; } catch (e) { return e.code; } });
    return { counts, after, observed, docObserved, errors, noCallback,
      plain: plain.snaps.at(-1).ids, meta: meta.snaps.at(-1).ids, last: last.snaps.at(-1).ids,
      doc: doc.snaps.map((s) => [s.exists, s.pending]) };
  });
  assert.deepEqual(r.plain, ['a', 'b', 'c']);
  assert.deepEqual(r.meta, ['a', 'c', 'd']);
  assert.deepEqual(r.last, ['c', 'd']);
  assert.deepEqual(r.counts, r.after, 'no snapshot after unsubscribing');
  assert.deepEqual(r.observed.at(-1), 3);
  // Missing, written, updated: each a change of the data.
  assert.deepEqual(r.docObserved, [false, true, true]);
  // The document listener saw it missing, written (pending, then acknowledged), updated.
  assert.deepEqual(r.doc[0], [false, false]);
  assert.ok(r.doc.some(([e, pending]) => e && pending) && r.doc.at(-1)[0] && !r.doc.at(-1)[1], JSON.stringify(r.doc));
  assert.deepEqual(r.errors, ['failed-precondition', 'failed-precondition', 'failed-precondition']);
  assert.deepEqual(r.noCallback, ['invalid-argument', 'invalid-argument', 'invalid-argument', 'invalid-argument']);
  await assertTrackersClean(p);
  await p.close();
});

test('a listener of a client online holds back an empty first snapshot from the cache until the relay answers', { timeout: 60000 }, async () => {
  const writer = await page();
  await open(writer, 'api-first-snapshot');
  await writer.evaluate(() => window.db.doc('f/1').set({ v: 1 }));
  // Another browser profile: a client with nothing cached.
  const other = await startBrowser();
  try {
    const p = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await open(p, 'api-first-snapshot');
    await installTracker(p);
    await p.evaluate(() => { window.t = window.track(window.db.collection('f')); });
    await p.waitForFunction(() => window.t.snaps.some((s) => s.ids.length === 1));
    // Firestore (event_manager.ts, shouldRaiseInitialEvent): a first snapshot from the cache
    // is raised only if it has documents, the query had cached results, or the client is offline.
    const first = await p.evaluate(() => window.t.snaps[0]);
    assert.deepEqual(first, { changes: ['added 1'], ids: ['1'], pending: false, cache: false });
    await assertTrackersClean(p);
    await p.close();
  } finally {
    await other.stop();
  }
  await writer.close();
});

test('snapshots: docs, forEach, size, empty, query, metadata.isEqual, DocumentSnapshot get/ref/id', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-snapshots');
  const r = await p.evaluate(async () => {
    const db = window.db;
    await db.doc('s/a').set({ m: { x: 1 }, n: 2 });
    await db.doc('s/b').set({ m: { x: 2 }, n: 1 });
    const q = db.collection('s').orderBy('n');
    const snap = await q.get({ source: 'server' });
    const each = [];
    snap.forEach((d) => each.push(d.id));
    const again = await snap.query.get({ source: 'server' });
    const empty = await db.collection('s').where('n', '>', 5).get();
    const doc = await db.doc('s/a').get({ source: 'server' });
    const missing = await db.doc('s/none').get({ source: 'server' });
    const cached = await db.doc('s/a').get({ source: 'cache' });
    return {
      docs: snap.docs.map((d) => d.id), each, size: snap.size, empty: [snap.empty, empty.empty, empty.size],
      again: again.docs.map((d) => d.id),
      changes: snap.docChanges().map((c) => [c.type, c.doc.id, c.oldIndex, c.newIndex]),
      doc: [doc.id, doc.ref.path, doc.get('m.x'), doc.get(new window.hearth.FieldPath('m', 'x')), doc.get('nope'), doc.exists],
      missing: [missing.exists, missing.data(), missing.get('n'), missing.id],
      meta: [doc.metadata.isEqual(snap.metadata), doc.metadata.isEqual(cached.metadata)],
    };
  });
  assert.deepEqual(r.docs, ['b', 'a']);
  assert.deepEqual(r.each, ['b', 'a']);
  assert.equal(r.size, 2);
  assert.deepEqual(r.empty, [false, true, 0]);
  assert.deepEqual(r.again, ['b', 'a']);
  assert.deepEqual(r.changes, [['added', 'b', -1, 0], ['added', 'a', -1, 1]]);
  assert.deepEqual(r.doc, ['a', 's/a', 1, 1, undefined, true]);
  assert.deepEqual(r.missing, [false, undefined, undefined, 'none']);
  assert.deepEqual(r.meta, [true, false]);
  await p.close();
});

test('disableNetwork() turns listeners to the cache and queues writes; enableNetwork() syncs them', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-network');
  await installTracker(p);
  await p.evaluate(async () => {
    await window.db.doc('n/a').set({ v: 1 });
    window.t = window.track(window.db.collection('n'), { includeMetadataChanges: true });
  });
  await p.waitForFunction(() => window.t.snaps.at(-1)?.cache === false);
  await p.evaluate(() => window.db.disableNetwork());
  // Firestore raises a snapshot with fromCache: true to listeners with metadata changes.
  await p.waitForFunction(() => window.t.snaps.at(-1).cache === true);
  await p.evaluate(() => { window.write = window.db.doc('n/b').set({ v: 2 }); });
  await p.waitForFunction(() => window.t.snaps.at(-1).ids.join() === 'a,b' && window.t.snaps.at(-1).pending);
  await p.evaluate(async () => { await window.db.enableNetwork(); await window.write; });
  await p.waitForFunction(() => !window.t.snaps.at(-1).cache && !window.t.snaps.at(-1).pending);
  assert.deepEqual(await serverRead('api-network', 'n/b'), { v: 2 });
  await assertTrackersClean(p);
  await p.close();
});

test('queries, collection references and snapshots compare with isEqual', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'api-isequal');
  const r = await p.evaluate(async () => {
    const db = window.db;
    await db.doc('e/1').set({ n: 1 });
    const q = () => db.collection('e').where('n', '==', 1).orderBy('n');
    const results = {};
    const run = async (name, f) => { try { results[name] = await f(); } catch (e) { results[name] = `${e.name}: ${e.message}`; } };
    // Firestore's namespaced API: Query, CollectionReference, DocumentSnapshot and
    // QuerySnapshot each have isEqual(other).
    await run('query', () => [q().isEqual(q()), q().isEqual(q().limit(1))]);
    await run('collection', () => [db.collection('e').isEqual(db.collection('e')), db.collection('e').isEqual(db.collection('f'))]);
    await run('doc', async () => {
      const a = await db.doc('e/1').get({ source: 'cache' });
      return [a.isEqual(await db.doc('e/1').get({ source: 'cache' })), a.isEqual(await db.doc('e/2').get({ source: 'cache' }))];
    });
    await run('snapshot', async () => {
      const a = await q().get({ source: 'cache' });
      return [a.isEqual(await q().get({ source: 'cache' })), a.isEqual(await db.collection('e').where('n', '==', 2).get({ source: 'cache' }))];
    });
    return results;
  });
  assert.deepEqual(r, { query: [true, false], collection: [true, false], doc: [true, false], snapshot: [true, false] });
  await p.close();
});
