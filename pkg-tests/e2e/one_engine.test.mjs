// One engine per origin (issue 23): the tabs of one browser profile share one Hearth engine
// (one WebSocket, one write queue), the others are proxies, and the lead moves when the
// leading tab closes or crashes. Headless Chromium against a real hearth-relay.
// Run: node --test pkg-tests/e2e/one_engine.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { useEnvironment, installTracker, assertTrackersClean, startBrowser } from './harness.mjs';

const env = useEnvironment();
/** Another browser profile: another client of the relay. */
let other;
before(async () => { other = await startBrowser(); });
after(async () => { await other?.stop(); });

/** Opens `name` in page `p` and says whether it leads. */
async function openIn(p, name) {
  await env.open(p, name);
  return p.evaluate(() => window.db.isLeader);
}

test('two tabs: one leads, the other is a proxy; one WebSocket for both', { timeout: 60000 }, async () => {
  const name = 'one-socket';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  let sockets = 0;
  for (const p of [a, b]) p.on('websocket', () => { sockets++; });
  const leads = [await openIn(a, name), await openIn(b, name)];
  assert.deepEqual(leads, [true, false]);
  await b.evaluate(async () => {
    await window.db.doc('notes/b').set({ from: 'b' });
    window.seen = (await window.db.doc('notes/b').get()).data();
  });
  assert.deepEqual(await b.evaluate(() => window.seen), { from: 'b' });
  assert.deepEqual(await env.serverRead(name, 'notes/b'), { from: 'b' });
  assert.equal(sockets, 1, 'one connection for the origin');
  assert.equal(await a.evaluate(() => window.db.clientId), await b.evaluate(() => window.db.clientId));
  await a.close();
  await b.close();
});

test('a SharedWorker that opens the database first hosts the engine; the tabs follow it, with no WebSocket of their own', { timeout: 60000 }, async () => {
  const name = 'shared-worker-host';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  let sockets = 0;
  for (const p of [a, b]) p.on('websocket', () => { sockets++; });
  const worker = await a.evaluate(({ name, relay }) => new Promise((resolve) => {
    window.worker = new SharedWorker('/pkg-tests/e2e/shared-worker.js', { type: 'module' });
    window.worker.port.onmessage = (e) => resolve(e.data);
    window.worker.port.postMessage({ name, relay });
  }), { name, relay: env.relay.url });
  assert.deepEqual(worker, { isLeader: true }, 'the worker leads');
  const leads = [await openIn(a, name), await openIn(b, name)];
  assert.deepEqual(leads, [false, false], 'both tabs follow the worker');
  // b listens; a writes; a remote client writes: b hears both, through the worker.
  await b.evaluate(() => {
    window.seen = [];
    window.db.collection('notes').onSnapshot((s) => { window.seen.push(s.docs.map((d) => d.id).join(',')); });
  });
  await a.evaluate(() => window.db.doc('notes/a').set({ from: 'a' }));
  const q = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  await q.evaluate(async ({ name, relay }) => {
    const db = await window.hearth.Hearth.open({ name, relay });
    await db.doc('notes/z').set({ from: 'another client' });
  }, { name, relay: env.relay.url });
  await b.waitForFunction(() => window.seen.at(-1) === 'a,z', null, { timeout: 10000 });
  assert.deepEqual(await env.serverRead(name, 'notes/a'), { from: 'a' });
  assert.equal(sockets, 0, 'the tabs opened no WebSocket: the worker holds the connection');
  await q.close();
  await a.close();
  await b.close();
});

