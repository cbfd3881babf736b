// End-to-end tests of security rules through the npm package in headless Chromium, against a
// real hearth-relay started with a rules file, a client token secret and a service secret.
// Each user has a browser profile of their own (a database's cache is per profile), as they
// would on their own machines. Run: node --test pkg-tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installCode, installTracker, assertTrackersClean, seedGroups, signerIn, startBrowser, useEnvironment } from './harness.mjs';

const SECRET = 'hearth-e2e-rules-client-secret';
const SERVICE = 'hearth-e2e-rules-service-secret';
const RULES = `rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    function signedIn() { return request.auth != null; }
    function member(room) {
      return signedIn() && exists(/databases/$(database)/documents/rooms/$(room)/members/$(request.auth.uid));
    }
    match /notes/{note} {
      allow read, delete: if signedIn() && resource.data.owner == request.auth.uid;
      allow create: if signedIn() && request.resource.data.owner == request.auth.uid
                    && request.resource.data.keys().hasOnly(['owner', 'text']);
      allow update: if signedIn() && resource.data.owner == request.auth.uid
                    && request.resource.data.diff(resource.data).affectedKeys().hasOnly(['text']);
    }
    match /rooms/{room} {
      match /members/{uid} {
        allow read: if signedIn() && uid == request.auth.uid;
        allow write: if request.auth.token.admin == true;
      }
      match /messages/{m} {
        allow read: if member(room);
        allow create: if member(room)
          && get(/databases/$(database)/documents/rooms/$(room)/members/$(request.auth.uid)).data.role == 'writer'
          && request.resource.data.from == request.auth.uid;
      }
    }
    match /posts/{p} {
      allow read: if resource.data.visibility == 'public'
                  || (signedIn() && resource.data.author == request.auth.uid);
      allow write: if signedIn() && request.resource.data.author == request.auth.uid;
    }
  }
}
`;

const dir = mkdtempSync(join(tmpdir(), 'hearth-e2e-rules-'));
const rulesFile = join(dir, 'firestore.rules');
writeFileSync(rulesFile, RULES);
const env = useEnvironment(['--rules', rulesFile, '--auth-secret', SECRET, '--service-secret', SERVICE, '--explain-denials']);

// More users, each with a browser profile of their own.
const browsers = [];
before(async () => { for (let i = 0; i < 2; i++) browsers.push(await startBrowser()); });
after(async () => { for (const b of browsers) await b.stop(); });

/** Opens database `name` as a user in `browser` (default: the environment's): `claims` sign a
 *  client token (`null`: no token; `{ key }` signs with another key; `{ raw }` is sent as is),
 *  or `{ service: 'job' }` a service token. Returns the page, with `window.db`. */
async function as(name, claims, browser = env.browser) {
  const p = await browser.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  await installCode(p);
  await installTracker(p);
  await signerIn(p, SECRET);
  await p.evaluate(async ({ name, url, claims, service }) => {
    window.sockets = 0;
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
      constructor(...args) { super(...args); window.sockets += 1; }
    };
    let token;
    if (claims?.raw !== undefined) token = claims.raw;
    else if (claims?.service) token = await window.jwt({ sub: claims.service, exp: Math.floor(Date.now() / 1000) + 600 }, service);
    else if (claims) {
      const { key, ...rest } = claims;
      token = await window.jwt({ exp: Math.floor(Date.now() / 1000) + 600, ...rest }, key);
    }
    window.db = await window.hearth.Hearth.open({ name, relay: url, ...(token !== undefined ? { token } : {}) });
  }, { name, url: env.relay.url, claims, service: SERVICE });
  return p;
}

/** Listens to `query(db)` (a function of the page's db, as source text) in page `p`, keeping
 *  `window[key]` = { ids (the last snapshot's), errors (codes and messages) }. */
async function listen(p, key, query) {
  await p.evaluate(({ key, query }) => {
    const q = new Function('db', `return ${query};`)(window.db);
    window[key] = { ids: null, errors: [] };
    window[key].stop = q.onSnapshot((s) => { window[key].ids = s.docs.map((d) => d.id); },
      (e) => { window[key].errors.push(`${e.code}: ${e.message}`); });
  }, { key, query });
}

const state = (p, key) => p.evaluate((key) => ({ ids: window[key].ids, errors: window[key].errors }), key);
const until = (p, f, arg) => p.waitForFunction(f, arg, { timeout: 15000 });

