// End-to-end tests of the npm package in headless Chromium against a real hearth-relay:
// the seeds' web code, latency compensation, offline writes surviving a reload, two tabs,
// rollback of refused writes, and local query errors. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertTrackers, assertTrackersClean, installTracker, seedGroups, useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;
const open = env.open;

test('seed 000: the instruments code runs unchanged and returns the seed results', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'seed000');
  const lines = await p.evaluate(async () => {
    const { seed000 } = await import('/pkg-tests/e2e/seed000.js');
    return seed000(window.db, window.hearth.Timestamp);
  });
  const groups = seedGroups(lines);
  assert.deepEqual(groups['--- queryCommonStock: '], ['BBB', 'AAA']);
  assert.deepEqual(groups['--- queryExchange1Instruments: '], ['AAA', 'Index1 ETF']);
  assert.deepEqual(groups['--- queryUSDInstruments: '], ['AAA', 'Index1 ETF']);
  await p.close();
});

test('seed 000: the sharded variant runs unchanged', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'seed000sharded');
  const lines = await p.evaluate(async () => {
    const { seed000Sharded } = await import('/pkg-tests/e2e/seed000.js');
    return seed000Sharded(window.db, window.hearth.Timestamp);
  });
  const docs = lines.filter((l) => l.startsWith('doc = ')).map((l) => JSON.parse(l.slice(6)));
  assert.ok(docs.every((d) => ['x', 'y', 'z'].includes(d.shard)), JSON.stringify(docs));
  const groups = seedGroups(lines);
  assert.deepEqual(groups['--- queryCommonStock: '], ['BBB', 'AAA']);
  assert.deepEqual(groups['--- queryExchange1Instruments: '], ['AAA', 'Index1 ETF']);
  // One sharded query in Hearth needs no client-side merging.
  const one = await p.evaluate(async () => {
    const snap = await window.db.collection('instruments').where('shard', 'in', ['x', 'y', 'z'])
      .where('exchange', '==', 'EXCHG1').orderBy('timestamp', 'desc').limit(5).get();
    return snap.docs.map((d) => d.data().symbol);
  });
  assert.deepEqual(one, ['AAA', 'Index1 ETF']);
  await p.close();
});

test('seed 002: distributed counters count every increment', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'seed002');
  const total = await p.evaluate(async () => {
    const { countTo } = await import('/pkg-tests/e2e/seed002.js');
    return countTo(window.db, window.hearth.FieldValue, 40);
  });
  assert.equal(total, 40);
  await p.close();
});

test('a local write reaches listeners at once with pending writes, then acknowledged', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'latency');
  await installTracker(p);
  const events = await p.evaluate(async () => {
    const events = [];
    const col = window.db.collection('items');
    let acknowledged;
    const done = new Promise((r) => { acknowledged = r; });
    const { stop } = window.track(col.where('n', '>=', 1), { includeMetadataChanges: true }, (s) => {
      events.push({ size: s.size, pending: s.metadata.hasPendingWrites, cache: s.metadata.fromCache,
        changes: s.docChanges().map((c) => c.type) });
      if (s.size === 1 && !s.metadata.hasPendingWrites) acknowledged();
    });
    const t0 = performance.now();
    const write = col.doc('a').set({ n: 5 });
    const afterCall = events.length;
    await write;
    await done;
    stop();
    return { events, afterCall, ms: performance.now() - t0 };
  });
  const withDoc = events.events.filter((e) => e.size === 1);
  assert.ok(withDoc.length >= 2, JSON.stringify(events));
  assert.equal(withDoc[0].pending, true, 'the first snapshot with the write has pending writes');
  assert.deepEqual(withDoc[0].changes, ['added']);
  assert.equal(withDoc.at(-1).pending, false, 'then the acknowledged state');
  await assertTrackersClean(p);
  await p.close();
});

test('a refused write rolls back, listeners re-fire, and the promise rejects with its code', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'rollback');
  const r = await p.evaluate(async () => {
    const ref = window.db.collection('c').doc('missing');
    let err = null;
    try {
      await ref.update({ a: 1 });
    } catch (e) { err = { code: e.code, message: e.message }; }
    const snap = await ref.get({ source: 'cache' });
    return { err, exists: snap.exists };
  });
  assert.equal(r.err?.code, 'not-found', JSON.stringify(r));
  assert.equal(r.exists, false);
  await p.close();
});

