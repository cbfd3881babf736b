// End-to-end tests of what a client's cache holds once its writes are acknowledged: the
// server's document, not the local estimate (increments counted once, however the relay's
// listen delta and the acknowledgement are ordered; server timestamps as the relay set them;
// increments on documents the client never read); Firestore's `serverTimestamps` snapshot
// option for a pending timestamp; and a batch too large for the relay refused when written
// instead of blocking every later write. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();

/** Polls `read` in page `p` until it returns `want` (JSON-equal), or fails after `ms`. */
async function eventually(p, read, arg, want, ms = 15000) {
  const t0 = Date.now();
  let got;
  while (Date.now() - t0 < ms) {
    got = await p.evaluate(read, arg);
    if (JSON.stringify(got) === JSON.stringify(want)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.deepEqual(got, want);
}

const cached = async (path) => {
  const s = await window.db.doc(path).get({ source: 'cache' }).catch(() => null);
  return s?.exists ? s.data() : null;
};

test('increments under a listener are counted once in the cache', { timeout: 120000 }, async () => {
  const p = await env.page();
  await env.open(p, 'conv-listened');
  await p.evaluate(async () => {
    window.seen = [];
    window.db.collection('c').onSnapshot((s) => { window.seen.push(s.docs.map((d) => d.data().n)); });
    const { FieldValue } = window.hearth;
    await window.db.doc('c/x').set({ n: 0 });
    const writes = [];
    for (let i = 0; i < 30; i++) writes.push(window.db.doc('c/x').update({ n: FieldValue.increment(1) }));
    await Promise.all(writes);
    await window.db.waitForPendingWrites();
  });
  await eventually(p, cached, 'c/x', { n: 30 });
  assert.deepEqual(await env.serverRead('conv-listened', 'c/x'), { n: 30 });
  // No snapshot ever showed more increments than were issued.
  const max = await p.evaluate(() => Math.max(...window.seen.flat()));
  assert.equal(max, 30);
});

test('a client that never read a document holds the server state after its increments', { timeout: 120000 }, async () => {
  const a = await env.page();
  await env.open(a, 'conv-blind');
  await a.evaluate(() => window.db.doc('c/shard').set({ n: 5 }));
  const other = await startBrowser();
  try {
    const b = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await env.open(b, 'conv-blind');
    await b.evaluate(async () => {
      const { FieldValue } = window.hearth;
      for (let i = 0; i < 3; i++) window.db.doc('c/shard').update('n', FieldValue.increment(1));
      await window.db.waitForPendingWrites();
    });
    await eventually(b, cached, 'c/shard', { n: 8 });
    assert.deepEqual(await env.serverRead('conv-blind', 'c/shard'), { n: 8 });
  } finally {
    await other.stop();
  }
});

test('a pending server timestamp reads as null, its estimate or its previous value; once acknowledged the cache holds the relay\'s', { timeout: 120000 }, async () => {
  const p = await env.page();
  await env.open(p, 'conv-ts');
  const r = await p.evaluate(async () => {
    const { FieldValue, Timestamp } = window.hearth;
    const ref = window.db.doc('t/a');
    await ref.set({ at: Timestamp.fromMillis(1000), v: 1 });
    await window.db.disableNetwork();
    ref.update({ at: FieldValue.serverTimestamp(), v: 2 });
    const s = await ref.get({ source: 'cache' });
    const ms = (t) => (t && typeof t.toMillis === 'function' ? t.toMillis() : t);
    const out = {
      pending: s.metadata.hasPendingWrites,
      plain: s.data().at,
      none: s.data({ serverTimestamps: 'none' }).at,
      estimate: Math.abs(ms(s.data({ serverTimestamps: 'estimate' }).at) - Date.now()) < 60000,
      previous: ms(s.data({ serverTimestamps: 'previous' }).at),
      getPrevious: ms(s.get('at', { serverTimestamps: 'previous' })),
      getPlain: s.get('at'),
      v: s.data().v,
    };
    try { s.data({ serverTimestamps: 'sometimes' }); out.bad = 'accepted'; } catch (e) { out.bad = e.code; }
    // A second pending timestamp keeps the value from before the first.
    ref.update({ at: FieldValue.serverTimestamp() });
    const s2 = await ref.get({ source: 'cache' });
    out.previous2 = ms(s2.data({ serverTimestamps: 'previous' }).at);
    // An overwrite of the field ends its pending state.
    ref.update({ at: 7 });
    out.after = (await ref.get({ source: 'cache' })).data().at;
    ref.update({ at: FieldValue.serverTimestamp() });
    await window.db.enableNetwork();
    await window.db.waitForPendingWrites();
    return out;
  });
  assert.deepEqual(r, { pending: true, plain: null, none: null, estimate: true, previous: 1000,
    getPrevious: 1000, getPlain: null, v: 2, bad: 'invalid-argument', previous2: 1000, after: 7 });
  const ms = (p, path) => p.evaluate(async (path) => {
    const s = await window.db.doc(path).get({ source: 'cache' });
    return s.data().at?.toMillis?.() ?? null;
  }, path);
  const server = await p.evaluate(async () => {
    const s = await window.db.doc('t/a').get({ source: 'server' });
    return { at: s.data().at.toMillis(), nanos: s.data().at.nanoseconds };
  });
  // The cache now holds the relay's timestamp, to the nanosecond.
  await eventually(p, async () => {
    const s = await window.db.doc('t/a').get({ source: 'cache' });
    return { at: s.data().at.toMillis(), nanos: s.data().at.nanoseconds, pending: s.metadata.hasPendingWrites };
  }, null, { ...server, pending: false });
  assert.ok(await ms(p, 't/a') > 1000);
});

test('a batch larger than the relay takes is refused when written, and later writes go through', { timeout: 120000 }, async () => {
  const p = await env.page();
  await env.open(p, 'conv-big');
  const r = await p.evaluate(async () => {
    const big = 'x'.repeat(900 * 1024);
    const b = window.db.batch();
    for (let i = 0; i < 20; i++) b.set(window.db.doc(`big/d${i}`), { big });
    let code = null;
    let message = '';
    try { await b.commit(); } catch (e) { code = e.code; message = e.message; }
    const cachedBig = (await window.db.doc('big/d0').get({ source: 'cache' }).catch(() => null))?.exists ?? false;
    await window.db.doc('small/a').set({ ok: true });
    await window.db.waitForPendingWrites();
    return { code, mentionsLimit: /limit/.test(message), cachedBig };
  });
  assert.deepEqual(r, { code: 'invalid-argument', mentionsLimit: true, cachedBig: false });
  assert.deepEqual(await env.serverRead('conv-big', 'small/a'), { ok: true });
  assert.equal(await env.serverRead('conv-big', 'big/d0'), null);
});
