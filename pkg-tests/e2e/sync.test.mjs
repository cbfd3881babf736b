// End-to-end tests of the sync layer's ordering and answers, in headless Chromium against a real
// hearth-relay: the first server read after open, and waitForPendingWrites() behind writes
// issued before it. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;

/** Opens a database in the page and keeps it as window.db. */
async function open(p, name, extra = {}) {
  await p.evaluate(async ({ name, url, extra }) => {
    window.db = await window.hearth.Hearth.open({ name, relay: url, ...extra });
  }, { name, url: env.relay.url, extra });
}

/** Installs `window.within(promise, ms)`: the promise's outcome, or 'timed out' after `ms`. */
async function installWithin(p) {
  await p.evaluate(() => {
    window.within = (promise, ms) => Promise.race([
      promise.then((value) => ({ value }), (e) => ({ error: { code: e?.code, message: e?.message ?? String(e) } })),
      new Promise((r) => setTimeout(() => r({ timedOut: true }), ms)),
    ]);
  });
}

/** Reads `path` from the relay through a fresh page (a second client of database `name`). */
async function serverRead(name, path) {
  const q = await page();
  await open(q, name);
  const data = await q.evaluate(async (path) => {
    const s = await window.db.doc(path).get({ source: 'server' });
    return s.exists ? s.data() : null;
  }, path);
  await q.close();
  return data;
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