test('writes made offline survive a reload and reach the relay when back online', { timeout: 90000 }, async () => {
  const p = await page();
  await open(p, 'offline');
  await p.evaluate(async () => {
    await window.db.disableNetwork();
    window.db.collection('notes').doc('n1').set({ text: 'written offline' });
    // Durable locally before the page goes away.
    await new Promise((r) => setTimeout(r, 300));
  });
  await p.reload();
  await p.waitForFunction(() => window.hearthReady === true);
  // Reopened without a relay first: the write is read from the local queue, not from a
  // relay it might already have reached.
  const cached = await p.evaluate(async () => {
    const db = await window.hearth.Hearth.open({ name: 'offline' });
    const s = await db.collection('notes').doc('n1').get({ source: 'cache' });
    return { data: s.data(), pending: s.metadata.hasPendingWrites };
  });
  assert.deepEqual(cached.data, { text: 'written offline' });
  assert.equal(cached.pending, true);
  await p.reload();
  await p.waitForFunction(() => window.hearthReady === true);
  await open(p, 'offline');
  await p.evaluate(() => window.db.waitForPendingWrites());
  // A second, fresh client reads it from the relay.
  const q = await page();
  await open(q, 'offline');
  const server = await q.evaluate(async () => (await window.db.collection('notes').doc('n1').get({ source: 'server' })).data());
  assert.deepEqual(server, { text: 'written offline' });
  await p.close();
  await q.close();
});

test('two clients see each other\'s writes live through the relay', { timeout: 60000 }, async () => {
  const a = await page();
  const b = await page();
  await open(a, 'live');
  await open(b, 'live');
  await installTracker(b);
  await b.evaluate(() => {
    window.seen = [];
    window.track(window.db.collection('chat').orderBy('at'), undefined, (s) => {
      window.seen.push(s.docs.map((d) => d.data().text));
    });
  });
  await a.evaluate(() => window.db.collection('chat').add({ text: 'hello', at: 1 }));
  await b.waitForFunction(() => window.seen.some((x) => x.includes('hello')), null, { timeout: 20000 });
  await assertTrackersClean(b);
  await a.close();
  await b.close();
});

test('a query no index serves fails locally with failed-precondition naming the index', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'missingindex', { relay: undefined });
  const err = await p.evaluate(async () => {
    try {
      await window.db.collection('instruments').where('exchange', '==', 'X').orderBy('symbol', 'desc').get({ source: 'cache' });
      return null;
    } catch (e) { return { code: e.code, message: e.message }; }
  });
  assert.equal(err?.code, 'failed-precondition');
  assert.match(err.message, /"fieldPath": "symbol"/);
  // A listen with select() is refused locally, as the relay refuses it.
  const listen = await p.evaluate(() => {
    try {
      window.db.collection('instruments').select('symbol').onSnapshot(() => {});
      return null;
    } catch (e) { return { code: e.code, message: e.message }; }
  });
  assert.equal(listen?.code, 'invalid-argument');
  assert.match(listen.message, /listens cannot use select\(\)/);
  await p.close();
});

test('variadic methods take any number of arguments', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'variadic', { relay: undefined });
  const got = await p.evaluate(async () => {
    const { Filter } = window.hearth;
    const db = window.db;
    const ref = db.doc('v/one');
    await ref.set({ a: 0 });
    await ref.update('a', 1, 'b', 2, 'c', 3, 'd', 4, 'e', 5);
    const batch = db.batch();
    batch.update(ref, 'f', 6, 'g', 7, 'h', 8, 'i', 9);
    await batch.commit();
    const data = (await ref.get({ source: 'cache' })).data();
    for (let i = 0; i < 8; i++) await db.doc(`v/n${i}`).set({ n: i });
    const or = await db.collection('v').where(Filter.or(...[0, 1, 2, 3, 4, 5, 6].map((n) => Filter.where('n', '==', n))))
      .get({ source: 'cache' });
    const cursor = await db.collection('v').orderBy('n').startAt(5).get({ source: 'cache' });
    let undefinedValue = null;
    try { await ref.update('a', undefined); } catch (e) { undefinedValue = e.code; }
    return { data, or: or.size, cursor: cursor.docs.map((d) => d.data().n), undefinedValue };
  });
  assert.deepEqual(got.data, { a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9 });
  assert.equal(got.or, 7);
  assert.deepEqual(got.cursor, [5, 6, 7]);
  assert.equal(got.undefinedValue, 'invalid-argument');
  await p.close();
});

