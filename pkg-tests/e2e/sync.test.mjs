// End-to-end tests of the sync layer's ordering and answers, in headless Chromium against a real
// hearth-relay: the first server read after open, waitForPendingWrites() behind writes issued
// before it, and transactions (their result, retries on conflict, refusals). Run:
// node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;
const open = env.open;
const serverRead = env.serverRead;

/** Installs `window.within(promise, ms)`: the promise's outcome, or 'timed out' after `ms`. */
async function installWithin(p) {
  await p.evaluate(() => {
    window.within = (promise, ms) => Promise.race([
      promise.then((value) => ({ value }), (e) => ({ error: { code: e?.code, message: e?.message ?? String(e) } })),
      new Promise((r) => setTimeout(() => r({ timedOut: true }), ms)),
    ]);
  });
}

test('the first server read right after open does not wait for a timer', { timeout: 60000 }, async () => {
  const p = await page();
  const ms = await p.evaluate(async (url) => {
    const db = await window.hearth.Hearth.open({ name: 'firstread', relay: url });
    const t0 = performance.now();
    await db.doc('first/a').get({ source: 'server' });
    const doc = performance.now() - t0;
    const db2 = await window.hearth.Hearth.open({ name: 'firstquery', relay: url });
    const t1 = performance.now();
    await db2.collection('first').get({ source: 'server' });
    return { doc, query: performance.now() - t1 };
  }, env.relay.url);
  assert.ok(ms.doc < 2000, `the first document read took ${ms.doc} ms`);
  assert.ok(ms.query < 2000, `the first query took ${ms.query} ms`);
  await p.close();
});

test('a server read with an unreachable relay fails with unavailable when the connection fails', { timeout: 60000 }, async () => {
  const p = await page();
  const r = await p.evaluate(async () => {
    // Port 1 on loopback refuses at once.
    const db = await window.hearth.Hearth.open({ name: 'unreachable', relay: 'ws://127.0.0.1:1' });
    const t0 = performance.now();
    try {
      await db.doc('x/y').get({ source: 'server' });
      return { ms: performance.now() - t0, code: null };
    } catch (e) {
      return { ms: performance.now() - t0, code: e.code };
    }
  });
  assert.equal(r.code, 'unavailable');
  assert.ok(r.ms < 2000, `the failed read took ${r.ms} ms`);
  await p.close();
});

test('waitForPendingWrites() waits for a write issued just before it', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'pendingorder');
  await installWithin(p);
  const early = await p.evaluate(async () => {
    await window.db.disableNetwork();
    // Not awaited: the write is issued, then the wait.
    window.db.doc('w/1').set({ v: 1 });
    window.waited = window.db.waitForPendingWrites();
    return window.within(window.waited, 500);
  });
  assert.deepEqual(early, { timedOut: true }, 'waitForPendingWrites() settled while the write was pending offline');
  const late = await p.evaluate(async () => {
    await window.db.enableNetwork();
    return window.within(window.waited, 20000);
  });
  assert.deepEqual(late, { value: undefined });
  assert.deepEqual(await serverRead('pendingorder', 'w/1'), { v: 1 });
  await p.close();
});

test('waitForPendingWrites() in a second tab waits for that tab\'s own write', { timeout: 60000 }, async () => {
  const a = await page();
  const b = await page();
  await open(a, 'pendingtabs');
  await open(b, 'pendingtabs');
  await installWithin(b);
  await a.evaluate(() => window.db.disableNetwork());
  const early = await b.evaluate(async () => {
    await window.db.disableNetwork();
    window.db.doc('w/2').set({ v: 2 });
    window.waited = window.db.waitForPendingWrites();
    return window.within(window.waited, 500);
  });
  assert.deepEqual(early, { timedOut: true });
  const late = await b.evaluate(async () => {
    await window.db.enableNetwork();
    return window.within(window.waited, 20000);
  });
  assert.deepEqual(late, { value: undefined });
  assert.deepEqual(await serverRead('pendingtabs', 'w/2'), { v: 2 });
  await a.close();
  await b.close();
});

test('a transaction resolves with its update function\'s value and its writes are visible', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'txok');
  await installWithin(p);
  const r = await p.evaluate(async () => {
    const ref = window.db.doc('t/ok');
    await ref.set({ n: 1 });
    return window.within(window.db.runTransaction(async (tx) => {
      const s = await tx.get(ref);
      tx.update(ref, { n: s.data().n + 1 });
      return 'returned';
    }), 10000);
  });
  assert.deepEqual(r, { value: 'returned' });
  assert.deepEqual(await serverRead('txok', 't/ok'), { n: 2 });
  const cached = await p.evaluate(async () => (await window.db.doc('t/ok').get({ source: 'cache' })).data());
  assert.deepEqual(cached, { n: 2 });
  await p.close();
});

