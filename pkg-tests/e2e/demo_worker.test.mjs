// End-to-end test of the service-worker offline app (worker/, the Shopping list): the site
// scripts/start serves (www/, pkg/, worker/) from a real relay with rules/demos.rules, one
// Chromium profile with several tabs and a second profile as another client. The app must
// install its service worker, cache its shell, host the origin's Hearth engine there (one
// WebSocket for every tab, counted by the relay's /metrics), load, read, write and stay live
// across tabs offline, and deliver the offline writes once back online. With
// HEARTH_SCREENSHOTS=1 it also writes docs/screenshots/worker-desktop.png (offline, two
// writes pending) and worker-phone.png (online).
// Run: HEARTH_RELAY_BIN=... node --test pkg-tests/e2e/demo_worker.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { root, useDemos } from './harness.mjs';

const env = useDemos('a', 'b');
/** WebSockets the pages of the first profile opened themselves (the service worker's are not
 *  pages' and are counted by the relay). */
let pageSockets = 0;


/** The relay's WebSocket connections: { open, total } from its Prometheus metrics. */
async function connections() {
  const text = await (await fetch(`${env.relay.http}/metrics`)).text();
  const read = (name) => Number(text.match(new RegExp(`^${name} (\\d+)`, 'm'))[1]);
  return { open: read('hearth_connections_open'), total: read('hearth_connections_total') };
}

/** Waits until `f()` (async) returns true, for up to `ms`. */
async function until(what, f, ms = 20000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await f();
    if (last === true) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

/** Opens (or reloads into) the app in a new tab of `browser`, ready. */
async function openApp(browser, { viewport = { width: 1280, height: 800 }, page } = {}) {
  const p = page ?? await browser.context.newPage();
  if (!page) {
    await p.setViewportSize(viewport);
    p.on('pageerror', (e) => console.error('page error:', e));
    if (browser === env.a) p.on('websocket', () => { pageSockets++; });
  }
  const response = await p.goto(`${env.relay.http}/worker/`);
  await p.waitForFunction(() => window.hearthReady === true, null, { timeout: 30000 });
  return { p, response };
}

/** The rows page `p` shows: [text, bought, pending]. */
const rows = (p) => p.$$eval('#list li', (lis) => lis.map((li) => [li.querySelector('.text').textContent,
  li.classList.contains('bought'), li.classList.contains('pending')]));
const count = (p, n) => p.waitForFunction((n) => document.querySelectorAll('#list li').length === n, n, { timeout: 20000 });
const settled = (p) => p.waitForFunction(() => !document.querySelector('#list li.pending') && document.getElementById('pending').hidden, null, { timeout: 30000 });
const engine = (p) => p.$eval('#engine', (e) => e.dataset.where);

async function add(p, text) {
  await p.fill('#text', text);
  await p.click('#add button');
}

test('the offline app: its shell cached, the engine in the service worker; offline it loads, writes and stays live across tabs over one WebSocket, and its writes reach another browser once online', { timeout: 120000 }, async () => {
  // Online, first visit: the worker installs, takes control and opens the database first.
  const { p: a } = await openApp(env.a);
  await a.waitForSelector('#engine[data-where=worker]');
  await a.waitForSelector('#conn.online');
  await a.waitForFunction(() => navigator.serviceWorker.controller !== null);
  assert.match(await a.textContent('#shell'), /cached by the service worker \(shopping-v2\)/);
  const cached = await a.evaluate(async () => (await (await caches.open('shopping-v2')).keys()).map((r) => new URL(r.url).pathname).sort());
  assert.deepEqual(cached, ['/pkg/firestore.js', '/pkg/hearth.js', '/pkg/hearth_bg.wasm', '/worker/', '/worker/app.js',
    '/worker/icons/icon-192.png', '/worker/icons/icon-512.png', '/worker/icons/icon-maskable-512.png',
    '/worker/manifest.webmanifest', '/worker/style.css', '/www/demo-ui.js']);

  // Installable: Chromium reads the manifest without errors and finds nothing missing.
  const cdp = await env.a.context.newCDPSession(a);
  const manifest = await cdp.send('Page.getAppManifest');
  assert.deepEqual(manifest.errors, []);
  const parsed = JSON.parse(manifest.data);
  assert.equal(parsed.display, 'standalone');
  assert.equal(parsed.start_url, './');
  assert.deepEqual((await cdp.send('Page.getInstallabilityErrors')).installabilityErrors, []);
  await cdp.detach();

  // A second tab follows the same engine; a write in one shows live in the other.
  const { p: b } = await openApp(env.a);
  await b.waitForSelector('#engine[data-where=worker]');
  assert.deepEqual(await a.evaluate(() => navigator.serviceWorker.controller.scriptURL), `${env.relay.http}/worker/sw.js`);
  await add(a, 'Milk');
  await count(b, 1);
  await settled(b);
  assert.deepEqual(await rows(b), [['Milk', false, false]]);
  // Two tabs, one connection to the relay: the service worker's; the pages opened none.
  await until('one connection for the two tabs', async () => (await connections()).open === 1);
  assert.equal(pageSockets, 0, 'no page opened a WebSocket');

  // Offline: both tabs load again from the cache, read the local database and share writes.
  await env.a.context.setOffline(true);
  for (const p of [a, b]) {
    const { response } = await openApp(env.a, { page: p });
    assert.ok(response.fromServiceWorker(), 'the page came from the service worker');
    await p.waitForSelector('#engine[data-where=worker]');
    await count(p, 1);
  }
  await a.waitForSelector('#conn.offline');
  await add(a, 'Eggs');
  await count(b, 2);
  await b.locator('#list li', { hasText: 'Milk' }).locator('input').check();
  await a.waitForFunction(() => document.querySelector('#list li:last-child')?.classList.contains('bought'));
  assert.deepEqual(await rows(a), [['Eggs', false, true], ['Milk', true, true]]);
  assert.deepEqual(await rows(b), [['Eggs', false, true], ['Milk', true, true]]);
  assert.equal(await b.textContent('#pending'), '2 not yet saved');
  if (process.env.HEARTH_SCREENSHOTS) {
    mkdirSync(join(root, 'docs/screenshots'), { recursive: true });
    await a.mouse.move(0, 0);
    await a.screenshot({ path: join(root, 'docs/screenshots/worker-desktop.png') });
  }

  // Another browser, online, does not have them: the writes wait in the first one's queue.
  const { p: other } = await openApp(env.b);
  await other.waitForSelector('#conn.online');
  await count(other, 1);
  await new Promise((r) => setTimeout(r, 1500));
  assert.deepEqual(await rows(other), [['Milk', false, false]]);

  // Back online: the pending writes reach the relay and the other browser.
  await env.a.context.setOffline(false);
  await other.waitForFunction(() => document.querySelectorAll('#list li').length === 2
    && document.querySelector('#list li:last-child').classList.contains('bought'), null, { timeout: 30000 });
  assert.deepEqual(await rows(other), [['Eggs', false, false], ['Milk', true, false]]);
  for (const p of [a, b]) await settled(p);
  await a.waitForSelector('#conn.online');
  // Still one connection per browser profile (two tabs here, one there), none of them a page's.
  await until('one connection per profile', async () => (await connections()).open === 2);
  assert.equal(pageSockets, 0, 'no page opened a WebSocket');

  // A phone-sized viewport: no horizontal overflow, even with a long unbroken word.
  const { p: phone } = await openApp(env.a, { viewport: { width: 375, height: 700 } });
  await count(phone, 2);
  await add(phone, 'Bread');
  await count(a, 3);
  await settled(a);
  if (process.env.HEARTH_SCREENSHOTS) {
    await settled(phone);
    await phone.screenshot({ path: join(root, 'docs/screenshots/worker-phone.png'), fullPage: true });
  }
  await add(a, 'Flour from https://example.invalid/a-very-long-address-without-any-space-in-it-at-all');
  await count(phone, 4);
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `page width ${width} on a 375-wide viewport`);
  await Promise.all([a.close(), b.close(), other.close(), phone.close()]);
});