test('two tabs of one origin share one IndexedDB database and see each other\'s writes live', { timeout: 60000 }, async () => {
  const a = await page();
  const b = await page();
  // Local only: the tabs meet through IndexedDB and a BroadcastChannel, not the relay.
  await open(a, 'tabs', { relay: undefined });
  await open(b, 'tabs', { relay: undefined });
  await installTracker(b);
  await b.evaluate(() => {
    window.seen = [];
    window.track(window.db.collection('todo').where('done', '==', false), undefined, (s) => {
      window.seen.push(s.docs.map((d) => d.id).sort());
    });
  });
  await a.evaluate(() => window.db.collection('todo').doc('t1').set({ done: false, title: 'from tab a' }));
  await b.waitForFunction(() => window.seen.some((ids) => ids.includes('t1')), null, { timeout: 20000 });
  await a.evaluate(() => window.db.collection('todo').doc('t1').update({ done: true }));
  await b.waitForFunction(() => window.seen.at(-1).length === 0, null, { timeout: 20000 });
  await assertTrackersClean(b);
  await a.close();
  await b.close();
});

test('the engine runs in the service worker of the offline app (worker/) and answers from the local database', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'shopping', { relay: undefined });
  await p.evaluate(() => window.db.collection('shopping').doc('sw1').set({ text: 'cached for the worker', bought: false, createdAt: 1 }));
  await p.evaluate(() => window.db.close());
  await p.goto(`${env.server.origin}/worker/`);
  await p.waitForSelector('#engine[data-where=worker]', { timeout: 30000 });
  await p.waitForFunction(() => document.getElementById('list').textContent.includes('cached for the worker'), null, { timeout: 30000 });
  await p.close();
});

test('the engine runs in a dedicated worker: it writes, listens and syncs with a page', { timeout: 90000 }, async () => {
  const p = await page();
  const state = () => p.evaluate(() => JSON.stringify({ worker: window.fromWorker, page: window.pageSaw }));
  // Each step has its own deadline, so a failure names the step and the state.
  const step = async (what, run) => {
    let timer;
    const deadline = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('timed out')), 20000); });
    try {
      return await Promise.race([run(), deadline]);
    } catch (e) {
      throw new Error(`${what}: ${e.message}; state: ${await state().catch(() => '?')}`, { cause: e });
    } finally {
      clearTimeout(timer);
    }
  };
  await step('starting the worker', () => p.evaluate(async (relay) => {
    window.fromWorker = [];
    window.worker = new Worker('/pkg-tests/e2e/worker.js', { type: 'module' });
    window.worker.onmessage = (e) => window.fromWorker.push(e.data);
    window.worker.postMessage({ op: 'open', name: 'dedicated', relay });
  }, env.relay.url));
  await step('the worker opening the database', () => p.waitForFunction(
    () => window.fromWorker.some((m) => m.op === 'opened' || m.op === 'error'), null, { timeout: 0 }));
  const opened = await p.evaluate(() => window.fromWorker.find((m) => m.op === 'opened' || m.op === 'error'));
  assert.deepEqual(opened, { op: 'opened', global: 'undefined' });
  // The worker writes; the page (same database, through the relay and the tab channel) sees it.
  await step('the page opening the database', () => open(p, 'dedicated'));
  await installTracker(p);
  await p.evaluate(() => {
    window.pageSaw = [];
    window.track(window.db.collection('w'), undefined, (s) => window.pageSaw.push(s.docs.map((d) => d.id).sort().join()));
    window.worker.postMessage({ op: 'set', path: 'w/fromWorker', data: { by: 'worker' } });
  });
  await step('the page seeing the worker\'s write', () => p.waitForFunction(
    () => window.pageSaw.includes('fromWorker'), null, { timeout: 0 }));
  // The page writes; the worker's listener sees it, acknowledged.
  await step('the page\'s write being acknowledged', () => p.evaluate(() => window.db.doc('w/fromPage').set({ by: 'page' })));
  await step('the worker seeing the page\'s write acknowledged', () => p.waitForFunction(
    () => window.fromWorker.some((m) => m.op === 'snapshot' && m.ids.join() === 'fromPage,fromWorker' && !m.pending),
    null, { timeout: 0 }));
  assert.ok(!(await p.evaluate(() => window.fromWorker.some((m) => m.op === 'error'))));
  // The worker's listener replays its docChanges() too.
  await p.evaluate(() => window.worker.postMessage({ op: 'trackers' }));
  await step('the worker reporting its listener checks', () => p.waitForFunction(
    () => window.fromWorker.some((m) => m.op === 'trackers'), null, { timeout: 0 }));
  assertTrackers(await p.evaluate(() => window.fromWorker.find((m) => m.op === 'trackers').trackers));
  await assertTrackersClean(p);
  await step('closing', () => p.evaluate(() => { window.worker.terminate(); window.db.close(); }));
  await p.close();
});