test('owner-only notes: each operation kind allowed for the owner and denied to others; an optimistic write the relay denies is rolled back', { timeout: 90000 }, async () => {
  const alice = await as('notes', { sub: 'alice' });
  const bob = await as('notes', { sub: 'bob' }, browsers[0]);
  // create: allowed as oneself, denied in another's name or with another field.
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/a1').set({ owner: 'alice', text: 'mine' }))), 'ok');
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('notes/b1').set({ owner: 'bob', text: 'his' }))), 'ok');
  // A listener on the owner's own notes (the filter proves the rule) sees the optimistic
  // write that the relay then denies, and its removal.
  await alice.evaluate(() => {
    window.seen = [];
    window.track(window.db.collection('notes').where('owner', '==', 'alice'), undefined, (s) => window.seen.push(s.docs.map((d) => d.id).join(',')));
  });
  await until(alice, () => window.seen.includes('a1'));
  const denied = await alice.evaluate(() => window.code(() => window.db.doc('notes/a2').set({ owner: 'alice', text: 'x', extra: 1 })));
  assert.equal(denied, 'permission-denied');
  await until(alice, () => window.seen[window.seen.length - 1] === 'a1');
  const seen = await alice.evaluate(() => window.seen);
  assert.ok(seen.includes('a1,a2'), `the optimistic write was shown, then rolled back: ${JSON.stringify(seen)}`);
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/a3').set({ owner: 'bob', text: 'forged' }))), 'permission-denied');
  // get: one's own, not another's (from the relay: a denied read rejects).
  assert.equal(await alice.evaluate(async () => (await window.db.doc('notes/a1').get({ source: 'server' })).data().text), 'mine');
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/b1').get({ source: 'server' }))), 'permission-denied');
  // update: the text only, by the owner only.
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/a1').update({ text: 'edited' }))), 'ok');
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/a1').update({ owner: 'bob' }))), 'permission-denied');
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('notes/a1').update({ text: 'vandal' }))), 'permission-denied');
  // delete: by the owner only.
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('notes/a1').delete())), 'permission-denied');
  // Every rejected write was rolled back: the relay and alice's cache agree.
  assert.equal(await alice.evaluate(async () => (await window.db.doc('notes/a1').get({ source: 'server' })).data().text), 'edited');
  assert.equal(await alice.evaluate(async () => (await window.db.doc('notes/a1').get({ source: 'cache' })).data().owner), 'alice');
  assert.equal(await alice.evaluate(async () => (await window.db.doc('notes/a2').get({ source: 'cache' })).exists), false);
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/a1').delete())), 'ok');
  await until(alice, () => window.seen[window.seen.length - 1] === '');
  await assertTrackersClean(alice);
  await alice.close();
  await bob.close();
});

test('rules are not filters: a query the rule cannot prove is refused whole, its constrained form is allowed; a denied batch applies nothing', { timeout: 60000 }, async () => {
  const alice = await as('filters', { sub: 'alice' });
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/n1').set({ owner: 'alice', text: '1' }))), 'ok');
  // Every note is alice's, yet a query that does not say so is refused.
  await listen(alice, 'all', "db.collection('notes')");
  await until(alice, () => window.all.errors.length > 0);
  const { errors } = await state(alice, 'all');
  assert.match(errors[0], /^permission-denied: Missing or insufficient permissions\./);
  assert.match(errors[0], /depends on fields of the documents that the query does not fix: .* such as where\('owner', '==', 'alice'\)/, 'the explanation (--explain-denials) names the way out');
  assert.equal(await alice.evaluate(() => window.code(() => window.db.collection('notes').get({ source: 'server' }))), 'permission-denied');
  assert.equal(await alice.evaluate(() => window.code(() => window.db.collection('notes').count().get())), 'permission-denied');
  await listen(alice, 'mine', "db.collection('notes').where('owner', '==', 'alice')");
  await until(alice, () => window.mine.ids?.length === 1);
  assert.deepEqual((await state(alice, 'mine')).errors, []);
  assert.equal(await alice.evaluate(async () => (await window.db.collection('notes').where('owner', '==', 'alice').count().get()).data().count), 1);
  // A batch with one denied write applies none of its writes.
  const batch = await alice.evaluate(() => window.code(async () => {
    const b = window.db.batch();
    b.set(window.db.doc('notes/n2'), { owner: 'alice', text: 'fine' });
    b.set(window.db.doc('notes/n3'), { owner: 'mallory', text: 'forged' });
    await b.commit();
  }));
  assert.equal(batch, 'permission-denied');
  // (A missing note is not readable either: resource is null. Her own notes, counted by the
  // relay, are still the one.)
  assert.equal(await alice.evaluate(() => window.code(() => window.db.doc('notes/n2').get({ source: 'server' }))), 'permission-denied');
  assert.equal(await alice.evaluate(async () => (await window.db.collection('notes').where('owner', '==', 'alice').count().get()).data().count), 1);
  await until(alice, () => window.mine.ids?.join() === 'n1');
  await alice.close();
});