test('a tab listening to another tab\'s increments never shows a value the relay never had (item 1)', { timeout: 60000 }, async () => {
  const name = 'increments-across-tabs';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  await openIn(a, name);
  await openIn(b, name);
  await a.evaluate(() => window.db.doc('c/x').set({ v: 0 }));
  await b.evaluate(() => {
    window.values = [];
    window.db.doc('c/x').onSnapshot({ includeMetadataChanges: true }, (s) => {
      if (s.exists) window.values.push(s.data().v);
    });
  });
  for (const p of [a, b]) {
    await p.evaluate(async () => {
      for (let i = 0; i < 5; i++) {
        await window.db.doc('c/x').update({ v: window.hearth.FieldValue.increment(1) });
      }
    });
  }
  await b.waitForFunction(() => window.values.at(-1) === 10, null, { timeout: 10000 });
  const values = await b.evaluate(() => window.values);
  for (let i = 1; i < values.length; i++) {
    assert.ok(values[i] >= values[i - 1], `went back: ${values.join(' ')}`);
  }
  assert.ok(Math.max(...values) <= 10, `above the relay's value: ${values.join(' ')}`);
  assert.deepEqual(await env.serverRead(name, 'c/x'), { v: 10 });
  await a.close();
  await b.close();
});

test('a follower\'s listeners, queries, batches and transactions are served by the leader', { timeout: 60000 }, async () => {
  const name = 'follower-api';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  await openIn(a, name);
  await openIn(b, name);
  await installTracker(b);
  const got = await b.evaluate(async () => {
    const db = window.db;
    const t = window.track(db.collection('items').where('n', '>=', 2).orderBy('n').limit(3), { includeMetadataChanges: true });
    const batch = db.batch();
    for (let n = 0; n < 6; n++) batch.set(db.doc(`items/i${n}`), { n });
    await batch.commit();
    await db.runTransaction(async (tx) => {
      const s = await tx.get(db.doc('items/i1'));
      tx.update(db.doc('items/i1'), { n: s.data().n + 10 });
    });
    await db.doc('items/i2').delete();
    await db.waitForPendingWrites();
    const q = await db.collection('items').orderBy('n').get();
    const cached = await db.collection('items').orderBy('n').get({ source: 'cache' });
    const count = await db.collection('items').count().get();
    await new Promise((r) => setTimeout(r, 300));
    t.stop();
    return {
      ids: q.docs.map((d) => d.id),
      cached: cached.docs.map((d) => d.id),
      count: count.data().count,
      last: t.snaps.at(-1),
    };
  });
  assert.deepEqual(got.ids, ['i0', 'i3', 'i4', 'i5', 'i1']);
  assert.deepEqual(got.cached, got.ids);
  assert.equal(got.count, 5);
  await assertTrackersClean(b);
  await a.close();
  await b.close();
});

test('a follower shows a pending server timestamp as null, its estimate or its previous value, in reads and listeners', { timeout: 60000 }, async () => {
  const name = 'follower-timestamps';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  await openIn(a, name);
  await openIn(b, name);
  // The origin's connection goes off only when every tab asks for it.
  await a.evaluate(() => window.db.disableNetwork());
  const got = await b.evaluate(async () => {
    const { FieldValue, Timestamp } = window.hearth;
    const ms = (t) => (t && typeof t.toMillis === 'function' ? t.toMillis() : t);
    const ref = window.db.doc('t/a');
    await ref.set({ at: Timestamp.fromMillis(1000), v: 1 });
    await window.db.disableNetwork();
    const heard = [];
    const stop = window.db.collection('t').onSnapshot((s) => {
      const d = s.docs[0];
      if (d && d.metadata.hasPendingWrites) {
        heard.push({ none: d.data().at, estimate: typeof ms(d.data({ serverTimestamps: 'estimate' }).at), previous: ms(d.data({ serverTimestamps: 'previous' }).at) });
      }
    });
    ref.update({ at: FieldValue.serverTimestamp(), v: 2 });
    const s = await ref.get({ source: 'cache' });
    await new Promise((r) => setTimeout(r, 200));
    stop();
    return {
      pending: s.metadata.hasPendingWrites,
      none: s.data().at,
      estimate: Math.abs(ms(s.data({ serverTimestamps: 'estimate' }).at) - Date.now()) < 60000,
      previous: ms(s.data({ serverTimestamps: 'previous' }).at),
      heard: heard.at(-1),
    };
  });
  assert.deepEqual(got, { pending: true, none: null, estimate: true, previous: 1000, heard: { none: null, estimate: 'number', previous: 1000 } });
  await a.close();
  await b.close();
});

