// End-to-end test of the Restaurants demo (www/restaurants/): the site scripts/start serves
// (www/, pkg/, worker/) from a real relay with rules/demos.rules (its restaurants block is
// rules/restaurants.rules), the demos' index file (www/demos.indexes.json) and the development
// auth secret, driven from the outside by two Chromium profiles signed in as two users. With HEARTH_SCREENSHOTS=1 it also
// writes docs/screenshots/restaurants-desktop.png and restaurants-phone.png.
// Run: node --test pkg-tests/e2e/demo_restaurants.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { root, demoPage, useDemos, startRelayProcess, startServer } from './harness.mjs';

const env = useDemos('alice', 'bob');

// What "Add sample restaurants" must create: id, name, category, city, price.
const SAMPLES = [
  ['ember-and-oak', 'Ember & Oak', 'BBQ', 'Austin', 3], ['smoke-shack', 'Smoke Shack', 'BBQ', 'Denver', 1],
  ['slice-of-naples', 'Slice of Naples', 'Pizza', 'Austin', 2], ['forno-rosso', 'Forno Rosso', 'Pizza', 'Boston', 3],
  ['little-tokyo-bar', 'Little Tokyo Bar', 'Sushi', 'Boston', 4], ['koi-counter', 'Koi Counter', 'Sushi', 'Austin', 3],
  ['green-table', 'Green Table', 'Vegetarian', 'Denver', 2], ['sprout-house', 'Sprout House', 'Vegetarian', 'Boston', 1],
  ['taco-luna', 'Taco Luna', 'Mexican', 'Denver', 1], ['casa-azul', 'Casa Azul', 'Mexican', 'Austin', 2],
  ['morning-crust', 'Morning Crust', 'Bakery', 'Boston', 1], ['golden-crumb', 'Golden Crumb', 'Bakery', 'Denver', 2],
];
/** The test's own model of the database: id -> { name, category, city, price, ratings }. */
const model = new Map(SAMPLES.map(([id, name, category, city, price]) => [id, { name, category, city, price, ratings: [] }]));
const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** The ids the list must show for a filter and sort, by Firestore's ordering: the sort
 *  field, ties by document id in the sort's direction. */
function expected({ category = '', city = '', price = '', sort = 'rating' }) {
  const key = { rating: (r) => mean(r.ratings), ratings: (r) => r.ratings.length, price: (r) => r.price }[sort];
  const dir = sort === 'price' ? 1 : -1;
  return [...model].filter(([, r]) => (!category || r.category === category) && (!city || r.city === city)
    && (!price || r.price === Number(price)))
    .sort(([ia, a], [ib, b]) => dir * (key(a) - key(b) || (ia < ib ? -1 : 1))).map(([id]) => id);
}


/** Opens the page in `browser` (at `hash`) and signs in as `name` (a reload stays signed in). */
async function signedIn(browser, name, { viewport = { width: 1280, height: 800 }, hash = '' } = {}) {
  const p = await demoPage(browser, env.relay, `/www/restaurants/${hash}`, name, viewport);
  await p.waitForSelector('#signin:not([hidden]), #app:not([hidden])');
  if (await p.isVisible('#signin')) {
    await p.fill('#name', name);
    await p.click('#signin button');
  }
  await p.waitForFunction(() => window.hearthReady === true);
  assert.equal(await p.textContent('#who'), name.toLowerCase());
  return p;
}

const listIds = (p) => p.$$eval('#list li', (lis) => lis.map((li) => li.dataset.id));

/** Waits until page `p`'s list shows exactly `ids`, in order (and asserts it, for the message). */
async function expectList(p, ids, what = '') {
  await p.waitForFunction((want) => !document.getElementById('list').hasAttribute('aria-busy')
    && JSON.stringify([...document.querySelectorAll('#list li')].map((li) => li.dataset.id)) === want, JSON.stringify(ids), { timeout: 10000 }).catch(() => {});
  assert.deepEqual(await listIds(p), ids, what);
}

/** Sets the page's filters and sort, then checks the list against the model. */
async function filterAndCheck(p, f) {
  for (const [sel, v] of [['#category', f.category], ['#city', f.city], ['#price', f.price], ['#sort', f.sort ?? 'rating']]) {
    await p.selectOption(sel, v ?? '');
  }
  const ids = expected(f);
  await expectList(p, ids, JSON.stringify(f));
  assert.equal(await p.isVisible('#empty'), ids.length === 0);
  assert.equal(await p.isVisible('#error'), false, `${JSON.stringify(f)}: ${await p.textContent('#error-text')}`);
}

