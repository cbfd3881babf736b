// End-to-end tests of auth token refresh against a real hearth-relay started with an HS256
// secret: the token callback is asked again before a token expires, and after the relay
// refuses one. Run: node --test pkg-tests/e2e/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { assertTrackersClean, installTracker, signerIn, useEnvironment } from './harness.mjs';

const SECRET = 'hearth-e2e-secret';
const env = useEnvironment(['--auth-secret', SECRET]);
const page = env.page;

const installSigner = (p) => signerIn(p, SECRET);

test('a short-lived token is refreshed through the callback before it expires; writes and listens go on', { timeout: 60000 }, async () => {
  const p = await page();
  await installSigner(p);
  await installTracker(p);
  await p.evaluate(async (url) => {
    window.calls = 0;
    // (asked at, expiry) of every token handed out, in ms.
    window.tokens = [];
    const token = async () => {
      window.calls += 1;
      const exp = Math.floor(Date.now() / 1000) + 3;
      window.tokens.push([Date.now(), exp * 1000]);
      return window.jwt({ sub: 'u1', exp });
    };
    // Count connections: a refresh goes over the open one (an Auth message); a token the
    // relay refused would show as a reconnection.
    window.sockets = 0;
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
      constructor(...args) { super(...args); window.sockets += 1; }
    };
    window.db = await window.hearth.Hearth.open({ name: 'auth-refresh', relay: url, token });
    window.seen = [];
    // The acknowledgement is metadata only: raised to listeners that ask for it.
    window.track(window.db.collection('a'), { includeMetadataChanges: true }, (s) => {
      if (!s.metadata.hasPendingWrites) window.seen.push(s.size);
    });
    await window.db.doc('a/1').set({ v: 1 });
  }, env.relay.url);
  // Well past the first token's expiry: every write is acknowledged, the listener stays live.
  for (let i = 2; i <= 4; i++) {
    await new Promise((r) => setTimeout(r, 2500));
    await p.evaluate((i) => window.db.doc(`a/${i}`).set({ v: i }), i);
  }
  await p.waitForFunction(() => window.seen[window.seen.length - 1] === 4);
  const calls = await p.evaluate(() => window.calls);
  assert.ok(calls >= 3, `the callback was asked ${calls} times`);
  // Each token was replaced before it expired, over the one connection.
  const tokens = await p.evaluate(() => window.tokens);
  for (let k = 1; k < tokens.length; k++) {
    assert.ok(tokens[k][0] < tokens[k - 1][1], `token ${k} was asked for after token ${k - 1} expired: ${JSON.stringify(tokens)}`);
  }
  assert.equal(await p.evaluate(() => window.sockets), 1, 'one connection throughout');
  const server = await p.evaluate(async () => (await window.db.collection('a').get({ source: 'server' })).size);
  assert.equal(server, 4);
  await assertTrackersClean(p);
  await p.evaluate(() => window.db.close());
  await p.close();
});

test('a token the relay refuses is replaced by asking the callback again; queued writes arrive', { timeout: 60000 }, async () => {
  const p = await page();
  await installSigner(p);
  const result = await p.evaluate(async (url) => {
    window.calls = 0;
    const token = async () => {
      window.calls += 1;
      // The first token has already expired.
      const exp = Math.floor(Date.now() / 1000) + (window.calls === 1 ? -10 : 600);
      return window.jwt({ sub: 'u1', exp });
    };
    const db = await window.hearth.Hearth.open({ name: 'auth-refused', relay: url, token });
    await db.doc('b/1').set({ v: 1 });
    const snap = await db.doc('b/1').get({ source: 'server' });
    db.close();
    return { calls: window.calls, v: snap.data().v };
  }, env.relay.url);
  assert.equal(result.v, 1);
  assert.ok(result.calls >= 2, `the callback was asked ${result.calls} times`);
  await p.close();
});