test('get() and exists() rules change their outcome when the documents they read change', { timeout: 90000 }, async () => {
  const admin = await as('rooms', { sub: 'root', admin: true });
  const bob = await as('rooms', { sub: 'bob' }, browsers[0]);
  // Not a member: bob may not read the room's messages.
  await listen(bob, 'before', "db.collection('rooms/r1/messages')");
  await until(bob, () => window.before.errors.length > 0);
  assert.match((await state(bob, 'before')).errors[0], /^permission-denied/);
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('rooms/r1/messages/m0').set({ from: 'bob', text: 'hi' }))), 'permission-denied');
  // A member with the reader role: reads, may not write.
  assert.equal(await admin.evaluate(() => window.code(() => window.db.doc('rooms/r1/members/bob').set({ role: 'reader' }))), 'ok');
  await listen(bob, 'after', "db.collection('rooms/r1/messages')");
  await until(bob, () => Array.isArray(window.after.ids));
  assert.deepEqual(await state(bob, 'after'), { ids: [], errors: [] });
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('rooms/r1/messages/m1').set({ from: 'bob', text: 'hi' }))), 'permission-denied');
  // Made a writer: the same write is allowed and reaches the listener.
  assert.equal(await admin.evaluate(() => window.code(() => window.db.doc('rooms/r1/members/bob').update({ role: 'writer' }))), 'ok');
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('rooms/r1/messages/m1').set({ from: 'bob', text: 'hi' }))), 'ok');
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('rooms/r1/messages/m2').set({ from: 'alice', text: 'forged' }))), 'permission-denied');
  await until(bob, () => window.after.ids?.join() === 'm1');
  // Non-admins may not change memberships.
  assert.equal(await bob.evaluate(() => window.code(() => window.db.doc('rooms/r2/members/bob').set({ role: 'writer' }))), 'permission-denied');
  await admin.close();
  await bob.close();
});

test('a listener never sees a document it may not read, also after an update makes it unreadable', { timeout: 60000 }, async () => {
  const author = await as('posts', { sub: 'ann' });
  const reader = await as('posts', null, browsers[0]);
  for (const [id, visibility] of [['p1', 'public'], ['p2', 'private'], ['p3', 'public']]) {
    assert.equal(await author.evaluate(({ id, visibility }) => window.code(() => window.db.doc(`posts/${id}`).set({ author: 'ann', visibility })), { id, visibility }), 'ok');
  }
  // Without a token, the public posts only, through a query that says so.
  await listen(reader, 'pub', "db.collection('posts').where('visibility', '==', 'public')");
  await until(reader, () => window.pub.ids?.join() === 'p1,p3');
  assert.equal(await reader.evaluate(() => window.code(() => window.db.doc('posts/p2').get({ source: 'server' }))), 'permission-denied');
  assert.equal(await reader.evaluate(() => window.code(() => window.db.collection('posts').get({ source: 'server' }))), 'permission-denied');
  // The author makes p1 private: it leaves the reader's view as a removal.
  await reader.evaluate(() => {
    window.changes = [];
    window.db.collection('posts').where('visibility', '==', 'public').onSnapshot((s) => {
      for (const c of s.docChanges()) window.changes.push(`${c.type} ${c.doc.id} ${c.doc.data().visibility}`);
    });
  });
  await until(reader, () => window.changes.length === 2);
  assert.equal(await author.evaluate(() => window.code(() => window.db.doc('posts/p1').update({ visibility: 'private' }))), 'ok');
  await until(reader, () => window.pub.ids?.join() === 'p3');
  await until(reader, () => window.changes.length === 3);
  const changes = await reader.evaluate(() => window.changes);
  assert.deepEqual(changes.slice(2), ['removed p1 public'], 'the reader learns only that p1 left, not its private content');
  assert.equal(await reader.evaluate(async () => (await window.db.doc('posts/p1').get({ source: 'cache' }).catch(() => null))?.data()?.visibility ?? null) !== 'private', true);
  await author.close();
  await reader.close();
});