/** What a list row shows: [name, meta, average, count]. */
const rowOf = (p, id) => p.$eval(`#list li[data-id="${id}"]`, (li) => ['.name', '.meta', '.avg', '.count']
  .map((s) => li.querySelector(s).textContent));

async function openRestaurant(p, id) {
  await p.click(`#list li[data-id="${id}"] a`);
  await p.waitForFunction((name) => document.getElementById('d-name').textContent === name, model.get(id).name);
}

/** Rates the open restaurant through the form and waits for the transaction to end. */
async function rate(p, stars, text = '') {
  const id = await p.evaluate(() => decodeURIComponent(location.hash.slice(1)));
  await p.selectOption('#stars', String(stars));
  await p.fill('#comment', text);
  await p.click('#rate button');
  await p.waitForFunction(() => !document.querySelector('#rate button').disabled);
  assert.equal(await p.isVisible('#error'), false, await p.textContent('#error-text'));
  model.get(id).ratings.push(stars);
}

/** The open restaurant's summary and ratings as page `p` shows them. */
const detail = (p) => p.evaluate(() => ({
  avg: document.getElementById('d-avg').textContent,
  count: document.getElementById('d-count').textContent,
  ratings: [...document.querySelectorAll('#ratings li')].map((li) => [li.querySelector('.stars').textContent,
    li.querySelector('.by').textContent, li.querySelector('.text').textContent]),
}));
const shownAvg = (id) => (model.get(id).ratings.length ? mean(model.get(id).ratings).toFixed(2) : '–');
const shownCount = (id) => `${model.get(id).ratings.length} rating${model.get(id).ratings.length === 1 ? '' : 's'}`;

/** Waits for the error bar of page `p` to show `re`, then dismisses it. */
async function expectError(p, re) {
  await p.waitForSelector('#error', { state: 'visible' });
  assert.match(await p.textContent('#error-text'), re);
  await p.click('#error-close');
}

/** The restaurant's stored numRatings and avgRating, and its ratings, read from the relay. */
const serverState = (p, id) => p.evaluate(async (id) => {
  const { doc, collection, getDocFromServer, getDocsFromServer } = await import('/pkg/firestore.js');
  const r = (await getDocFromServer(doc(window.hearthDb, 'restaurants', id))).data();
  const ratings = (await getDocsFromServer(collection(window.hearthDb, 'restaurants', id, 'ratings'))).docs.map((d) => d.data().rating);
  return { numRatings: r.numRatings, avgRating: r.avgRating, ratings: ratings.sort() };
}, id);

/** Holds page `browser`'s WebSockets to the relay (connections wait, unanswered) until `release()`. */
async function holdRelay(browser) {
  const held = [];
  let hold = true;
  await browser.context.routeWebSocket(/\/v1\/ws/, (ws) => { if (hold) held.push(ws); else ws.connectToServer(); });
  return { held, async release() { hold = false; for (const ws of held) await ws.close(); } };
}

