// End-to-end tests of the sync layer's ordering and answers, in headless Chromium against a real
// hearth-relay: the first server read after open. Run: node --test pkg-tests/e2e/
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
