// End-to-end test of the Todo List demo (www/todo/): the site scripts/start serves (www/,
// pkg/, worker/) from a real relay with rules/demos.rules and the development auth secret,
// two Chromium profiles signed in as two users. With HEARTH_SCREENSHOTS=1 it also writes
// docs/screenshots/todo-desktop.png and todo-phone.png.
// Run: node --test pkg-tests/e2e/demo_todo.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { root, demoPage, useDemos, DEMO_SECRET } from './harness.mjs';

const env = useDemos('alice', 'bob');


/** Opens the todo page in `browser` and signs in as `name` (a reload stays signed in). */
async function signedIn(browser, name, viewport = { width: 1280, height: 800 }) {
  const p = await demoPage(browser, env.relay, `/www/todo/`, name, viewport);
  await p.waitForSelector('#signin:not([hidden]), #app:not([hidden])');
  if (await p.isVisible('#signin')) {
    await p.fill('#name', name);
    await p.click('#signin button');
  }
  await p.waitForFunction(() => window.hearthReady === true);
  assert.equal(await p.textContent('#who'), name.toLowerCase());
  return p;
}

/** The rows page `p` shows: [text, creator shown, done, pending]. */
const rows = (p) => p.$$eval('#list li', (lis) => lis.map((li) => [li.querySelector('.text').textContent,
  li.querySelector('.meta').textContent, li.classList.contains('done'), li.classList.contains('pending')]));
const row = (p, text) => p.locator('#list li', { hasText: text });
const texts = async (p) => (await rows(p)).map((r) => r[0]);

async function add(p, text) {
  await p.fill('#text', text);
  await p.click('#add button');
}

