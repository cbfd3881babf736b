// End-to-end tests of blind writes: a write to a document this client has never read (not in its
// cache) is queued and left for the relay to decide, as Firestore does; the relay's refusal rolls
// it back. Two browser profiles are two clients. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;
const open = env.open;
const serverRead = env.serverRead;

/** Runs `body(a, b)` with `a` a page of the shared browser and `b` one of a separate profile,
 *  both with database `name` open. */
async function withTwoClients(name, body) {
  const other = await startBrowser();
  try {
    const a = await page();
    const b = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await open(a, name);
    await open(b, name);
    await body(a, b);
    await a.close();
  } finally {
    await other.stop();
  }
}

test('increments of shards another client created succeed without reading them', { timeout: 60000 }, async () => {
  await withTwoClients('blindcounter', async (a, b) => {
    await a.evaluate(() => Promise.all([0, 1, 2].map((i) => window.db.doc(`shards/${i}`).set({ count: 0 }))));
    const outcomes = await b.evaluate(async () => {
      const { FieldValue } = window.hearth;
      const writes = [];
      for (let round = 0; round < 5; round++) {
        for (const i of [0, 1, 2]) {
          writes.push(window.db.doc(`shards/${i}`).update('count', FieldValue.increment(1)));
        }
      }
      return Promise.all(writes.map((w) => w.then(() => 'ok', (e) => e.code ?? String(e))));
    });
    assert.deepEqual(outcomes, new Array(15).fill('ok'));
    let total = 0;
    for (const i of [0, 1, 2]) total += (await serverRead('blindcounter', `shards/${i}`)).count;
    assert.equal(total, 15);
  });
});

test('an update of a document that exists nowhere is refused by the relay and rolled back', { timeout: 60000 }, async () => {
  await withTwoClients('blindmissing', async (_a, b) => {
    const r = await b.evaluate(async () => {
      // Offline first: the refusal must come from the relay, not from the local cache.
      await window.db.disableNetwork();
      const ref = window.db.doc('nowhere/x');
      const settled = { v: 'pending' };
      const write = ref.update({ v: 1 }).then(() => 'ok', (e) => e.code ?? String(e));
      write.then((v) => { settled.v = v; });
      await new Promise((r) => setTimeout(r, 300));
      const offline = settled.v;
      await window.db.enableNetwork();
      const code = await write;
      const cached = await ref.get({ source: 'cache' });
      return { offline, code, cached: cached.exists };
    });
    assert.deepEqual(r, { offline: 'pending', code: 'not-found', cached: false });
  });
});

test('offline, an update of an uncached document stays pending and reaches the relay when online', { timeout: 60000 }, async () => {
  await withTwoClients('blindoffline', async (a, b) => {
    await a.evaluate(() => window.db.doc('items/1').set({ n: 1, keep: true }));
    const r = await b.evaluate(async () => {
      await window.db.disableNetwork();
      const settled = { v: 'pending' };
      const write = window.db.doc('items/1').update({ n: 2 });
      write.then(() => { settled.v = 'ok'; }, (e) => { settled.v = e.code ?? String(e); });
      await new Promise((r) => setTimeout(r, 500));
      const offline = settled.v;
      await window.db.enableNetwork();
      await window.db.waitForPendingWrites();
      await write;
      return { offline, online: settled.v };
    });
    assert.deepEqual(r, { offline: 'pending', online: 'ok' });
    assert.deepEqual(await serverRead('blindoffline', 'items/1'), { n: 2, keep: true });
  });
});

test('a batch of a set and an update of an uncached existing document commits both', { timeout: 60000 }, async () => {
  await withTwoClients('blindbatch', async (a, b) => {
    await a.evaluate(() => window.db.doc('b/existing').set({ n: 1 }));
    const code = await b.evaluate(async () => {
      const batch = window.db.batch();
      batch.set(window.db.doc('b/new'), { made: true });
      batch.update(window.db.doc('b/existing'), { n: 2 });
      return batch.commit().then(() => 'ok', (e) => e.code ?? String(e));
    });
    assert.equal(code, 'ok');
    assert.deepEqual(await serverRead('blindbatch', 'b/new'), { made: true });
    assert.deepEqual(await serverRead('blindbatch', 'b/existing'), { n: 2 });
  });
});