test('when the browser stops the service worker, a tab takes the engine over and says so, still one WebSocket', { timeout: 90000 }, async () => {
  const { p: a } = await openApp(env.a);
  const { p: b } = await openApp(env.a);
  for (const p of [a, b]) await p.waitForSelector('#engine[data-where=worker]');
  const before = pageSockets;
  const cdp = await env.a.context.newCDPSession(a);
  await cdp.send('ServiceWorker.enable');
  await cdp.send('ServiceWorker.stopAllWorkers');
  // One tab now runs the engine (and its connection); the other follows it.
  await until('a tab to lead', async () => [await engine(a), await engine(b)].sort().join() === 'other-tab,tab');
  const [leader, follower] = (await engine(a)) === 'tab' ? [a, b] : [b, a];
  assert.match(await leader.textContent('#engine'), /in this tab/);
  await add(follower, 'Written after the worker stopped');
  await leader.waitForFunction(() => [...document.querySelectorAll('#list .text')].some((t) => t.textContent === 'Written after the worker stopped'));
  await settled(leader);
  const { p: other } = await openApp(env.b);
  await other.waitForFunction(() => [...document.querySelectorAll('#list .text')].some((t) => t.textContent === 'Written after the worker stopped'), null, { timeout: 20000 });
  assert.equal(pageSockets - before, 1, 'the leading tab opened the one WebSocket; the follower none');
  await cdp.detach();
  await Promise.all([a.close(), b.close(), other.close()]);
});