test('the todo demo: live between two users, the rules shown in the page, offline writes, a phone viewport', { timeout: 90000 }, async () => {
  assert.match(readFileSync(join(root, 'scripts/start'), 'utf8'), new RegExp(`HEARTH_AUTH_SECRET:-${DEMO_SECRET}`),
    'scripts/start gives the relay the secret the page signs with');
  const a = await signedIn(env.alice, 'Alice');
  const b = await signedIn(env.bob, 'Bob');
  await a.waitForSelector('#conn.online');
  assert.equal(await a.textContent('#who'), 'alice');

  // Each sees the other's items live, in creation order, with who made them.
  await add(a, 'Buy milk');
  await b.waitForFunction(() => document.querySelectorAll('#list li').length === 1);
  await add(b, 'Walk the dog');
  await a.waitForFunction(() => document.querySelectorAll('#list li').length === 2);
  await b.waitForFunction(() => !document.querySelector('#list li.pending'));
  assert.deepEqual(await rows(a), [['Buy milk', 'you', false, false], ['Walk the dog', 'bob', false, false]]);
  assert.deepEqual(await rows(b), [['Buy milk', 'alice', false, false], ['Walk the dog', 'you', false, false]]);

  // The creator marks an item done; the other user sees it.
  await row(a, 'Buy milk').locator('input').check();
  await b.waitForFunction(() => document.querySelector('#list li')?.classList.contains('done'));

  // Bob may not delete Alice's item: the page says so, and the item stays for both.
  assert.equal(await b.isVisible('#error'), false);
  await row(b, 'Buy milk').locator('.delete').click();
  await b.waitForSelector('#error', { state: 'visible' });
  assert.match(await b.textContent('#error-text'), /permission-denied/);
  await b.waitForFunction(() => document.querySelectorAll('#list li').length === 2);
  assert.deepEqual(await texts(a), ['Buy milk', 'Walk the dog']);
  assert.deepEqual(await texts(b), ['Buy milk', 'Walk the dog']);
  // Nor mark it undone.
  await b.click('#error-close');
  await row(b, 'Buy milk').locator('input').uncheck();
  await b.waitForSelector('#error', { state: 'visible' });
  await b.waitForFunction(() => document.querySelector('#list li').classList.contains('done'));
  await b.click('#error-close');
  // Alice may delete her own.
  await add(a, 'Call the plumber');
  await b.waitForFunction(() => document.querySelectorAll('#list li').length === 3);
  await row(a, 'Call the plumber').locator('.delete').click();
  await b.waitForFunction(() => document.querySelectorAll('#list li').length === 2);
  assert.equal(await a.isVisible('#error'), false);

  // Offline: Bob's new item shows as pending, outlives a reload, and reaches Alice once Bob
  // is back. The reload happens with the browser back online but the relay's WebSocket held
  // (no reply), so the page loads and the write can only come from Bob's local queue.
  let hold = false;
  const held = [];
  await env.bob.context.routeWebSocket(/\/v1\/ws/, (ws) => {
    if (hold) held.push(ws); else ws.connectToServer();
  });
  await env.bob.context.setOffline(true);
  await b.waitForSelector('#conn.offline');
  await add(b, 'Written offline');
  await row(b, 'Written offline').and(b.locator('.pending')).waitFor();
  await b.waitForSelector('#pending:not([hidden])');
  assert.match(await b.textContent('#pending'), /1 not yet saved/);
  await new Promise((r) => setTimeout(r, 500));
  hold = true;
  await env.bob.context.setOffline(false);
  await b.reload();
  await b.waitForFunction(() => window.hearthReady === true);
  await row(b, 'Written offline').and(b.locator('.pending')).waitFor();
  assert.match(await b.textContent('#conn'), /Connecting/);
  assert.ok(held.length > 0, 'the reloaded page tried the relay');
  await new Promise((r) => setTimeout(r, 1000));
  assert.deepEqual(await texts(a), ['Buy milk', 'Walk the dog'], 'the write did not reach the relay before');
  hold = false;
  for (const ws of held) await ws.close();
  await a.waitForFunction(() => [...document.querySelectorAll('#list .text')].some((t) => t.textContent === 'Written offline'), null, { timeout: 20000 });
  await b.waitForFunction(() => !document.querySelector('#list li.pending') && document.querySelector('#pending').hidden);
  await b.waitForSelector('#conn.online');
  assert.deepEqual(await rows(a), [['Buy milk', 'you', true, false], ['Walk the dog', 'bob', false, false],
    ['Written offline', 'bob', false, false]]);

  // A phone-sized viewport: no horizontal overflow, even with a long unbroken word.
  const phone = await signedIn(env.alice, 'Alice', { width: 375, height: 700 });
  await phone.waitForFunction(() => document.querySelectorAll('#list li').length === 3);
  if (process.env.HEARTH_SCREENSHOTS) {
    const dir = join(root, 'docs/screenshots');
    mkdirSync(dir, { recursive: true });
    await a.mouse.move(0, 0);
    await a.screenshot({ path: join(dir, 'todo-desktop.png') });
    await phone.screenshot({ path: join(dir, 'todo-phone.png') });
  }
  await add(a, 'Renew https://example.invalid/a-very-long-address-without-any-space-in-it-at-all');
  await phone.waitForFunction(() => document.querySelectorAll('#list li').length === 4);
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `page width ${width} on a 375-wide viewport`);
  await Promise.all([a.close(), b.close(), phone.close()]);
});

test('the shared list demo (www/list/) still works for a client without a token under the demos\' rules', { timeout: 30000 }, async () => {
  const p = await env.alice.context.newPage();
  await p.goto(`${env.relay.http}/www/list/`);
  await p.waitForFunction(() => /in sync with the relay/.test(document.getElementById('status').textContent));
  await p.fill('#text', 'anonymous item');
  await p.click('#add button');
  await p.waitForFunction(() => /^1 items · in sync/.test(document.getElementById('status').textContent)
    && !document.querySelector('#items li.pending'));
  // And the todo list is closed to it: a caller without a token reads nothing there.
  const denied = await p.evaluate(async () => {
    const { openFirestore, collection, getDocsFromServer } = await import('/pkg/firestore.js');
    const db = await openFirestore({ name: 'todo-anonymous', relay: `ws://${location.host}` });
    return getDocsFromServer(collection(db, 'todos')).then(() => 'ok', (e) => e.code);
  });
  assert.equal(denied, 'permission-denied');
  await p.close();
});