test('the restaurants demo: seeding offline, filters and sorts, live ratings in transactions, rules, a phone viewport', { timeout: 180000 }, async () => {
  const a = await signedIn(env.alice, 'Alice');
  await a.waitForSelector('#conn.online');
  await a.waitForSelector('#empty:not([hidden])');
  assert.deepEqual(await listIds(a), []);

  // Alice adds the sample restaurants while offline: a plain batch, shown at once as not yet
  // saved, still there after a reload (the relay unreachable), saved once back online.
  const relayHeld = await holdRelay(env.alice);
  await env.alice.context.setOffline(true);
  await a.waitForSelector('#conn.offline');
  await a.click('#seed');
  await expectList(a, expected({}));
  assert.equal(await a.$$eval('#list li.pending', (l) => l.length), 12);
  assert.equal(await a.isVisible('#pending'), true);
  await env.alice.context.setOffline(false);
  await a.reload();
  await a.waitForFunction(() => window.hearthReady === true);
  await expectList(a, expected({}));
  assert.equal(await a.$$eval('#list li.pending', (l) => l.length), 12, 'still not saved after the reload');
  assert.match(await a.textContent('#conn'), /Connecting/);
  assert.ok(relayHeld.held.length > 0, 'the reloaded page tried the relay');
  const b = await signedIn(env.bob, 'Bob');
  await b.waitForSelector('#conn.online');
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(await listIds(b), [], 'Bob sees nothing before Alice is back online');
  await relayHeld.release();
  await a.waitForSelector('#conn.online', { timeout: 20000 });
  await a.waitForFunction(() => !document.querySelector('#list li.pending') && document.getElementById('pending').hidden);
  await expectList(b, expected({}), 'Bob sees them live');
  for (const [id, name, category, city, price] of SAMPLES) {
    assert.deepEqual(await rowOf(b, id), [name, `${category} · ${city} · ${'$'.repeat(price)}`, '–', '0 ratings']);
  }
  // Seeding again adds nothing and changes nothing.
  await b.click('#seed');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await b.isVisible('#error'), false, await b.textContent('#error-text'));
  await expectList(b, expected({}));

  // Alice rates a restaurant; Bob, who has it open, sees the rating and the new average live,
  // and his list (sorted by rating) moves it up.
  await openRestaurant(b, 'koi-counter');
  await b.waitForSelector('#no-ratings', { state: 'visible' });
  await openRestaurant(a, 'koi-counter');
  await rate(a, 5, 'Best nigiri in town');
  await b.waitForFunction(() => document.querySelectorAll('#ratings li').length === 1);
  assert.deepEqual(await detail(b), { avg: '5.00', count: '1 rating', ratings: [['★★★★★', 'alice', 'Best nigiri in town']] });
  await expectList(b, expected({}), 'Bob\'s list after Alice\'s rating');
  assert.deepEqual((await rowOf(b, 'koi-counter')).slice(2), ['5.0', '1 rating']);
  await rate(b, 4, 'Good, a bit pricey');
  await a.waitForFunction(() => document.querySelectorAll('#ratings li').length === 2);
  assert.deepEqual(await detail(a), { avg: shownAvg('koi-counter'), count: '2 ratings',
    ratings: [['★★★★☆', 'bob', 'Good, a bit pricey'], ['★★★★★', 'you', 'Best nigiri in town']] });
  assert.equal(shownAvg('koi-counter'), '4.50');

  // More ratings, then every filter and sort shows the right restaurants in the right order.
  for (const [p, id, stars] of [[a, 'slice-of-naples', 4], [b, 'slice-of-naples', 4], [a, 'slice-of-naples', 5],
    [a, 'ember-and-oak', 3], [b, 'taco-luna', 2], [b, 'little-tokyo-bar', 5]]) {
    await openRestaurant(p, id);
    await rate(p, stars);
    await p.waitForFunction((c) => document.getElementById('d-count').textContent === c, shownCount(id));
  }
  await expectList(a, expected({}), 'Alice\'s list, live');
  await expectList(b, expected({}), 'Bob\'s list, live');
  for (const f of [{ sort: 'ratings' }, { sort: 'price' }, { category: 'Sushi' }, { city: 'Austin', sort: 'ratings' },
    { city: 'Boston', sort: 'price' }, { price: '2' }, { category: 'Pizza', city: 'Austin', price: '2' },
    { city: 'Denver', price: '1', sort: 'ratings' }, { category: 'BBQ', sort: 'price' }, { price: '3', sort: 'price' },
    { category: 'Vegetarian', city: 'Boston' }, { category: 'Bakery', city: 'Austin' }, {}]) {
    await filterAndCheck(a, f);
  }
  assert.deepEqual((await rowOf(a, 'slice-of-naples')).slice(2), [mean([4, 4, 5]).toFixed(1), '3 ratings']);

  // Rating at once from both browsers, three times each: every transaction counts.
  await openRestaurant(a, 'casa-azul');
  await openRestaurant(b, 'casa-azul');
  for (const [x, y] of [[5, 2], [4, 3], [5, 1]]) await Promise.all([rate(a, x), rate(b, y)]);
  const casa = model.get('casa-azul').ratings;
  for (const p of [a, b]) {
    await p.waitForFunction(() => document.querySelectorAll('#ratings li').length === 6);
    assert.deepEqual(await p.evaluate(() => [document.getElementById('d-avg').textContent, document.getElementById('d-count').textContent]),
      [mean(casa).toFixed(2), '6 ratings']);
  }
  const stored = await serverState(a, 'casa-azul');
  assert.equal(stored.numRatings, 6);
  assert.deepEqual(stored.ratings, [...casa].sort());
  assert.ok(Math.abs(stored.avgRating - mean(casa)) < 1e-9, `avgRating ${stored.avgRating}, the ratings' mean ${mean(casa)}`);
  await expectList(a, expected({}));

  // What the rules refuse shows in the page, and changes nothing. A rating out of range
  // (a tampered form): the transaction fails as a whole.
  await a.$eval('#stars option[value="5"]', (o) => { o.value = '9'; });
  await a.selectOption('#stars', '9');
  await a.click('#rate button');
  await expectError(a, /permission-denied/);
  await a.evaluate(() => { document.querySelector('#stars option').value = '5'; });
  // A rating under someone else's user id, an edit of a rating, an edit of a restaurant's
  // name: written from the console with the page's database, their refusals show too.
  const ratingId = await b.$eval('#ratings li.mine', (li) => li.dataset.id);
  const text = await b.$eval('#ratings li.mine .text', (t) => t.textContent);
  for (const write of [
    ({ db, m }) => m.addDoc(m.collection(db, 'restaurants/casa-azul/ratings'), { userId: 'alice', rating: 1, text: 'not me', time: m.serverTimestamp() }),
    ({ db, m, ratingId }) => m.updateDoc(m.doc(db, 'restaurants/casa-azul/ratings', ratingId), { text: 'edited' }),
    ({ db, m }) => m.updateDoc(m.doc(db, 'restaurants/casa-azul'), { name: 'Casa Bob' }),
  ]) {
    await b.evaluate(async ({ f, ratingId }) => {
      const m = await import('/pkg/firestore.js');
      (0, eval)(f)({ db: window.hearthDb, m, ratingId }); // not awaited: the page reports the refusal
    }, { f: write.toString(), ratingId });
    await expectError(b, /permission-denied/);
  }
  await b.waitForFunction(({ id, text }) => document.querySelector(`#ratings li[data-id="${id}"] .text`)?.textContent === text
    && document.querySelectorAll('#ratings li').length === 6 && document.getElementById('d-name').textContent === 'Casa Azul',
  { id: ratingId, text });
  assert.deepEqual(await serverState(b, 'casa-azul'), stored);

  // Offline, a rating (a transaction) is refused in the page: it needs the relay.
  await env.bob.context.setOffline(true);
  await b.waitForSelector('#conn.offline');
  await b.click('#rate button');
  await expectError(b, /unavailable/);
  // A reload while the relay is unreachable shows the list and the ratings from the cache;
  // once the relay answers, a rating Alice added meanwhile arrives.
  const bobHeld = await holdRelay(env.bob);
  await env.bob.context.setOffline(false);
  await b.reload();
  await b.waitForFunction(() => window.hearthReady === true);
  await expectList(b, expected({}), 'Bob\'s list from the cache');
  await b.waitForFunction(() => document.querySelectorAll('#ratings li').length === 6);
  assert.match(await b.textContent('#conn'), /Connecting/);
  assert.ok(bobHeld.held.length > 0, 'the reloaded page tried the relay');
  await rate(a, 1, 'Cold tacos tonight');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await b.$$eval('#ratings li', (l) => l.length), 6);
  await bobHeld.release();
  await b.waitForFunction(() => document.querySelectorAll('#ratings li').length === 7, null, { timeout: 20000 });
  await b.waitForSelector('#conn.online');
  assert.deepEqual((await detail(b)).ratings[0], ['★☆☆☆☆', 'alice', 'Cold tacos tonight']);
  const after = await serverState(b, 'casa-azul');
  assert.deepEqual([after.numRatings, after.ratings.length], [7, 7]);
  assert.ok(Math.abs(after.avgRating - mean(casa)) < 1e-9, `avgRating ${after.avgRating}, the ratings' mean ${mean(casa)}`);
  await expectList(b, expected({}));

  // Switching filters quickly (as arrow keys on a focused select do) leaves no stale rows.
  await b.evaluate(() => {
    for (const c of ['Pizza', 'Sushi', 'BBQ', 'Mexican']) {
      document.getElementById('category').value = c;
      document.getElementById('filters').dispatchEvent(new Event('change'));
    }
  });
  await new Promise((r) => setTimeout(r, 500));
  await expectList(b, expected({ category: 'Mexican' }));
  await b.selectOption('#category', '');
  await expectList(b, expected({}));

  // A phone-sized viewport: no horizontal overflow, on the list or on a restaurant, even with
  // a long unbroken comment.
  const phone = await signedIn(env.alice, 'Alice', { viewport: { width: 375, height: 740 } });
  await expectList(phone, expected({}));
  await rate(a, 4, 'https://example.invalid/a-very-long-address-without-any-space-in-it-at-all-whatsoever');
  if (process.env.HEARTH_SCREENSHOTS) {
    const dir = join(root, 'docs/screenshots');
    mkdirSync(dir, { recursive: true });
    await openRestaurant(a, 'koi-counter');
    await a.mouse.move(0, 0);
    await a.screenshot({ path: join(dir, 'restaurants-desktop.png') });
    await phone.screenshot({ path: join(dir, 'restaurants-phone.png') });
  }
  const width = (p) => p.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(await width(phone) <= 375, `list: page width ${await width(phone)} on a 375-wide viewport`);
  assert.equal(await phone.isVisible('#detail'), false);
  await openRestaurant(phone, 'casa-azul');
  await phone.waitForFunction(() => document.querySelectorAll('#ratings li').length === 8);
  assert.equal(await phone.isVisible('#list'), false, 'on a phone the restaurant replaces the list');
  assert.ok(await width(phone) <= 375, `restaurant: page width ${await width(phone)} on a 375-wide viewport`);
  await phone.click('#close');
  await phone.waitForSelector('#list', { state: 'visible' });
  await Promise.all([a.close(), b.close(), phone.close()]);
});

