// End-to-end tests of `hearth/firestore`, the npm package's Firestore modular API: the
// package's exports map; a Firestore codelab app (modular-app/app.js, Firebase code that
// imports 'firebase/firestore', which its page maps to /pkg/firestore.js) run by two Chromium
// profiles against a real relay; and the API's overloads, shapes and refusals in a page.
// Run: node --test pkg-tests/e2e/modular.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, mkdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { root, startServer, startBrowser, startRelayProcess } from './harness.mjs';

const appDir = join(root, 'pkg-tests/e2e/modular-app');
const env = {};

before(async () => {
  // The app's own index definitions (the harness's relay serves the seeds').
  env.relay = await startRelayProcess([], join(appDir, 'firestore.indexes.json'));
  env.server = await startServer();
  env.alice = await startBrowser();
  env.bob = await startBrowser();
});

after(async () => {
  await env.alice?.stop();
  await env.bob?.stop();
  await env.server?.stop();
  await env.relay?.stop();
});

/** The app's page in `browser`, on database `name` of the relay (`window.db`, `window.app`,
 *  and the entry itself as `window.firestore`). */
function appPage(browser, name) {
  const q = new URLSearchParams({ name, relay: env.relay.url });
  return browser.page(`${env.server.origin}/pkg-tests/e2e/modular-app/index.html?${q}`);
}

const REQUIRED = ['collection', 'collectionGroup', 'doc', 'query', 'where', 'orderBy', 'limit',
  'limitToLast', 'startAt', 'startAfter', 'endAt', 'endBefore', 'and', 'or', 'documentId', 'getDoc',
  'getDocs', 'getDocFromCache', 'getDocsFromCache', 'getDocFromServer', 'getDocsFromServer',
  'onSnapshot', 'addDoc', 'setDoc', 'updateDoc', 'deleteDoc', 'writeBatch', 'runTransaction',
  'increment', 'serverTimestamp', 'arrayUnion', 'arrayRemove', 'deleteField', 'Timestamp', 'GeoPoint',
  'FieldPath', 'Bytes', 'getCountFromServer', 'getAggregateFromServer', 'count', 'sum', 'average',
  'enableNetwork', 'disableNetwork', 'waitForPendingWrites', 'terminate', 'clearIndexedDbPersistence',
  'openFirestore'];

