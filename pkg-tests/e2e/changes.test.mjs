// End-to-end tests of docChanges(): every snapshot's changes, replayed (type, oldIndex,
// newIndex) onto the list the previous snapshots built, must give exactly `snapshot.docs`;
// a limited listener reports the document a new one evicts; a local write is `added` once,
// its acknowledgement is metadata (raised only with includeMetadataChanges, as a `modified`).
// The replay check is the harness's `installTracker`.
// Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { installTracker, startBrowser, useEnvironment } from './harness.mjs';

const env = useEnvironment();
const page = env.page;
const open = env.open;

const settle = (p, ms) => p.evaluate((ms) => new Promise((r) => setTimeout(r, ms)), ms);

test('a document entering a full limit(3) window from another client evicts the last one', { timeout: 90000 }, async () => {
  const other = await startBrowser();
  try {
    const reader = await page();
    const writer = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await open(reader, 'changes-limit');
    await open(writer, 'changes-limit');
    await installTracker(reader);
    await writer.evaluate(async () => {
      await window.db.doc('live/d01').set({ rank: 3 });
      await window.db.doc('live/d02').set({ rank: 1 });
      await window.db.doc('live/d03').set({ rank: 2 });
      await window.db.doc('live/d05').set({ rank: 9 });
    });
    await reader.evaluate(() => {
      window.t = window.track(window.db.collection('live').orderBy('rank').limit(3));
    });
    await reader.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'd02,d03,d01');
    const before = await reader.evaluate(() => window.t.snaps.length);
    await writer.evaluate(() => window.db.doc('live/d04').set({ rank: 2.5 }));
    await reader.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'd02,d03,d04');
    // A later change moves a document inside the window and one out of it.
    await writer.evaluate(() => window.db.doc('live/d02').set({ rank: 2.7 }));
    await reader.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'd03,d04,d02');
    await writer.evaluate(() => window.db.doc('live/d03').delete());
    await reader.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'd04,d02,d01');
    await settle(reader, 500);
    const t = await reader.evaluate(() => ({ snaps: window.t.snaps, errors: window.t.errors }));
    assert.deepEqual(t.errors, [], JSON.stringify(t.snaps));
    const entered = t.snaps.slice(before).find((s) => s.ids.join() === 'd02,d03,d04');
    assert.deepEqual([...entered.changes].sort(), ['added d04', 'removed d01'], JSON.stringify(t.snaps));
    for (const s of t.snaps.slice(1)) assert.notDeepEqual(s.changes, [], `a snapshot without changes: ${JSON.stringify(t.snaps)}`);
    await reader.close();
    await writer.close();
  } finally {
    await other.stop();
  }
});

test('a local write is added once; its acknowledgement is metadata, raised only when asked for', { timeout: 90000 }, async () => {
  const p = await page();
  await open(p, 'changes-ack');
  await installTracker(p);
  await p.evaluate(async () => {
    for (const [id, rank] of [['a', 1], ['b', 2], ['e', 3], ['f', 4]]) await window.db.doc(`w/${id}`).set({ rank });
    await window.db.waitForPendingWrites();
    const col = window.db.collection('w');
    window.ts = {
      limit: window.track(col.orderBy('rank').limit(3)),
      limitMeta: window.track(col.orderBy('rank').limit(3), { includeMetadataChanges: true }),
      offset: window.track(col.orderBy('rank').offset(1)),
      offsetMeta: window.track(col.orderBy('rank').offset(1), { includeMetadataChanges: true }),
    };
  });
  await settle(p, 1500);
  const base = await p.evaluate(() => Object.fromEntries(Object.entries(window.ts).map(([k, t]) => [k, t.snaps.length])));
  await p.evaluate(() => window.db.doc('w/d').set({ rank: 1.5 }));
  await settle(p, 1500);
  const ts = await p.evaluate(() => Object.fromEntries(Object.entries(window.ts).map(([k, t]) => [k, { snaps: t.snaps, errors: t.errors, deviations: t.deviations }])));
  for (const [k, t] of Object.entries(ts)) {
    assert.deepEqual(t.errors, [], `${k}: ${JSON.stringify(t.snaps)}`);
    assert.deepEqual(t.deviations, [], `${k}: ${JSON.stringify(t.snaps)}`);
    const after = t.snaps.slice(base[k]);
    const msg = `${k}: ${JSON.stringify(after)}`;
    const expected = k.startsWith('limit') ? ['removed e', 'added d'] : ['added d'];
    assert.deepEqual(after[0]?.changes, expected, msg);
    assert.equal(after[0].pending, true, msg);
    if (k.endsWith('Meta')) {
      // Then only metadata: the acknowledgement, as a `modified` of the written document.
      const rest = after.slice(1);
      assert.ok(rest.some((s) => s.changes.join() === 'modified d' && !s.pending), msg);
      for (const s of rest) assert.ok(s.changes.every((c) => c === 'modified d'), msg);
      assert.equal(after.at(-1).pending, false, msg);
    } else {
      assert.equal(after.length, 1, `a plain listener raises the write once: ${msg}`);
    }
  }
  await p.close();
});

test('a document moving inside a limited window from another client is the only change reported', { timeout: 90000 }, async () => {
  const other = await startBrowser();
  try {
    const reader = await page();
    const writer = await other.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
    await open(reader, 'changes-move');
    await open(writer, 'changes-move');
    await installTracker(reader);
    await writer.evaluate(async () => {
      for (const [id, rank] of [['m1', 1], ['m2', 2], ['m3', 3], ['m4', 4]]) await window.db.doc(`move/${id}`).set({ rank });
    });
    await reader.evaluate(() => { window.t = window.track(window.db.collection('move').orderBy('rank').limit(3)); });
    await reader.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'm1,m2,m3');
    await writer.evaluate(() => window.db.doc('move/m1').set({ rank: 3.5 }));
    await reader.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'm2,m3,m1');
    await settle(reader, 500);
    const t = await reader.evaluate(() => ({ snaps: window.t.snaps, errors: window.t.errors, deviations: window.t.deviations }));
    // Firestore's docChanges() lists only documents whose data changed (or that entered or
    // left); the ones m1 passes keep their data and are not changes.
    assert.deepEqual(t.snaps.at(-1).changes, ['modified m1'], JSON.stringify(t.snaps));
    assert.deepEqual({ errors: t.errors, deviations: t.deviations }, { errors: [], deviations: [] }, JSON.stringify(t.snaps));
    await reader.close();
    await writer.close();
  } finally {
    await other.stop();
  }
});

test('a local write moving a document in an ordered query is the only change reported', { timeout: 60000 }, async () => {
  const p = await page();
  await open(p, 'changes-move-local');
  await installTracker(p);
  await p.evaluate(async () => {
    for (const [id, rank] of [['m1', 1], ['m2', 2], ['m3', 3]]) await window.db.doc(`move/${id}`).set({ rank });
    window.t = window.track(window.db.collection('move').orderBy('rank'));
  });
  await p.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'm1,m2,m3');
  await p.evaluate(() => window.db.doc('move/m1').update({ rank: 4 }));
  await p.waitForFunction(() => window.t.snaps.at(-1)?.ids.join() === 'm2,m3,m1');
  await settle(p, 500);
  const t = await p.evaluate(() => ({ snaps: window.t.snaps, errors: window.t.errors, deviations: window.t.deviations }));
  assert.deepEqual(t.snaps.at(-1).changes, ['modified m1'], JSON.stringify(t.snaps));
  assert.deepEqual({ errors: t.errors, deviations: t.deviations }, { errors: [], deviations: [] }, JSON.stringify(t.snaps));
  await p.close();
});