// Hearth bugs this demo ran into, each fixed (each test failed before). The third hid a
// mistake in app.js while it was written.
test('a listener stopped before its first snapshot gets nothing (it got that snapshot)', { timeout: 30000 }, async () => {
  const server = await startServer();
  const p = await env.alice.context.newPage();
  try {
    await p.goto(`${server.origin}/pkg-tests/e2e/page.html`);
    const calls = await p.evaluate(async () => {
      const { openFirestore, collection, onSnapshot, setDoc, doc } = await import('/pkg/firestore.js');
      const db = await openFirestore({ name: 'stopped-listener' }); // local only: no relay needed
      await setDoc(doc(db, 'things', 'a'), { n: 1 });
      const seen = [];
      onSnapshot(collection(db, 'things'), () => seen.push('stopped'))();
      await new Promise((r) => setTimeout(r, 1500));
      return seen;
    });
    assert.deepEqual(calls, []);
  } finally {
    await p.close();
    await server.stop();
  }
});

test('a stale transaction is retried, not refused, under rules that compare with resource.data (it was refused)', { timeout: 30000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hearth-rules-'));
  writeFileSync(join(dir, 'counter.rules'), `rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    match /counters/{c} {
      allow read, create: if true;
      allow update: if request.resource.data.n == resource.data.n + 1;
    }
  }
}`);
  const relay = await startRelayProcess(['--rules', join(dir, 'counter.rules')]);
  const server = await startServer();
  const p = await env.alice.context.newPage();
  try {
    await p.goto(`${server.origin}/pkg-tests/e2e/page.html`);
    const out = await p.evaluate(async (url) => {
      const { openFirestore, doc, setDoc, getDocFromServer, runTransaction } = await import('/pkg/firestore.js');
      const db = await openFirestore({ name: 'stale-transaction', relay: url });
      const ref = doc(db, 'counters', 'c');
      await setDoc(ref, { n: 0 });
      const bump = () => runTransaction(db, async (tx) => {
        tx.update(ref, { n: (await tx.get(ref)).data().n + 1 });
      }).then(() => 'ok', (e) => e.code);
      const results = await Promise.all([bump(), bump()]);
      return { results, n: (await getDocFromServer(ref)).data().n };
    }, relay.url);
    assert.deepEqual(out, { results: ['ok', 'ok'], n: 2 });
  } finally {
    await p.close();
    await server.stop();
    await relay.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an exception thrown by an onSnapshot callback reaches the page as an uncaught error (it vanished)', { timeout: 30000 }, async () => {
  const server = await startServer();
  const p = await env.alice.context.newPage();
  const logged = [];
  p.on('console', (m) => { if (m.type() === 'error' && /thrown in the callback/.test(m.text())) logged.push(m.text()); });
  p.on('pageerror', (e) => logged.push(e.message));
  try {
    await p.goto(`${server.origin}/pkg-tests/e2e/page.html`);
    const { called, errors } = await p.evaluate(async () => {
      const errors = [];
      addEventListener('error', (e) => { errors.push(e.message); e.preventDefault(); });
      const { openFirestore, collection, onSnapshot, setDoc, doc } = await import('/pkg/firestore.js');
      const db = await openFirestore({ name: 'throwing-listener' }); // local only: no relay needed
      await setDoc(doc(db, 'things', 'a'), { n: 1 });
      let called = 0;
      onSnapshot(collection(db, 'things'), () => { called++; throw new Error('thrown in the callback'); });
      await new Promise((r) => setTimeout(r, 1000));
      return { called, errors };
    });
    assert.equal(called, 1);
    // As with Firestore's SDK, the app's exception reaches the page (an uncaught error), or
    // at least the console.
    assert.ok(errors.length + logged.length > 0, 'the exception was reported somewhere');
  } finally {
    await p.close();
    await server.stop();
  }
});
