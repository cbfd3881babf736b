// Batches reach the relay in the order they were written (headless Chromium against a real
// hearth-relay). A write is sent once it is stored, after its listeners were raised, and a
// listener raise may await (a limited listener that lost a document reads the cache to
// refill): a later write whose raise was quicker must still wait for the earlier ones, or
// the relay commits them out of order and the local view, rebuilt over the relay's state
// as each is acknowledged, drops an increment it already counted (seen by the model test
// with tabs: a counter went back by one increment).
// Run: node --test pkg-tests/e2e/write_order.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useEnvironment, varint } from './harness.mjs';

const env = useEnvironment();


test('batches go to the relay in the order they were written, whatever their listeners cost', { timeout: 90000 }, async () => {
  const name = 'write-order';
  const [a, b] = await Promise.all([env.page(), env.page()]);
  // The batch ids of the Write frames each connection sent, in sending order.
  const sent = [];
  for (const p of [a, b]) {
    p.on('websocket', (ws) => {
      const ids = [];
      sent.push(ids);
      ws.on('framesent', ({ payload }) => {
        if (typeof payload === 'string' || payload[0] !== 0x06) return;
        const [, at] = varint(payload, 1);
        ids.push(varint(payload, at)[0]);
      });
    });
  }
  await env.open(a, name);
  await env.open(b, name);
  const run = (p) => p.evaluate(async () => {
    const { db } = window;
    const { FieldValue } = window.hearth;
    // Limited listeners: moving a document out of their window makes them refill from the
    // cache, which takes a while; plain counter increments do not.
    for (let k = 0; k < 6; k++) db.collection('rank').orderBy('n').limit(3 + k).onSnapshot(() => {});
    const done = [];
    for (let i = 0; i < 120; i++) {
      if (i % 3 === 0) done.push(db.doc(`rank/r${i % 12}`).set({ n: (i * 7) % 40 }));
      else done.push(db.doc('counter/x').set({ v: FieldValue.increment(1) }, { merge: true }));
    }
    await Promise.all(done);
  });
  await Promise.all([run(a), run(b)]);
  const ids = sent.flat();
  assert.ok(ids.length >= 200, `${ids.length} batches sent`);
  for (const list of sent) {
    for (let i = 1; i < list.length; i++) {
      assert.ok(list[i] > list[i - 1], `batch ${list[i]} sent after the later ${list[i - 1]} (frame ${i} of ${list.length})`);
    }
  }
  assert.deepEqual(await env.serverRead(name, 'counter/x'), { v: 160 });
  await a.close();
  await b.close();
});