/** Polls `f` in page `p` until it returns true; the milliseconds it took. */
async function until(p, f, arg, ms = 15000) {
  const t0 = Date.now();
  await p.waitForFunction(f, arg, { timeout: ms, polling: 10 });
  return Date.now() - t0;
}

// Each three times: a write applied twice showed in about one handover in seven before the
// new leader stopped serving its own old proxy's requests a second time.
for (const [how, round] of [['closes', 1], ['closes', 2], ['closes', 3], ['crashes', 1], ['crashes', 2], ['crashes', 3]]) {
  test(`the leader ${how} (${round}): a follower takes the lead, its listener goes on, nothing is lost or applied twice`, { timeout: 90000 }, async () => {
    const name = `handover-${how}-${round}`;
    const [a, b, c] = await Promise.all([env.page(), env.page(), env.page()]);
    await openIn(a, name);
    assert.equal(await openIn(b, name), false);
    assert.equal(await openIn(c, name), false);
    await installTracker(b);
    await b.evaluate(async () => {
      window.t = window.track(window.db.collection('items').orderBy('n'));
      await window.db.doc('counter/x').set({ v: 0 });
    });
    // Another client, ready to write the moment the leader goes.
    const o = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await o.evaluate(async ({ name, url }) => {
      window.odb = await window.hearth.Hearth.open({ name, relay: url });
      await window.odb.doc('warm/up').get();
    }, { name, url: env.relay.url });
    // Writes from both followers while the leader goes.
    const writes = [b, c].map((p) => p.evaluate(async () => {
      const done = [];
      for (let i = 0; i < 10; i++) {
        done.push(window.db.doc('counter/x').update({ v: window.hearth.FieldValue.increment(1) }));
        done.push(window.db.doc(`items/${Math.random().toString(36).slice(2)}`).set({ n: i }));
        await new Promise((r) => setTimeout(r, 15));
      }
      await Promise.all(done);
      return 'ok';
    }));
    await new Promise((r) => setTimeout(r, 60));
    const t0 = Date.now();
    if (how === 'crashes') {
      const cdp = await a.context().newCDPSession(a);
      cdp.send('Page.crash').catch(() => {});
    } else {
      await a.close();
    }
    // A query asked at once, and a write by the other client at once: when the query is
    // served, and when the follower's listener hears the write (the new leader's first
    // relay snapshot with it).
    const remote = o.evaluate(() => window.odb.doc('items/remote').set({ n: 99 }));
    const served = await b.evaluate(async () => {
      await window.db.collection('items').get({ source: 'cache' });
      return Date.now();
    }) - t0;
    await remote;
    await until(b, () => window.t.snaps.at(-1)?.ids.includes('remote'));
    const heard = await b.evaluate(() => Date.now()) - t0;
    await o.evaluate(() => window.odb.close());
    await o.close();
    assert.deepEqual(await Promise.all(writes), ['ok', 'ok']);
    const leads = await Promise.all([b, c].map((p) => p.evaluate(() => window.db.isLeader)));
    assert.equal(leads.filter(Boolean).length, 1, `one leader: ${leads}`);
    assert.deepEqual(await env.serverRead(name, 'counter/x'), { v: 20 });
    const ids = await b.evaluate(() => window.t.snaps.at(-1).ids.length);
    assert.equal(ids, 21, 'every item once');
    await assertTrackersClean(b);
    console.log(`one engine: leader ${how}: a follower's query served ${served} ms after, a remote write made then heard ${heard} ms after`);
    await b.close();
    await c.close();
    if (how === 'closes') return;
    await a.close().catch(() => {});
  });
}
