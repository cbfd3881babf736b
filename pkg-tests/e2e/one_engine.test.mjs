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

/** Polls `f` in page `p` until it returns true; the milliseconds it took. */
async function until(p, f, arg, ms = 15000) {
  const t0 = Date.now();
  await p.waitForFunction(f, arg, { timeout: ms, polling: 10 });
  return Date.now() - t0;
}

for (const how of ['closes', 'crashes']) {
  test(`the leader ${how}: a follower takes the lead, its listener goes on, nothing is lost or applied twice`, { timeout: 90000 }, async () => {
    const name = `handover-${how}`;
    const [a, b, c] = await Promise.all([env.page(), env.page(), env.page()]);
    await openIn(a, name);
    assert.equal(await openIn(b, name), false);
    assert.equal(await openIn(c, name), false);
    await installTracker(b);
    await b.evaluate(async () => {
      window.t = window.track(window.db.collection('items').orderBy('n'));
      await window.db.doc('counter/x').set({ v: 0 });
    });
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
    assert.deepEqual(await Promise.all(writes), ['ok', 'ok']);
    // Which follower leads now, and how soon it served a read.
    const leads = await Promise.all([b, c].map((p) => p.evaluate(() => window.db.isLeader)));
    assert.equal(leads.filter(Boolean).length, 1, `one leader: ${leads}`);
    const served = Date.now() - t0;
    // A write from another profile reaches the follower's listener through the new leader.
    const o = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    try {
      await o.evaluate(async ({ name, url }) => {
        const db = await window.hearth.Hearth.open({ name, relay: url });
        await db.doc('items/remote').set({ n: 99 });
        await db.close();
      }, { name, url: env.relay.url });
    } finally {
      await o.close();
    }
    await until(b, () => window.t.snaps.at(-1)?.ids.includes('remote'));
    const heard = Date.now() - t0;
    assert.deepEqual(await env.serverRead(name, 'counter/x'), { v: 20 });
    const ids = await b.evaluate(() => window.t.snaps.at(-1).ids.length);
    assert.equal(ids, 21, 'every item once');
    await assertTrackersClean(b);
    console.log(`one engine: leader ${how}: writes settled and a follower led within ${served} ms; a remote write heard ${heard} ms after`);
    await b.close();
    await c.close();
    if (how === 'closes') return;
    await a.close().catch(() => {});
  });
}