test('the package: `hearth/firestore` in the exports map with its types, in `files`; the app imports only firebase/firestore', { timeout: 30000 }, async () => {
  const pkg = JSON.parse(readFileSync(join(root, 'pkg/package.json'), 'utf8'));
  assert.deepEqual(pkg.exports['.'], { types: './hearth.d.ts', default: './hearth.js' });
  assert.deepEqual(pkg.exports['./firestore'], { types: './firestore.d.ts', default: './firestore.js' });
  for (const f of ['hearth.js', 'hearth.d.ts', 'hearth_bg.wasm', 'firestore.js', 'firestore.d.ts']) {
    assert.ok(pkg.files.includes(f), `files lists ${f}`);
  }
  assert.equal(pkg.sideEffects, false);
  // Node resolves the entry through the exports map, and it has the modular API.
  const dir = mkdtempSync(join(tmpdir(), 'hearth-resolve-'));
  try {
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(join(root, 'pkg'), join(dir, 'node_modules/hearth'));
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', `
      const m = await import('hearth/firestore');
      console.log(JSON.stringify({ url: import.meta.resolve('hearth/firestore'), names: Object.keys(m) }));`],
    { cwd: dir, encoding: 'utf8' });
    const { url, names } = JSON.parse(out);
    assert.match(url, /\/(pkg|node_modules\/hearth)\/firestore\.js$/);
    assert.deepEqual(REQUIRED.filter((n) => !names.includes(n)), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const app = readFileSync(join(appDir, 'app.js'), 'utf8');
  const specifiers = [...app.matchAll(/\bfrom\s+["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']/g)].map((m) => m[1] ?? m[2]);
  assert.deepEqual(specifiers, ['firebase/firestore']);
  const code = app.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
  assert.doesNotMatch(code, /hearth/i, 'the app is Firebase code: its code never names Hearth');
});

/** Friendly Eats' seed: distinct average ratings and rating counts, so each sort is one order. */
const SEED = [
  { name: 'Pizzeria Uno', category: 'Pizza', city: 'Paris', price: 2, ratings: [5, 4] },
  { name: 'Pizza Nova', category: 'Pizza', city: 'Lyon', price: 1, ratings: [4, 3, 3, 2] },
  { name: 'Sushi Ten', category: 'Sushi', city: 'Paris', price: 3, ratings: [5] },
  { name: 'Burger Barn', category: 'Burgers', city: 'Paris', price: 1, ratings: [2, 3, 1] },
  { name: 'Slice House', category: 'Pizza', city: 'Paris', price: 1, ratings: [4, 4, 3, 3, 4] },
  { name: 'Maki Bar', category: 'Sushi', city: 'Lyon', price: 2, ratings: [] },
].map((r) => ({ ...r, ratings: r.ratings.map((rating, i) => ({ rating, text: `review ${i}`, userId: `seed${i}` })) }));

/** The names the app's list shows for `filters`, computed from `restaurants` here. */
function expected(restaurants, { category, city, price, sort }) {
  const key = sort === 'Review' ? 'numRatings' : 'avgRating';
  return restaurants
    .filter((r) => (!category || r.category === category) && (!city || r.city === city) && (!price || r.price === price.length))
    .sort((a, b) => b[key] - a[key])
    .map((r) => r.name);
}

function withStats(restaurants) {
  return restaurants.map((r) => {
    const sum = r.ratings.reduce((s, x) => s + x.rating, 0);
    return { ...r, numRatings: r.ratings.length, avgRating: r.ratings.length ? sum / r.ratings.length : 0 };
  });
}

const FILTERS = [{}, { category: 'Pizza' }, { city: 'Paris', sort: 'Review' }, { price: '$' },
  { category: 'Pizza', city: 'Paris' }, { category: 'Sushi', price: '$$', sort: 'Review' }];

test('Friendly Eats on two browsers: seeding batch, filters and sorts, live lists from docChanges, ratings by transaction, concurrent transactions', { timeout: 60000 }, async () => {
  const a = await appPage(env.alice, 'eats');
  const b = await appPage(env.bob, 'eats');
  const ids = await a.evaluate((seed) => window.app.addFakeRestaurantsAndReviews(window.db, seed), SEED);
  const byName = Object.fromEntries(SEED.map((r, i) => [r.name, ids[i]]));

  // Every filter and sort, on the other client, from the relay.
  const lists = await b.evaluate(async (filters) => Promise.all(filters.map(async (f) =>
    (await window.app.getRestaurants(window.db, f)).map((r) => r.name))), FILTERS);
  const seeded = withStats(SEED);
  assert.deepEqual(lists, FILTERS.map((f) => expected(seeded, f)));

  // Bob's screens: the pizza list, every restaurant as rows patched from docChanges(), and
  // one restaurant's reviews.
  await b.evaluate(({ uno, maki }) => {
    const { app, db } = window;
    window.screens = { pizza: [], rows: [], rowSnaps: [], reviews: {}, errors: [] };
    const s = window.screens;
    app.getRestaurantsSnapshot(db, (list) => { s.pizza = list; }, { category: 'Pizza' });
    app.watchRestaurantRows(db, {}, (rows, snapshot) => {
      s.rows = rows.map((r) => [r.name, r.numRatings, r.avgRating, r.photo]);
      s.rowSnaps.push({
        replayed: rows.map((r) => r.id).join() === snapshot.docs.map((d) => d.id).join(),
        pending: snapshot.metadata.hasPendingWrites,
        changes: snapshot.docChanges().length,
        all: snapshot.docChanges({ includeMetadataChanges: true }).length,
      });
    }, (e) => s.errors.push(e.code));
    for (const id of [uno, maki]) app.getReviewsSnapshotByRestaurantId(db, id, (reviews) => { s.reviews[id] = reviews; });
  }, { uno: byName['Pizzeria Uno'], maki: byName['Maki Bar'] });
  await b.waitForFunction((n) => window.screens.rows.length === n, SEED.length);
  assert.deepEqual(await b.evaluate(() => window.screens.pizza.map((r) => r.name)), ['Pizzeria Uno', 'Slice House', 'Pizza Nova']);

  // Alice rates Pizzeria Uno 1: Bob sees the review and the restaurant move down, live.
  await a.evaluate((id) => window.app.addReviewToRestaurant(window.db, id, { rating: 1, text: 'cold', userId: 'alice' }), byName['Pizzeria Uno']);
  await b.waitForFunction((id) => (window.screens.reviews[id] ?? []).some((r) => r.userId === 'alice' && r.timestamp !== null)
    && window.screens.pizza[0]?.name === 'Slice House', byName['Pizzeria Uno']);
  const afterOne = await b.evaluate((id) => ({ pizza: window.screens.pizza.map((r) => [r.name, r.numRatings, r.avgRating]),
    reviews: window.screens.reviews[id].map((r) => r.userId) }), byName['Pizzeria Uno']);
  assert.deepEqual(afterOne.pizza, [['Slice House', 5, 3.6], ['Pizzeria Uno', 3, 10 / 3], ['Pizza Nova', 4, 3]]);
  assert.equal(afterOne.reviews[0], 'alice', 'the newest review first');
  assert.deepEqual([...afterOne.reviews].sort(), ['alice', 'seed0', 'seed1']);

  // Both rate Maki Bar three times at once: each transaction reads numRatings and sumRating
  // and is retried when the other's commit changed them, so none is lost.
  const rate = (p, ratings, who) => p.evaluate(async ({ id, ratings, who }) => {
    for (const rating of ratings) await window.app.addReviewToRestaurant(window.db, id, { rating, text: 'ok', userId: who });
  }, { id: byName['Maki Bar'], ratings, who });
  await Promise.all([rate(a, [5, 5, 4], 'alice'), rate(b, [1, 2, 2], 'bob')]);
  const stats = await a.evaluate((id) => Promise.all([window.app.getRestaurantById(window.db, id), window.app.getRatingStats(window.db, id)]), byName['Maki Bar']);
  assert.equal(stats[0].numRatings, 6);
  assert.ok(Math.abs(stats[0].avgRating - 19 / 6) < 1e-12, `avgRating ${stats[0].avgRating}`);
  assert.equal(stats[1].count, 6);
  assert.ok(Math.abs(stats[1].avgRating - 19 / 6) < 1e-12, `server average ${stats[1].avgRating}`);
  await b.waitForFunction((id) => (window.screens.reviews[id] ?? []).length === 6
    && window.screens.rows.some(([name, n]) => name === 'Maki Bar' && n === 6), byName['Maki Bar']);

  // Bob sets a photo: his rows show it pending, then its acknowledgement changes metadata only.
  await b.evaluate((id) => window.app.updateRestaurantImageReference(window.db, id, 'https://example.test/maki.jpg'), byName['Maki Bar']);
  await b.waitForFunction(() => window.screens.rowSnaps.at(-1).pending === false
    && window.screens.rows.some(([name, , , photo]) => name === 'Maki Bar' && photo !== null));
  const bob = await b.evaluate((id) => ({ rows: window.screens.rows, snaps: window.screens.rowSnaps, errors: window.screens.errors,
    reviews: window.screens.reviews[id] }), byName['Maki Bar']);
  assert.deepEqual(bob.errors, []);
  assert.deepEqual(bob.rows.map(([name]) => name), ['Sushi Ten', 'Slice House', 'Pizzeria Uno', 'Maki Bar', 'Pizza Nova', 'Burger Barn']);
  assert.ok(bob.snaps.every((s) => s.replayed), `every snapshot replays onto its docs: ${JSON.stringify(bob.snaps)}`);
  const pendingAt = bob.snaps.findIndex((s) => s.pending);
  assert.ok(pendingAt >= 0 && bob.snaps[pendingAt].changes === 1, 'the photo shows at once, pending');
  const ack = bob.snaps.slice(pendingAt + 1).find((s) => !s.pending);
  assert.deepEqual(ack && [ack.changes, ack.all], [0, 1], 'the acknowledgement: a metadata change, left out of docChanges() by default');
  const times = bob.reviews.map((r) => r.timestamp);
  assert.ok(times.every((t, i) => t !== null && (i === 0 || times[i - 1] >= t)), `reviews newest first: ${times}`);
  assert.deepEqual(bob.reviews.map((r) => r.rating).sort(), [1, 2, 2, 4, 5, 5]);
  const photo = await a.evaluate((id) => window.app.getRestaurantById(window.db, id), byName['Maki Bar']);
  assert.equal(photo.photo, 'https://example.test/maki.jpg');
  await a.close();
  await b.close();
});

/** Runs `body(f, db, arg)` in a fresh app page of Alice's on database `name`, with `f` the
 *  entry's exports and `db` its database; in the page, `err(fn)` gives how calling `fn` ends
 *  ('ok' or `code: message`) and `codeOf` the code of that. */
async function inPage(name, body, arg) {
  const p = await appPage(env.alice, name);
  await p.evaluate(() => {
    window.err = async (fn) => {
      try { await fn(); return 'ok'; } catch (e) { return `${e.code}: ${e.message}`; }
    };
    window.codeOf = (s) => s.split(':')[0];
  });
  try {
    return await p.evaluate(async ({ body, arg }) => {
      const f = window.firestore;
      return (0, eval)(`(${body})`)(f, window.db, arg);
    }, { body: body.toString(), arg });
  } finally {
    await p.close();
  }
}

const codeOf = (s) => s.split(':')[0];

test('references: doc and collection path forms, auto ids, parents, types, refEqual; bad paths refused', { timeout: 30000 }, async () => {
  const r = await inPage('modular-refs', async (f, db) => {
    const rooms = f.collection(db, 'rooms');
    const auto = f.doc(rooms);
    const sub = f.collection(f.doc(db, 'rooms', 'r1'), 'messages');
    return {
      auto: [auto.id.length, auto.parent.path, auto.type, auto.firestore === db, f.doc(rooms).id !== auto.id],
      paths: [f.doc(db, 'rooms/r1').path, f.doc(db, 'rooms', 'r1').path, f.doc(db, '/rooms/r1/').path,
        f.collection(db, 'rooms', 'r1', 'messages').path, sub.path, f.collection(rooms, 'r2/messages').path,
        f.doc(rooms, 'r3').path, f.doc(f.doc(db, 'rooms/r1'), 'messages/m1').path, f.doc(sub, 'm1').path],
      parents: [sub.parent.path, sub.parent.type, rooms.parent, sub.id, f.doc(sub, 'm1').parent.type],
      types: [rooms.type, f.query(rooms, f.limit(1)).type, f.collectionGroup(db, 'messages').type],
      equal: [f.refEqual(f.doc(db, 'rooms/r1'), f.doc(db, 'rooms', 'r1')), f.refEqual(f.doc(db, 'rooms/r1'), f.doc(db, 'rooms/r2')),
        f.refEqual(rooms, f.collection(db, 'rooms')), f.refEqual(rooms, f.doc(db, 'rooms/r1'))],
      refused: await Promise.all([() => f.collection(db, 'rooms/r1'), () => f.doc(db, 'rooms'), () => f.doc(db, 'a//b'),
        () => f.doc(db, ''), () => f.collection({}, 'x'), () => f.collectionGroup(db, 'a/b'), () => f.doc(db)].map(window.err)),
    };
  });
  assert.deepEqual(r.auto, [20, 'rooms', 'document', true, true]);
  assert.deepEqual(r.paths, ['rooms/r1', 'rooms/r1', 'rooms/r1', 'rooms/r1/messages', 'rooms/r1/messages',
    'rooms/r2/messages', 'rooms/r3', 'rooms/r1/messages/m1', 'rooms/r1/messages/m1']);
  assert.deepEqual(r.parents, ['rooms/r1', 'document', null, 'messages', 'collection']);
  assert.deepEqual(r.types, ['collection', 'query', 'query']);
  assert.deepEqual(r.equal, [true, false, true, false]);
  assert.deepEqual(r.refused.map(codeOf), Array(7).fill('invalid-argument'), r.refused.join('\n'));
});

test('writes: setDoc with merge and mergeFields, updateDoc object and field/value pairs with FieldPath, transforms, values, references, converters, batches and transactions', { timeout: 30000 }, async () => {
  const r = await inPage('modular-writes', async (f, db) => {
    const ref = f.doc(db, 'w/a');
    const data = async (x = ref) => (await f.getDocFromServer(x)).data();
    const out = {};
    await f.setDoc(ref, { a: 1, m: { x: 1, y: 2 }, tags: ['p', 'q'] });
    await f.setDoc(ref, { m: { x: 9 }, b: 2 }, { merge: true });
    out.merge = await data();
    await f.setDoc(ref, { a: 100, m: { x: 0, y: 0 }, c: 3 }, { mergeFields: ['a', 'm.y'] });
    out.mergeFields = await data();
    await f.updateDoc(ref, 'm.x', 5, new f.FieldPath('dotted.key'), 'v', 'n', f.increment(2));
    out.pairs = await data();
    await f.updateDoc(ref, { 'm.y': f.deleteField(), tags: f.arrayUnion('r', 'p'), n: f.increment(1.5) });
    await f.updateDoc(ref, { tags: f.arrayRemove('q') });
    out.object = await data();
    out.missing = await window.err(() => f.updateDoc(f.doc(db, 'w/none'), { a: 1 }));
    out.odd = await window.err(() => f.updateDoc(ref, 'a', 1, 'b'));
    // Values: Timestamp, GeoPoint, Bytes; a reference comes back as a modular reference.
    const when = f.Timestamp.fromMillis(1700000000123);
    await f.setDoc(f.doc(db, 'w/v'), { when, where: new f.GeoPoint(48.85, 2.35), bytes: f.Bytes.fromUint8Array(new Uint8Array([1, 2, 3])),
      owner: ref, list: [{ ref }], at: f.serverTimestamp() });
    const v = await f.getDocFromServer(f.doc(db, 'w/v'));
    const owner = v.get('owner');
    out.values = [v.get('when').isEqual(when), v.get('where').latitude, [...v.get('bytes').toUint8Array()], owner instanceof f.DocumentReference,
      owner.firestore === db, owner.path, v.data().list[0].ref.path, v.get('at') instanceof f.Timestamp, (await f.getDoc(owner)).exists()];
    // A converter: classes in, classes out.
    class City { constructor(name, pop) { this.name = name; this.pop = pop; } }
    const converter = { toFirestore: (c) => ({ name: c.name, population: c.pop }), fromFirestore: (s, o) => new City(s.data(o).name, s.data(o).population) };
    const cities = f.collection(db, 'cities').withConverter(converter);
    const paris = await f.addDoc(cities, new City('Paris', 2));
    const read = await f.getDoc(paris);
    const stored = await f.getDoc(f.doc(db, 'cities', paris.id));
    out.converter = [paris.converter === converter, read.data() instanceof City, read.data().pop, stored.data(), read.get('population'),
      (await f.getDocs(cities)).docs[0].data() instanceof City];
    // A batch: chained, atomic.
    const batch = f.writeBatch(db);
    const chained = batch.set(f.doc(db, 'w/b1'), { n: 1 }).update(ref, { a: 7 }).delete(f.doc(db, 'w/v'));
    await batch.commit();
    out.batch = [chained === batch, (await data(f.doc(db, 'w/b1'))).n, (await data()).a, (await f.getDocFromServer(f.doc(db, 'w/v'))).exists()];
    const failed = f.writeBatch(db).set(f.doc(db, 'w/b2'), { n: 2 }).update(f.doc(db, 'w/none'), { n: 1 });
    out.atomic = [codeOf(await window.err(() => failed.commit())), (await f.getDocFromServer(f.doc(db, 'w/b2'))).exists()];
    // A transaction: its value, its reads as modular snapshots.
    out.tx = await f.runTransaction(db, async (t) => {
      const s = await t.get(ref);
      const missing = await t.get(f.doc(db, 'w/none'));
      const same = t.update(ref, 'a', s.data().a + 1).set(f.doc(db, 'w/t'), { from: s.id });
      return [s.exists(), missing.exists(), same === t, s.ref.path];
    });
    out.afterTx = [(await data()).a, (await data(f.doc(db, 'w/t'))).from];
    out.deleted = (await f.deleteDoc(f.doc(db, 'w/t')), (await f.getDocFromServer(f.doc(db, 'w/t'))).exists());
    return out;
  });
  assert.deepEqual(r.merge, { a: 1, m: { x: 9, y: 2 }, tags: ['p', 'q'], b: 2 });
  assert.deepEqual(r.mergeFields, { a: 100, m: { x: 9, y: 0 }, tags: ['p', 'q'], b: 2 });
  assert.deepEqual(r.pairs, { a: 100, m: { x: 5, y: 0 }, tags: ['p', 'q'], b: 2, 'dotted.key': 'v', n: 2 });
  assert.deepEqual(r.object, { a: 100, m: { x: 5 }, tags: ['p', 'r'], b: 2, 'dotted.key': 'v', n: 3.5 });
  assert.equal(codeOf(r.missing), 'not-found');
  assert.equal(codeOf(r.odd), 'invalid-argument');
  assert.deepEqual(r.values, [true, 48.85, [1, 2, 3], true, true, 'w/a', 'w/a', true, true]);
  assert.deepEqual(r.converter, [true, true, 2, { name: 'Paris', population: 2 }, 2, true]);
  assert.deepEqual(r.batch, [true, 1, 7, false]);
  assert.deepEqual(r.atomic, ['not-found', false]);
  assert.deepEqual(r.tx, [true, false, true, 'w/a']);
  assert.deepEqual(r.afterTx, [8, 'a']);
  assert.equal(r.deleted, false);
});

test('queries: constraints compose as in Firestore (filters, and/or, documentId, cursors from values and snapshots, limits); reads by source; aggregates', { timeout: 30000 }, async () => {
  const r = await inPage('modular-queries', async (f, db) => {
    const c = f.collection(db, 'q');
    const batch = f.writeBatch(db);
    for (let n = 1; n <= 6; n++) batch.set(f.doc(c, `d${n}`), { n, odd: n % 2 === 1, tags: n > 3 ? ['big'] : ['small'] });
    await batch.commit();
    const ids = async (q) => (await f.getDocs(q)).docs.map((d) => d.id).join();
    const out = {};
    const step = f.query(f.query(c, f.where('n', '>=', 2)), f.orderBy('n', 'desc'), f.limit(3));
    out.composed = [await ids(step), step.type, f.queryEqual(step, f.query(c, f.where('n', '>=', 2), f.orderBy('n', 'desc'), f.limit(3))),
      f.queryEqual(step, f.query(c, f.where('n', '>=', 3), f.orderBy('n', 'desc'), f.limit(3))), f.query(c) === c];
    out.or = await ids(f.query(c, f.or(f.where('n', '==', 1), f.where('n', '==', 6))));
    out.andOr = await ids(f.query(c, f.and(f.where('n', '>', 1), f.or(f.where('n', '<', 3), f.where('n', '>', 5))), f.orderBy('n')));
    out.single = await ids(f.query(c, f.or(f.where('n', '==', 2))));
    out.empty = f.query(c, f.and()) === c;
    out.documentId = [await ids(f.query(c, f.where(f.documentId(), 'in', ['d2', 'd5']))), await ids(f.query(c, f.orderBy(f.documentId(), 'desc'), f.limit(2)))];
    out.arrays = await ids(f.query(c, f.where('tags', 'array-contains', 'big')));
    const d3 = await f.getDoc(f.doc(c, 'd3'));
    const byN = f.query(c, f.orderBy('n'));
    out.cursors = await Promise.all([f.query(byN, f.startAt(d3)), f.query(byN, f.startAfter(d3)), f.query(byN, f.endAt(d3)),
      f.query(byN, f.endBefore(d3)), f.query(byN, f.startAfter(2), f.endBefore(5))].map(ids));
    out.limitToLast = await ids(f.query(c, f.orderBy('n'), f.limitToLast(2)));
    out.types = [f.where('n', '==', 1).type, f.or().type, f.and().type, f.orderBy('n').type, f.limit(1).type, f.limitToLast(1).type,
      f.startAt(1).type, f.startAfter(1).type, f.endAt(1).type, f.endBefore(1).type];
    out.refused = await Promise.all([() => f.query(c, f.where('n', '==', 1), f.or(f.where('n', '==', 2))),
      () => f.query(c, f.or(f.where('n', '==', 1)), f.and(f.where('n', '==', 2))), () => f.query(c, { type: 'where' }),
      () => f.limit(0), () => f.query(c, f.where('n', '~', 1)), () => f.getDocs(f.query(c, f.limitToLast(2))), () => f.or(f.orderBy('n'))].map(window.err));
    // Sources: the server; the cache (a query the cache has, a document it has).
    out.sources = [await ids(await f.getDocsFromServer(f.query(c, f.where('odd', '==', false))).then((s) => s.query)),
      (await f.getDocsFromServer(c)).metadata.fromCache, (await f.getDocsFromCache(c)).metadata.fromCache,
      (await f.getDocsFromCache(f.query(c, f.where('n', '<=', 2)))).size, (await f.getDocFromCache(f.doc(c, 'd1'))).data().n];
    // Aggregates: Firestore's shapes.
    const counted = await f.getCountFromServer(f.query(c, f.where('n', '>', 2)));
    const agg = await f.getAggregateFromServer(c, { total: f.sum('n'), mean: f.average('n'), how: f.count() });
    const none = await f.getAggregateFromServer(f.query(c, f.where('n', '>', 100)), { mean: f.average('n'), total: f.sum('n'), how: f.count() });
    out.aggregates = [counted.type, counted.data(), agg.data(), none.data(), counted.query.type, f.count().aggregateType, f.average('n').aggregateType,
      f.aggregateFieldEqual(f.sum('n'), f.sum('n')), f.aggregateFieldEqual(f.sum('n'), f.average('n')),
      codeOf(await window.err(() => f.getAggregateFromServer(c, { x: 'count' })))];
    return out;
  });
  assert.deepEqual(r.composed, ['d6,d5,d4', 'query', true, false, true]);
  assert.equal(r.or, 'd1,d6');
  assert.equal(r.andOr, 'd2,d6');
  assert.equal(r.single, 'd2');
  assert.equal(r.empty, true);
  assert.deepEqual(r.documentId, ['d2,d5', 'd6,d5']);
  assert.equal(r.arrays, 'd4,d5,d6');
  assert.deepEqual(r.cursors, ['d3,d4,d5,d6', 'd4,d5,d6', 'd1,d2,d3', 'd1,d2', 'd3,d4']);
  assert.equal(r.limitToLast, 'd5,d6');
  assert.deepEqual(r.types, ['where', 'or', 'and', 'orderBy', 'limit', 'limitToLast', 'startAt', 'startAfter', 'endAt', 'endBefore']);
  assert.deepEqual(r.refused.map(codeOf), ['invalid-argument', 'invalid-argument', 'invalid-argument', 'invalid-argument',
    'invalid-argument', 'unimplemented', 'invalid-argument'], r.refused.join('\n'));
  assert.deepEqual(r.sources, ['d2,d4,d6', false, true, 2, 1]);
  assert.deepEqual(r.aggregates, ['AggregateQuerySnapshot', { count: 4 }, { total: 21, mean: 3.5, how: 6 },
    { mean: null, total: 0, how: 0 }, 'query', 'count', 'avg', true, false, 'invalid-argument']);
});

test('onSnapshot: every overload for documents and queries, includeMetadataChanges and docChanges(options), errors to the error callback, unsubscribe', { timeout: 30000 }, async () => {
  const r = await inPage('modular-listen', async (f, db) => {
    const wait = (ms) => new Promise((res) => setTimeout(res, ms));
    const ref = f.doc(db, 'l/a');
    const q = f.query(f.collection(db, 'l'), f.orderBy('n'));
    const seen = {};
    const push = (k, v) => { (seen[k] ??= []).push(v); };
    const docView = (s) => (s.exists() ? s.data().n : 'missing');
    const stops = [
      f.onSnapshot(ref, (s) => push('doc next', docView(s))),
      f.onSnapshot(ref, (s) => push('doc next error', docView(s)), (e) => push('doc next error', e.code)),
      f.onSnapshot(ref, { next: (s) => push('doc observer', docView(s)) }),
      f.onSnapshot(ref, { includeMetadataChanges: true }, (s) => push('doc options next', [docView(s), s.metadata.hasPendingWrites])),
      f.onSnapshot(ref, { includeMetadataChanges: true }, { next: (s) => push('doc options observer', [docView(s), s.metadata.hasPendingWrites]) }),
      f.onSnapshot(q, (s) => push('query next', s.docs.map((d) => d.id).join())),
      f.onSnapshot(q, { next: (s) => push('query observer', s.size), error: (e) => push('query observer', e.code), complete: () => push('query observer', 'complete') }),
      f.onSnapshot(q, {}, (s) => push('query options next', s.size), (e) => push('query options next', e.code), () => push('query options next', 'complete')),
      f.onSnapshot(q, { includeMetadataChanges: true }, (s) => push('query metadata', {
        pending: s.metadata.hasPendingWrites, changes: s.docChanges().map((c) => [c.type, c.doc.id, c.oldIndex, c.newIndex]),
        all: s.docChanges({ includeMetadataChanges: true }).map((c) => [c.type, c.doc.id]), same: s.docChanges() === s.docChanges() })),
      f.onSnapshot(q, (s) => push('query plain', window.err(() => s.docChanges({ includeMetadataChanges: true })))),
    ];
    await wait(300);
    await f.setDoc(ref, { n: 1 });
    await wait(100);
    await f.setDoc(f.doc(db, 'l/b'), { n: 0 });
    await wait(300);
    stops.forEach((stop) => stop());
    await f.setDoc(ref, { n: 2 });
    await wait(300);
    // A query no index serves fails through the error callback, each form.
    const unserved = f.query(f.collection(db, 'l'), f.where('x', '==', 1), f.orderBy('y', 'desc'));
    const errors = [];
    const s1 = f.onSnapshot(unserved, () => errors.push('snapshot'), (e) => errors.push(e.code));
    const s2 = f.onSnapshot(unserved, { error: (e) => errors.push(e.code) });
    const s3 = f.onSnapshot(unserved, { includeMetadataChanges: true }, { next: () => errors.push('snapshot'), error: (e) => errors.push(e.code) });
    await wait(500);
    [s1, s2, s3].forEach((s) => s());
    seen['query plain'] = await Promise.all(seen['query plain']);
    const refused = await Promise.all([() => f.onSnapshot(ref), () => f.onSnapshot(ref, {}), () => f.onSnapshot(ref, 'next'),
      () => f.onSnapshot({}, () => {}), () => f.onSnapshot(q, { source: 'cache' }, () => {})].map(window.err));
    return { seen, errors, refused };
  });
  const s = r.seen;
  assert.deepEqual(s['doc next'], ['missing', 1]);
  assert.deepEqual(s['doc next error'], ['missing', 1]);
  assert.deepEqual(s['doc observer'], ['missing', 1]);
  // With metadata changes: missing, written (pending), acknowledged.
  assert.deepEqual(s['doc options next'], [['missing', false], [1, true], [1, false]]);
  assert.deepEqual(s['doc options observer'], s['doc options next']);
  assert.deepEqual(s['query next'], ['', 'a', 'b,a']);
  assert.deepEqual(s['query observer'], [0, 1, 2], 'complete is never called');
  assert.deepEqual(s['query options next'], [0, 1, 2]);
  const meta = s['query metadata'];
  assert.ok(meta.every((m) => m.same), 'docChanges() is the same array on each call');
  // Each write shows pending, then its acknowledgement: metadata only, left out of docChanges().
  assert.deepEqual(meta.map((m) => [m.pending, m.changes]), [
    [false, []], [true, [['added', 'a', -1, 0]]], [false, []], [true, [['added', 'b', -1, 0]]], [false, []]]);
  assert.deepEqual(meta.map((m) => m.all), [[], [['added', 'a']], [['modified', 'a']], [['added', 'b']], [['modified', 'b']]]);
  assert.ok(s['query plain'].length > 0 && s['query plain'].every((e) => e.startsWith('invalid-argument: ')), s['query plain'].join('\n'));
  assert.deepEqual(r.errors, ['failed-precondition', 'failed-precondition', 'failed-precondition']);
  assert.deepEqual(r.refused.map(codeOf), ['invalid-argument', 'invalid-argument', 'invalid-argument', 'invalid-argument', 'unimplemented'],
    r.refused.join('\n'));
});

test('the database: network switches, waitForPendingWrites, terminate and clearIndexedDbPersistence; what Hearth lacks throws unimplemented naming it', { timeout: 30000 }, async () => {
  const r = await inPage('modular-db', async (f, db, relay) => {
    const out = {};
    const ref = f.doc(db, 'n/a');
    await f.setDoc(ref, { v: 1 });
    await f.disableNetwork(db);
    out.offline = [codeOf(await window.err(() => f.getDocFromServer(ref))), (await f.getDoc(ref)).metadata.fromCache];
    const written = f.setDoc(ref, { v: 2 });
    out.local = (await f.getDocFromCache(ref)).data().v;
    await f.enableNetwork(db);
    await f.waitForPendingWrites(db);
    await written;
    out.synced = (await f.getDocFromServer(ref)).data().v;
    // Local databases: one kept across terminate, one deleted by clearIndexedDbPersistence.
    const kept = await f.openFirestore({ name: 'modular-kept' });
    await f.setDoc(f.doc(kept, 'k/1'), { v: 1 });
    await f.terminate(kept);
    out.afterTerminate = codeOf(await window.err(() => f.getDocFromCache(f.doc(kept, 'k/1'))));
    out.kept = (await f.getDocsFromCache(f.collection(await f.openFirestore({ name: 'modular-kept' }), 'k'))).size;
    const local = await f.openFirestore({ name: 'modular-local' });
    await f.setDoc(f.doc(local, 'k/1'), { v: 1 });
    out.whileOpen = codeOf(await window.err(() => f.clearIndexedDbPersistence(local)));
    await f.terminate(local);
    await f.clearIndexedDbPersistence(local);
    out.cleared = (await f.getDocsFromCache(f.collection(await f.openFirestore({ name: 'modular-local' }), 'k'))).size;
    out.instance = [db instanceof f.Firestore, db.type, db.hearth.clientId.length > 0, f.CACHE_SIZE_UNLIMITED];
    const e = await f.updateDoc(f.doc(db, 'n/none'), { v: 1 }).catch((x) => x);
    out.errorClass = [e instanceof f.FirestoreError, e instanceof Error, e.code, new Error('x') instanceof f.FirestoreError];
    out.unimplemented = await Promise.all([() => f.loadBundle(db, ''), () => f.namedQuery(db, 'q'), () => f.onSnapshotsInSync(db, () => {}),
      () => f.persistentMultipleTabManager(), () => f.persistentLocalCache(), () => f.getFirestore(), () => f.initializeFirestore({}, {}),
      () => f.connectFirestoreEmulator(db, 'localhost', 8080), () => f.enableIndexedDbPersistence(db), () => f.setIndexConfiguration(db, '{}'),
      () => f.openFirestore({ name: 'x', relay, localCache: {} }), () => f.runTransaction(db, async () => 1, { maxAttempts: 3 }),
      async () => (await f.getDoc(ref)).toJSON(), () => f.vector([1])].map(window.err));
    out.fiveAttempts = await f.runTransaction(db, async () => 'done', { maxAttempts: 5 });
    return out;
  }, env.relay.url);
  assert.deepEqual(r.offline, ['unavailable', true]);
  assert.equal(r.local, 2);
  assert.equal(r.synced, 2);
  assert.equal(r.whileOpen, 'failed-precondition');
  assert.equal(r.afterTerminate, 'failed-precondition');
  assert.equal(r.kept, 1);
  assert.equal(r.cleared, 0);
  assert.deepEqual(r.instance, [true, 'firestore', true, -1]);
  assert.deepEqual(r.errorClass, [true, true, 'not-found', false]);
  const names = ['loadBundle()', 'namedQuery()', 'onSnapshotsInSync()', 'persistentMultipleTabManager()', 'persistentLocalCache()',
    'getFirestore()', 'initializeFirestore()', 'connectFirestoreEmulator()', 'enableIndexedDbPersistence()', 'setIndexConfiguration()',
    'localCache', 'maxAttempts: 3', 'DocumentSnapshot.toJSON()', 'vector()'];
  assert.equal(r.unimplemented.length, names.length);
  r.unimplemented.forEach((e, i) => {
    assert.ok(e.startsWith('unimplemented: '), e);
    assert.ok(e.includes(names[i]), `${e} names ${names[i]}`);
  });
  assert.equal(r.fiveAttempts, 'done');
});