test('the demo app adds an item and shows it at once', { timeout: 60000 }, async () => {
  const p = await env.browser.context.newPage();
  await p.goto(`${env.server.origin}/www/list/index.html`);
  await p.waitForFunction(() => document.getElementById('status').textContent.includes('items'), null, { timeout: 30000 });
  await p.fill('#text', 'buy bread');
  await p.click('form button');
  await p.waitForFunction(() => document.getElementById('items').textContent.includes('buy bread'), null, { timeout: 20000 });
  await p.close();
});

test('a document deleted elsewhere while offline leaves the cached result when back online', { timeout: 60000 }, async () => {
  const a = await page();
  const b = await page();
  await open(a, 'reconcile');
  await open(b, 'reconcile');
  await b.evaluate(async () => {
    await window.db.collection('r').doc('keep').set({ v: 1 });
    await window.db.collection('r').doc('gone').set({ v: 2 });
  });
  await installTracker(a);
  await a.evaluate(() => {
    window.seen = [];
    window.track(window.db.collection('r').where('v', '>', 0), undefined, (s) => window.seen.push(s.docs.map((d) => d.id).sort().join(',')));
  });
  await a.waitForFunction(() => window.seen.at(-1) === 'gone,keep', null, { timeout: 20000 });
  await a.evaluate(() => window.db.disableNetwork());
  await b.evaluate(() => window.db.collection('r').doc('gone').delete());
  await a.evaluate(() => window.db.enableNetwork());
  await a.waitForFunction(() => window.seen.at(-1) === 'keep', null, { timeout: 20000 });
  await assertTrackersClean(a);
  await a.close();
  await b.close();
});

// An app that keeps only its listeners (not the database object) must keep hearing the
// relay, as a Firestore instance lives until terminate(). Before, the object's garbage
// collection freed the engine's side: the listener went silent for good and the socket kept
// calling freed handlers ("closure invoked recursively or after being dropped").
test('a database the app no longer references keeps its listeners until close()', { timeout: 60000 }, async () => {
  const p = await page();
  const errors = [];
  p.on('pageerror', (e) => errors.push(String(e)));
  await p.evaluate(async (url) => {
    window.heard = [];
    // The database object is local to this function: only the listener outlives it.
    const db = await window.hearth.Hearth.open({ name: 'unreferenced', relay: url });
    window.unsubscribe = db.collection('items').onSnapshot((s) => {
      window.heard.push(s.docs.map((d) => d.id).join(','));
    });
  }, env.relay.url);
  await p.waitForFunction(() => window.heard.length > 0);
  // Collect garbage: the database object is unreachable from the page now.
  const cdp = await p.context().newCDPSession(p);
  await cdp.send('HeapProfiler.enable');
  for (let i = 0; i < 3; i++) {
    await cdp.send('HeapProfiler.collectGarbage');
    await new Promise((r) => setTimeout(r, 200));
  }
  const w = await page();
  await open(w, 'unreferenced');
  await w.evaluate(() => window.db.doc('items/late').set({ n: 1 }));
  await p.waitForFunction(() => window.heard.some((ids) => ids.includes('late')), null, { timeout: 15000 })
    .catch(() => {});
  const heard = await p.evaluate(() => window.heard);
  assert.ok(heard.some((ids) => ids.includes('late')), `the listener heard the write made after the collection: ${JSON.stringify(heard)}`);
  assert.deepEqual(errors, []);
  await w.close();
  await p.close();
});
