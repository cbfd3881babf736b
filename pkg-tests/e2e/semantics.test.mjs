// End-to-end checks of query semantics Firestore defines and Hearth once got wrong: each
// query runs through the npm package against the local cache (after the writes) and against
// the relay, and both must give Firestore's answer. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;

/** Opens a database in the page as window.db and writes `docs` ({ id: data }) to `coll`. */
async function openWith(p, name, coll, docs) {
  await p.evaluate(async ({ name, url, coll, docs }) => {
    window.db = await window.hearth.Hearth.open({ name, relay: url });
    const batch = window.db.batch();
    for (const [id, data] of Object.entries(docs)) batch.set(window.db.collection(coll).doc(id), data);
    await batch.commit();
  }, { name, url: env.relay.url, coll, docs });
}

/**
 * Runs the query `build` (the source of a function of the collection reference and the
 * `hearth` module) from the cache and from the server; returns each side's ids, or
 * `{ code, message }` if that side refused the query.
 */
async function bothSides(p, coll, build) {
  return p.evaluate(async ({ coll, build }) => {
    const make = new Function('c', 'hearth', `return (${build})(c, hearth);`);
    const out = {};
    for (const source of ['cache', 'server']) {
      try {
        const snap = await make(window.db.collection(coll), window.hearth).get({ source });
        out[source] = snap.docs.map((d) => d.id);
      } catch (e) {
        out[source] = { code: e.code, message: e.message };
      }
    }
    return out;
  }, { coll, build: build.toString() });
}

/** The error `build` throws while the query is built (before any read), or null. */
async function buildError(p, coll, build) {
  return p.evaluate(({ coll, build }) => {
    const make = new Function('c', 'hearth', `return (${build})(c, hearth);`);
    try {
      make(window.db.collection(coll), window.hearth);
      return null;
    } catch (e) {
      return { code: e.code, message: e.message };
    }
  }, { coll, build: build.toString() });
}

function assertBoth(got, want, what) {
  assert.deepEqual(got.cache, want, `${what} (cache): ${JSON.stringify(got)}`);
  assert.deepEqual(got.server, want, `${what} (server): ${JSON.stringify(got)}`);
}

test('in / not-in take arrays as elements and match fields equal to one of them', { timeout: 60000 }, async () => {
  const p = await page();
  await openWith(p, 'sem-in-arrays', 'arr', {
    a: { v: [1] }, b: { v: [1, 2] }, c: { v: [2, 1] }, d: { v: 1 }, e: { v: [] },
    f: { v: [1, 2, 3] }, g: { v: null }, h: { w: 1 }, i: { v: [{ x: [1] }] },
  });
  // Firestore's SDK parses in/not-in operands as "array arguments": arrays may nest in them.
  assertBoth(await bothSides(p, 'arr', (c) => c.where('v', 'in', [[1], [1, 2]])), ['a', 'b'], 'in');
  assertBoth(await bothSides(p, 'arr', (c) => c.where('v', 'in', [[1], 1])), ['a', 'd'], 'in mixed');
  assertBoth(await bothSides(p, 'arr', (c) => c.where('v', 'in', [[{ x: [1] }], [[1]]])), ['i'], 'in nested');
  assertBoth(await bothSides(p, 'arr', (c) => c.where('v', 'in', [[1, 2]]).orderBy('v', 'desc')), ['b'], 'in + orderBy');
  // not-in orders by its field: the number first, then arrays element by element.
  assertBoth(await bothSides(p, 'arr', (c) => c.where('v', 'not-in', [[1], [1, 2]])),
    ['d', 'e', 'f', 'c', 'i'], 'not-in');
  assertBoth(await bothSides(p, 'arr', (c) => c.where('v', 'in', [[1], [2, 1]]).limit(1)), ['a'], 'in + limit');
  // array-contains-any compares elements, and a stored array never holds an array: the SDK
  // parses its operand as a plain argument and refuses arrays inside it.
  const any = await buildError(p, 'arr', (c) => c.where('v', 'array-contains-any', [[1], 2]));
  assert.equal(any?.code, 'invalid-argument', JSON.stringify(any));
  assert.match(any.message, /Nested arrays are not supported/);
  // Other operands still refuse nested arrays.
  const eq = await buildError(p, 'arr', (c) => c.where('v', '==', [[1]]));
  assert.equal(eq?.code, 'invalid-argument', JSON.stringify(eq));
  await p.close();
});