test('forged, expired and wrongly signed tokens are refused with unauthenticated and surfaced, not retried forever; setToken resumes', { timeout: 90000 }, async () => {
  const now = () => Math.floor(Date.now() / 1000);
  const cases = [
    ['wrong secret', { sub: 'alice', key: 'not-the-secret' }],
    ['expired', { sub: 'alice', exp: now() - 60 }],
    ['garbage', { raw: 'not.a.jwt' }],
  ];
  for (const [what, claims] of cases) {
    const p = await as(`tokens-${what.replace(' ', '-')}`, claims, browsers[1]);
    await listen(p, 'l', "db.collection('notes').where('owner', '==', 'alice')");
    await until(p, () => window.l.errors.length > 0);
    assert.match((await state(p, 'l')).errors[0], /^unauthenticated: /, what);
    assert.equal(await p.evaluate(() => window.code(() => window.db.doc('notes/x').get({ source: 'server' }))), 'unauthenticated', what);
    // A later listen fails the same way at once, and the client stops knocking.
    await listen(p, 'l2', "db.collection('notes').where('owner', '==', 'alice')");
    await until(p, () => window.l2.errors.length > 0);
    const sockets = await p.evaluate(() => window.sockets);
    await new Promise((r) => setTimeout(r, 3000));
    assert.equal(await p.evaluate(() => window.sockets), sockets, `${what}: no reconnection after the refusal`);
    // A write made meanwhile is kept, and sent once the app gives a good token.
    await p.evaluate(() => { window.write = window.db.doc('notes/kept').set({ owner: 'alice', text: 'queued' }); });
    await p.evaluate(async () => window.db.setToken(await window.jwt({ sub: 'alice', exp: Math.floor(Date.now() / 1000) + 600 })));
    assert.equal(await p.evaluate(() => window.code(() => window.write)), 'ok', what);
    await listen(p, 'l3', "db.collection('notes').where('owner', '==', 'alice')");
    await until(p, () => window.l3.ids?.includes('kept'));
    await p.evaluate(async () => { await window.db.doc('notes/kept').delete(); window.db.close(); });
    await p.close();
  }
  // With a token callback that keeps giving a refused token: asked again once, then surfaced.
  const p = await as('tokens-callback', null, browsers[1]);
  await p.evaluate(async (url) => {
    window.db.close();
    window.calls = 0;
    const token = async () => { window.calls += 1; return window.jwt({ sub: 'alice' }, 'wrong'); };
    window.db = await window.hearth.Hearth.open({ name: 'tokens-callback-2', relay: url, token });
  }, env.relay.url);
  await listen(p, 'l', "db.collection('notes').where('owner', '==', 'alice')");
  await until(p, () => window.l.errors.length > 0);
  assert.match((await state(p, 'l')).errors[0], /^unauthenticated: /);
  await new Promise((r) => setTimeout(r, 2000));
  assert.equal(await p.evaluate(() => window.calls), 2, 'the callback had one more chance');
  await p.close();
});

test('no token is request.auth == null; a service token is past the rules', { timeout: 60000 }, async () => {
  const anon = await as('service', null, browsers[1]);
  assert.equal(await anon.evaluate(() => window.code(() => window.db.doc('notes/s1').set({ owner: 'alice', text: 'x' }))), 'permission-denied');
  await anon.close();
  const job = await as('service', { service: 'nightly-job' }, browsers[1]);
  assert.equal(await job.evaluate(() => window.code(() => window.db.doc('notes/s1').set({ owner: 'alice', text: 'by the job', extra: true }))), 'ok');
  assert.equal(await job.evaluate(async () => (await window.db.collection('notes').get({ source: 'server' })).size), 1);
  await job.evaluate(() => window.db.close());
  await job.close();
});

test("the seeds' server code runs unchanged under rules with a service token, and is refused with a client's", { timeout: 90000 }, async () => {
  // The rules say nothing of instruments: only trusted server code may touch them.
  const client = await as('seeds-client', { sub: 'alice' }, browsers[1]);
  const refused = await client.evaluate(() => window.code(async () => {
    const { seed000 } = await import('/pkg-tests/e2e/seed000.js');
    return seed000(window.db, window.hearth.Timestamp);
  }));
  assert.equal(refused, 'permission-denied');
  await client.evaluate(() => window.db.close());
  await client.close();
  const server = await as('seeds-server', { service: 'seed-job' }, browsers[1]);
  const lines = await server.evaluate(async () => {
    const { seed000 } = await import('/pkg-tests/e2e/seed000.js');
    return seed000(window.db, window.hearth.Timestamp);
  });
  const groups = seedGroups(lines);
  assert.deepEqual(groups['--- queryCommonStock: '], ['BBB', 'AAA']);
  assert.deepEqual(groups['--- queryExchange1Instruments: '], ['AAA', 'Index1 ETF']);
  const total = await server.evaluate(async () => {
    const { countTo } = await import('/pkg-tests/e2e/seed002.js');
    return countTo(window.db, window.hearth.FieldValue, 20);
  });
  assert.equal(total, 20);
  await server.evaluate(() => window.db.close());
  await server.close();
});
