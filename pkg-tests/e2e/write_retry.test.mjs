// Transient failures of the relay's store do not lose or double writes: a write the relay
// could not commit for now (`unavailable`) stays queued and is sent again, in order, under
// its batch id, until the relay's final answer; one whose commit's outcome was lost is
// answered from the batch's record, not applied twice. Firestore never rejects a write for
// a transient cause. The relay (a debug build) injects the failures: HEARTH_TEST_TRANSIENT
// makes its first rounds for a database fail before committing, or commit and lose the
// outcome. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useEnvironment } from './harness.mjs';

// Three rounds of each database fail: writes there must be retried past them.
process.env.HEARTH_TEST_TRANSIENT = 'commit-before:retry-before:3,commit-after:retry-after:3,commit-before:retry-tx:2,commit-after:retry-tx:2';
const env = useEnvironment();

/** Five awaited increments and a set in database `name`: how each promise ended, and the
 *  document as the relay has it afterwards. */
async function incrementFiveTimes(name) {
  const p = await env.page();
  await env.open(p, name);
  const outcomes = await p.evaluate(async () => {
    const { FieldValue } = window.hearth;
    const ref = window.db.doc('counters/c');
    const out = [];
    for (let i = 0; i < 5; i++) {
      out.push(await window.code(() => ref.set({ n: FieldValue.increment(1) }, { merge: true }), 60000));
    }
    out.push(await window.code(() => window.db.doc('counters/other').set({ done: true }), 60000));
    await window.db.waitForPendingWrites();
    return out;
  });
  await p.close();
  return { outcomes, counter: await env.serverRead(name, 'counters/c'), other: await env.serverRead(name, 'counters/other') };
}

test('writes the relay could not commit for now are retried, not rejected, and land once', async () => {
  const { outcomes, counter, other } = await incrementFiveTimes('retry-before');
  assert.deepEqual(outcomes, ['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
  assert.deepEqual(counter, { n: 5 });
  assert.deepEqual(other, { done: true });
});

test('writes whose commit outcome was lost are retried and applied once', async () => {
  const { outcomes, counter, other } = await incrementFiveTimes('retry-after');
  assert.deepEqual(outcomes, ['ok', 'ok', 'ok', 'ok', 'ok', 'ok']);
  assert.deepEqual(counter, { n: 5 }, 'an increment was applied twice or lost');
  assert.deepEqual(other, { done: true });
});

test('a transaction whose commit failed transiently or lost its outcome commits once', async () => {
  const p = await env.page();
  await env.open(p, 'retry-tx');
  const outcomes = await p.evaluate(async () => {
    const ref = window.db.doc('counters/c');
    const out = [];
    for (let i = 0; i < 3; i++) {
      out.push(await window.code(() => window.db.runTransaction(async (tx) => {
        const s = await tx.get(ref);
        tx.set(ref, { n: (s.exists ? s.data().n : 0) + 1 });
      }), 60000));
    }
    return out;
  });
  await p.close();
  assert.deepEqual(outcomes, ['ok', 'ok', 'ok']);
  assert.deepEqual(await env.serverRead('retry-tx', 'counters/c'), { n: 3 });
});