test('string field paths refuse ~ * / [ ]; FieldPath objects take any name', { timeout: 60000 }, async () => {
  const p = await page();
  await openWith(p, 'sem-paths', 'paths', { a: { 'a~b': 1, n: 1 }, b: { 'a~b': 2, n: 2 } });
  const bad = [
    (c) => c.where('a~b', '==', 1),
    (c) => c.where('a*b', '==', 1),
    (c) => c.where('m.a/b', '==', 1),
    (c) => c.where('a[0]', '==', 1),
    (c) => c.where('a]', '==', 1),
    (c, hearth) => c.where(hearth.Filter.where('a~b', '==', 1)),
    (c) => c.orderBy('a/b'),
    (c) => c.select('a~b'),
    (c, hearth) => c.aggregate({ s: hearth.AggregateField.sum('a~b') }),
  ];
  for (const build of bad) {
    const err = await buildError(p, 'paths', build);
    assert.equal(err?.code, 'invalid-argument', `${build}: ${JSON.stringify(err)}`);
    assert.match(err.message, /Invalid field path \(.*\)\. Paths must not contain '~', '\*', '\/', '\[', or '\]'/, `${build}`);
  }
  // Writes and reads that take a dotted string path refuse it too.
  const writes = await p.evaluate(async () => {
    const ref = window.db.collection('paths').doc('a');
    const out = [];
    for (const f of [() => ref.update('a~b', 3), () => ref.update({ 'a~b': 3 }),
      () => ref.set({ x: 1 }, { mergeFields: ['a~b'] }),
      async () => (await ref.get({ source: 'cache' })).get('a~b')]) {
      try { await f(); out.push(null); } catch (e) { out.push({ code: e.code, message: e.message }); }
    }
    return out;
  });
  for (const err of writes) {
    assert.equal(err?.code, 'invalid-argument', JSON.stringify(writes));
    assert.match(err.message, /Paths must not contain/);
  }
  // A FieldPath may name any field.
  assertBoth(await bothSides(p, 'paths', (c, hearth) => c.where(new hearth.FieldPath('a~b'), '==', 2)), ['b'], 'FieldPath');
  assertBoth(await bothSides(p, 'paths', (c, hearth) => c.orderBy(new hearth.FieldPath('a~b'), 'desc')), ['b', 'a'], 'orderBy FieldPath');
  const got = await p.evaluate(async () => {
    const ref = window.db.collection('paths').doc('a');
    await ref.update(new window.hearth.FieldPath('a~b'), 5);
    return (await ref.get({ source: 'server' })).get(new window.hearth.FieldPath('a~b'));
  });
  assert.equal(got, 5);
  await p.close();
});

test('a field ordered twice is refused by the cache and the relay alike', { timeout: 60000 }, async () => {
  const p = await page();
  await openWith(p, 'sem-order-twice', 'twice', { a: { n: 1 }, b: { n: 2 }, c: { n: 1 } });
  // Firestore's backend refuses an order by clause with duplicate fields (invalid-argument);
  // the SDK passes the query through, so the refusal comes from the query, not the client.
  for (const build of [
    (c) => c.orderBy('n').orderBy('n', 'desc'),
    (c) => c.orderBy('n').orderBy('n'),
    (c) => c.where('n', '>', 0).orderBy('n', 'desc').orderBy('n'),
    (c, hearth) => c.orderBy(hearth.FieldPath.documentId()).orderBy('__name__', 'desc'),
  ]) {
    const got = await bothSides(p, 'twice', build);
    for (const side of ['cache', 'server']) {
      assert.equal(got[side]?.code, 'invalid-argument', `${build} ${side}: ${JSON.stringify(got)}`);
      assert.match(got[side].message, /order by clause cannot contain duplicate fields/i);
    }
  }
  // One orderBy per field still runs.
  assertBoth(await bothSides(p, 'twice', (c) => c.orderBy('n', 'desc')), ['b', 'c', 'a'], 'desc');
  await p.close();
});