test('concurrent transactions of one client each commit their own writes', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'txmany');
  await installWithin(p);
  const r = await p.evaluate(async () => {
    // Write-only transactions started together commit in the same millisecond: each needs
    // its own batch id, or the relay answers a later one as a retry of an earlier one.
    const runs = Array.from({ length: 20 }, (_, i) => window.db.runTransaction(async (tx) => {
      tx.set(window.db.doc(`many/d${i}`), { i });
      return i;
    }));
    return window.within(Promise.all(runs), 20000);
  });
  assert.deepEqual(r, { value: Array.from({ length: 20 }, (_, i) => i) });
  const q = await page();
  await open(q, 'txmany');
  const ids = await q.evaluate(async () => (await window.db.collection('many').get({ source: 'server' })).size);
  assert.equal(ids, 20);
  await q.close();
  await p.close();
});

test('a transaction whose reads changed is retried with fresh reads; exhausted retries reject with aborted', { timeout: 90000 }, async () => {
  const p = await page();
  await open(p, 'txretry');
  await installWithin(p);
  const r = await p.evaluate(async () => {
    const ref = window.db.doc('t/c');
    await ref.set({ n: 0 });
    // The first attempt's read is made stale by a write before its commit.
    let attempts = 0;
    const once = await window.within(window.db.runTransaction(async (tx) => {
      attempts += 1;
      const s = await tx.get(ref);
      if (attempts === 1) await ref.set({ n: 10 });
      tx.update(ref, { n: s.data().n + 1 });
      return s.data().n;
    }), 20000);
    // Every attempt's read is made stale.
    let always = 0;
    const never = await window.within(window.db.runTransaction(async (tx) => {
      always += 1;
      await tx.get(ref);
      await ref.set({ n: 100 + always });
      tx.update(ref, { n: -1 });
    }), 30000);
    return { once, attempts, never, always };
  });
  assert.deepEqual(r.once, { value: 10 }, JSON.stringify(r));
  assert.equal(r.attempts, 2);
  assert.equal(r.never.error?.code, 'aborted', JSON.stringify(r));
  assert.equal(r.always, 5);
  assert.deepEqual(await serverRead('txretry', 't/c'), { n: 105 });
  await p.close();
});

test('transactions of two clients on one counter lose no increment', { timeout: 120000 }, async () => {
  const other = await startBrowser();
  try {
    const a = await page();
    const b = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await open(a, 'txcounter');
    await open(b, 'txcounter');
    await a.evaluate(() => window.db.doc('counters/c').set({ n: 0 }));
    const N = 8;
    const run = (p) => p.evaluate(async (N) => {
      const ref = window.db.doc('counters/c');
      let attempts = 0;
      const results = [];
      for (let i = 0; i < N; i++) {
        try {
          await window.db.runTransaction(async (tx) => {
            attempts += 1;
            const s = await tx.get(ref);
            tx.update(ref, { n: s.data().n + 1 });
          });
          results.push('ok');
        } catch (e) { results.push(e.code ?? String(e)); }
        await new Promise((r) => setTimeout(r, 10 + Math.random() * 20));
      }
      return { results, attempts };
    }, N);
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('the transactions did not settle in 60 s')), 60000));
    const [ra, rb] = await Promise.race([Promise.all([run(a), run(b)]), timeout]);
    const counter = await serverRead('txcounter', 'counters/c');
    const ok = [...ra.results, ...rb.results].filter((x) => x === 'ok').length;
    assert.equal(counter.n, ok, `counter ${counter.n} != committed ${ok}: ${JSON.stringify({ ra, rb })}`);
    assert.equal(ok, 2 * N, JSON.stringify({ ra, rb }));
    await a.close();
    await b.close();
  } finally {
    await other.stop();
  }
});

test('a transaction whose update function throws rejects with that error and writes nothing', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'txthrow');
  await installWithin(p);
  const r = await p.evaluate(async () => {
    const ref = window.db.doc('t/thrown');
    return window.within(window.db.runTransaction(async (tx) => {
      await tx.get(ref);
      tx.set(ref, { written: true });
      throw new Error('the update function gave up');
    }), 10000);
  });
  assert.deepEqual(r, { error: { code: undefined, message: 'the update function gave up' } });
  assert.equal(await serverRead('txthrow', 't/thrown'), null);
  await p.close();
});
