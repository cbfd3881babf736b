// The contexts of one origin sharing a database (issue 23), in headless Chromium against a
// real hearth-relay: what they share must be one thing, however they race.
// Run: node --test pkg-tests/e2e/origin.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();
/** Another browser profile, for reads that must not share this origin's IndexedDB. */
let other;
before(async () => { other = await startBrowser(); });
after(async () => { await other?.stop(); });

/** Document `path` of database `name` as the relay has it, read from the other profile. */
async function relayHas(name, path) {
  const p = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  try {
    return await p.evaluate(async ({ name, url, path }) => {
      const db = await window.hearth.Hearth.open({ name, relay: url });
      const s = await db.doc(path).get({ source: 'server' });
      await db.close();
      return s.exists ? s.data() : null;
    }, { name, url: env.relay.url, path });
  } finally {
    await p.close();
  }
}

test('tabs opening a fresh database at once share one client id (the write queue\'s idempotency key)', { timeout: 60000 }, async () => {
  const tabs = await Promise.all([env.page(), env.page(), env.page()]);
  const differ = [];
  for (let i = 0; i < 8; i++) {
    const name = `fresh-${i}`;
    const ids = await Promise.all(tabs.map((p) => p.evaluate(async ({ name, url }) => {
      const db = await window.hearth.Hearth.open({ name, relay: url });
      const id = db.clientId;
      await db.close();
      return id;
    }, { name, url: env.relay.url })));
    if (new Set(ids).size !== 1) differ.push(`${name}: ${ids.join(' ')}`);
    // Opened again later, each finds the stored one.
    const again = await tabs[0].evaluate(async ({ name, url }) => {
      const db = await window.hearth.Hearth.open({ name, relay: url });
      const id = db.clientId;
      await db.close();
      return id;
    }, { name, url: env.relay.url });
    if (again !== ids[0]) differ.push(`${name} reopened: ${again}, first ${ids[0]}`);
  }
  assert.deepEqual(differ, []);
  for (const p of tabs) await p.close();
});

test('clearPersistence() in one tab refuses while another has the database open, and its unsent writes stay', { timeout: 60000 }, async () => {
  const name = 'clear-while-open';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  await env.open(a, name);
  await a.evaluate(async () => {
    await window.db.disableNetwork();
    window.db.doc('notes/unsent').set({ text: 'written offline' });
    await new Promise((r) => setTimeout(r, 300));
  });
  const refused = await b.evaluate((name) => window.code(() => window.hearth.Hearth.clearPersistence(name)), name);
  assert.equal(refused, 'failed-precondition');
  await a.evaluate(async () => {
    await window.db.enableNetwork();
    await window.db.waitForPendingWrites();
  });
  assert.deepEqual(await env.serverRead(name, 'notes/unsent'), { text: 'written offline' });
  // Closed everywhere, it goes.
  await a.evaluate(() => window.db.close());
  assert.equal(await b.evaluate((name) => window.code(() => window.hearth.Hearth.clearPersistence(name)), name), 'ok');
  await a.close();
  await b.close();
});

test('a tab whose database another tab upgrades ends its listeners and requests with why, and stops dialling the relay', { timeout: 60000 }, async () => {
  const name = 'upgraded-elsewhere';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  let sockets = 0;
  a.on('websocket', () => { sockets++; });
  await env.open(a, name);
  await a.evaluate(async () => {
    await window.db.doc('items/x').set({ n: 1 });
    window.ended = null;
    window.db.collection('items').onSnapshot(() => {}, (e) => { window.ended = e.code; });
  });
  // A newer version of the app opens the database with a higher schema version.
  await b.evaluate(async (name) => {
    const current = (await indexedDB.databases()).find((d) => d.name === `hearth:${name}`).version;
    await new Promise((res, rej) => {
      const r = indexedDB.open(`hearth:${name}`, current + 1);
      r.onsuccess = () => { r.result.close(); res(); };
      r.onerror = () => rej(r.error);
    });
  }, name);
  await a.waitForFunction(() => window.ended !== null, null, { timeout: 10000 });
  assert.equal(await a.evaluate(() => window.ended), 'failed-precondition');
  const read = await a.evaluate(() => window.code(() => window.db.doc('items/x').get({ source: 'server' })));
  assert.equal(read, 'failed-precondition');
  const before = sockets;
  await new Promise((r) => setTimeout(r, 3000));
  assert.equal(sockets, before, 'no reconnection after the database was closed');
  await a.close();
  await b.close();
});

test('a write made in a tab that is offline reaches the relay through another tab that is online, and its promise settles', { timeout: 60000 }, async () => {
  const name = 'through-another-tab';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  await env.open(a, name);
  await env.open(b, name);
  await a.evaluate(async () => {
    await window.db.disableNetwork();
    window.written = window.db.doc('notes/n').set({ v: 1 }).then(() => 'ok', (e) => e.code);
  });
  const t0 = Date.now();
  let got = null;
  while (got === null && Date.now() - t0 < 8000) {
    got = await relayHas(name, 'notes/n');
    if (got === null) await new Promise((r) => setTimeout(r, 200));
  }
  assert.deepEqual(got, { v: 1 }, `not on the relay ${Date.now() - t0} ms after the write`);
  console.log(`origin: the offline tab's write was on the relay within ${Date.now() - t0} ms`);
  const settled = await a.evaluate(() => Promise.race([window.written, new Promise((r) => setTimeout(() => r('unsettled'), 5000))]));
  assert.equal(settled, 'ok');
  await a.close();
  await b.close();
});
