// End-to-end test of the distributed counter demo (www/counter/): the page served from a
// real relay with rules/demos.rules, two Chromium profiles pressing at once. With
// HEARTH_SCREENSHOTS=1 it also writes docs/screenshots/counter-desktop.png and counter-phone.png.
// Run: node --test pkg-tests/e2e/demo_counter.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { root, demoPage, useDemos } from './harness.mjs';

const env = useDemos('alice', 'bob');


/** Opens the counter page in `browser` and waits until it knows the counter. */
async function open(browser, name, viewport = { width: 1280, height: 800 }) {
  const p = await demoPage(browser, env.relay, `/www/counter/`, name, viewport);
  await p.waitForSelector('#like:not([disabled])', { timeout: 30000 });
  return p;
}

/** The total page `p` shows, the shards' counts it shows, and whether anything is pending. */
const shown = (p) => p.evaluate(() => ({
  total: Number(document.getElementById('total').textContent.replace(/,/g, '')),
  shards: [...document.querySelectorAll('#shards li')].map((li) => Number(li.textContent.replace(/,/g, ''))),
  pending: !document.getElementById('pending').hidden || !!document.querySelector('#shards li.pending'),
}));

/** Waits until page `p` shows `total`, with nothing pending, and checks the shards add up. */
async function settled(p, total, timeout = 20000) {
  await p.waitForFunction((t) => document.getElementById('total').textContent.replace(/,/g, '') === String(t)
    && document.getElementById('pending').hidden && !document.querySelector('#shards li.pending'), total, { timeout });
  const s = await shown(p);
  assert.equal(s.shards.length, 10);
  assert.equal(s.shards.reduce((a, b) => a + b, 0), total, 'the shards add up to the total shown');
}

/** The counter's shards as the relay has them, read by a fresh client in page `p`. */
const serverTotal = (p) => p.evaluate(async () => {
  const { openFirestore, collection, getDocsFromServer } = await import('/pkg/firestore.js');
  const db = await openFirestore({ name: 'counter', relay: `ws://${location.host}` });
  const snap = await getDocsFromServer(collection(db, 'counters/likes/shards'));
  return snap.docs.reduce((sum, d) => sum + d.data().count, 0);
});

test('the counter demo: concurrent presses from two profiles, refused presses, offline presses, a phone viewport', { timeout: 90000 }, async () => {
  // Both open a counter that does not exist yet: it is created once, with 10 shards at 0.
  const [a, b] = await Promise.all([open(env.alice, 'alice'), open(env.bob, 'bob')]);
  await settled(a, 0);
  await settled(b, 0);
  await a.waitForSelector('#conn.online');
  assert.equal(await a.textContent('#num-shards'), '10');

  // 50 presses each, at the same time, clicked as a user would: both end on exactly 100.
  const clicks = (p) => (async () => { for (let i = 0; i < 50; i++) await p.click('#like'); })();
  await Promise.all([clicks(a), clicks(b)]);
  await settled(a, 100);
  await settled(b, 100);
  assert.match(await a.textContent('#mine'), /You pressed 50 times, all saved/);
  // Bob's "press 100 times": 100 increments at once, seen by Alice.
  await b.click('#like100');
  await settled(a, 200);
  await settled(b, 200);
  const spread = (await shown(a)).shards;
  assert.ok(spread.filter((n) => n > 0).length >= 5, `presses spread over the shards: ${spread}`);
  assert.equal(await serverTotal(a), 200, 'the relay has exactly 200');

  // A press of +2 (the page's own "try adding 2") is refused by the rules: the page says so
  // and the total comes back.
  assert.equal(await a.isVisible('#error'), false);
  await a.click('#cheat');
  await a.waitForSelector('#error', { state: 'visible' });
  assert.match(await a.textContent('#error-text'), /permission-denied/);
  await settled(a, 200);
  await a.click('#error-close');
  // A decrement through the modular API in the page, with nobody catching its rejection:
  // the page shows the refusal.
  await a.evaluate(() => {
    import('/pkg/firestore.js').then(async (f) => {
      const db = await f.openFirestore({ name: 'counter', relay: `ws://${location.host}` });
      return f.updateDoc(f.doc(db, 'counters/likes/shards/0'), 'count', f.increment(-1));
    });
  });
  await a.waitForSelector('#error', { state: 'visible' });
  assert.match(await a.textContent('#error-text'), /permission-denied/);
  await settled(a, 200);
  await a.click('#error-close');

  // Offline: Bob's presses count at once, stay pending through a reload (the relay's
  // WebSocket held, so they can only come from Bob's local queue), and reach Alice exactly
  // once Bob is back.
  let hold = false;
  const held = [];
  await env.bob.context.routeWebSocket(/\/v1\/ws/, (ws) => {
    if (hold) held.push(ws); else ws.connectToServer();
  });
  await env.bob.context.setOffline(true);
  await b.waitForSelector('#conn.offline');
  for (let i = 0; i < 7; i++) await b.click('#like');
  await b.waitForFunction(() => document.getElementById('total').textContent === '207');
  await b.waitForSelector('#pending:not([hidden])');
  assert.match(await b.textContent('#pending'), /7 not yet saved/);
  assert.ok((await shown(b)).pending);
  await new Promise((r) => setTimeout(r, 500));
  hold = true;
  await env.bob.context.setOffline(false);
  await b.reload();
  await b.waitForSelector('#like:not([disabled])');
  await b.waitForFunction(() => document.getElementById('total').textContent === '207'
    && !document.getElementById('pending').hidden);
  assert.match(await b.textContent('#conn'), /Connecting/);
  assert.ok(held.length > 0, 'the reloaded page tried the relay');
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal((await shown(a)).total, 200, 'the presses did not reach the relay before');
  hold = false;
  for (const ws of held) await ws.close();
  await settled(a, 207);
  await settled(b, 207);
  await b.waitForSelector('#conn.online');
  assert.equal(await serverTotal(a), 207, 'the relay has exactly 207: no press lost or doubled');

  // A phone-sized viewport: no horizontal overflow, with an error showing too.
  const phone = await open(env.alice, 'phone', { width: 375, height: 700 });
  await settled(phone, 207);
  if (process.env.HEARTH_SCREENSHOTS) {
    const dir = join(root, 'docs/screenshots');
    mkdirSync(dir, { recursive: true });
    await a.mouse.move(0, 0);
    await a.screenshot({ path: join(dir, 'counter-desktop.png') });
    await phone.screenshot({ path: join(dir, 'counter-phone.png') });
  }
  await phone.click('#cheat');
  await phone.waitForSelector('#error', { state: 'visible' });
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `page width ${width} on a 375-wide viewport`);
  await Promise.all([a.close(), b.close(), phone.close()]);
});
