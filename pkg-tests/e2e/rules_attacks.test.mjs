// End-to-end tests of attacks on security rules through the npm package in headless Chromium:
// each test is one way a caller could learn or keep what Firestore's rules would deny them,
// and asserts Firestore's behaviour. Every test starts a relay of its own with its rules file
// (`--rules`, a client token secret and a service secret); the users share three browser
// profiles (one per user, as on their own machines: a profile's cache and its open pages of a
// database are shared, so a writer must never share a profile with the reader it is tested
// against). Run: node --test pkg-tests/e2e/rules_attacks.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { installCode, signerIn, startBrowser, startServer, startRelayProcess } from './harness.mjs';

const SECRET = 'hearth-e2e-attacks-client-secret';
const SERVICE = 'hearth-e2e-attacks-service-secret';
const dir = mkdtempSync(join(tmpdir(), 'hearth-e2e-attacks-'));

let server;
const browsers = {};
before(async () => {
  server = await startServer();
  for (const who of ['alice', 'bob', 'service']) browsers[who] = await startBrowser();
});
after(async () => {
  for (const b of Object.values(browsers)) await b.stop();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A version 2 rules file whose document matches are `body`. */
const v2 = (body) => `rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
${body}
  }
}
`;

/** Starts a relay with rules `text` in a file of its own (`relay.rulesFile`) and `args`. */
async function relayWith(tag, text, args = []) {
  const rulesFile = join(dir, `${tag}.rules`);
  writeFileSync(rulesFile, text);
  const relay = await startRelayProcess(['--rules', rulesFile, '--auth-secret', SECRET,
    '--service-secret', SERVICE, ...args]);
  relay.rulesFile = rulesFile;
  return relay;
}

/** Runs `f(relay)` with a relay started as `relayWith` does, stopping it after. */
async function withRelay(tag, text, args, f) {
  const relay = await relayWith(tag, text, args);
  try {
    return await f(relay);
  } finally {
    await relay.stop();
  }
}

/** Opens database `name` of `relay` in `browser` as `who`: a uid (a client token signed with
 *  SECRET), `{ service: 'job' }` (a service token), or null (no token). Returns the page, with
 *  `window.db`, `window.code` and `window.outcome`; `page.received` collects the payloads
 *  (Buffers) of every WebSocket frame the page receives, `page.traces` the sync layer's debug
 *  lines (`window.__HEARTH_DEBUG__`: each Listen sent, with its resume version). */
async function as(relay, name, who, browser) {
  const p = await browser.page(`${server.origin}/pkg-tests/e2e/page.html`);
  p.received = [];
  p.on('websocket', (ws) => ws.on('framereceived', (f) => {
    p.received.push(Buffer.isBuffer(f.payload) ? f.payload : Buffer.from(String(f.payload)));
  }));
  p.traces = [];
  p.on('console', (m) => { if (m.text().startsWith('hearth-sync')) p.traces.push(m.text()); });
  await installCode(p);
  await signerIn(p, SECRET);
  await p.evaluate(async ({ name, url, who, service }) => {
    window.__HEARTH_DEBUG__ = true;
    // How `f` ends: { ok: its value } or { code, message }.
    window.outcome = (f, ms = 15000) => Promise.race([
      (async () => f())().then((ok) => ({ ok }), (e) => ({ code: e?.code ?? 'no code', message: e?.message ?? String(e) })),
      new Promise((r) => setTimeout(() => r({ code: 'timed out' }), ms)),
    ]);
    const exp = Math.floor(Date.now() / 1000) + 600;
    let token;
    if (who?.service) token = await window.jwt({ sub: who.service, exp }, service);
    else if (who) token = await window.jwt({ sub: who, exp });
    window.db = await window.hearth.Hearth.open({ name, relay: url, ...(token ? { token } : {}) });
  }, { name, url: relay.url, who, service: SERVICE });
  return p;
}

/** Sets document `path` to `data` from page `p`: 'ok' or the refusal's code. */
const set = (p, path, data) => p.evaluate(({ path, data }) => window.code(() => window.db.doc(path).set(data)), { path, data });

/** Whether any frame page `p` received contains one of `strings`: the ones found. */
const leaked = (p, strings) => strings.filter((s) => p.received.some((b) => b.includes(Buffer.from(s))));

/** Listens to `query` (source text over `db`) in page `p` with metadata changes, keeping
 *  `window[key]` = { snaps: [{ ids, fromCache }], errors: ['code: message'] }. */
async function listen(p, key, query) {
  await p.evaluate(({ key, query }) => {
    const q = new Function('db', `return ${query};`)(window.db);
    const l = window[key] = { snaps: [], errors: [] };
    l.stop = q.onSnapshot({ includeMetadataChanges: true },
      (s) => l.snaps.push({ ids: s.docs.map((d) => d.id), fromCache: s.metadata.fromCache }),
      (e) => l.errors.push(`${e.code}: ${e.message}`));
  }, { key, query });
}

/** Listens to document `path` in page `p` with metadata changes, keeping `window[key]` =
 *  { snaps: [{ exists, data, fromCache }], errors }. */
async function listenDoc(p, key, path) {
  await p.evaluate(({ key, path }) => {
    const l = window[key] = { snaps: [], errors: [] };
    l.stop = window.db.doc(path).onSnapshot({ includeMetadataChanges: true },
      (s) => l.snaps.push({ exists: s.exists, data: s.exists ? s.data() : null, fromCache: s.metadata.fromCache }),
      (e) => l.errors.push(`${e.code}: ${e.message}`));
  }, { key, path });
}

/** Waits (at most `ms`) until listener `key` in `p` has an error or a snapshot from the
 *  relay; its state then ({ snaps, errors, settled }). */
async function settle(p, key, ms = 15000) {
  const settled = await p.waitForFunction((key) => window[key].errors.length > 0 || window[key].snaps.some((s) => !s.fromCache),
    key, { timeout: ms }).then(() => true, () => false);
  return { ...(await p.evaluate((key) => ({ snaps: window[key].snaps, errors: window[key].errors }), key)), settled };
}

/** The code of a listener's first error (null: none). */
const firstCode = (l) => (l.errors[0] ? l.errors[0].split(':')[0] : null);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('1. a presence test (`in resource.data`) does not prove an unfiltered list: bob may not list or count posts when one could be private', { timeout: 90000 }, async () => {
  const rules = v2(`    match /posts/{p} {
      allow read: if !('private' in resource.data) || resource.data.author == request.auth.uid;
      allow write: if true;
    }`);
  await withRelay('presence', rules, [], async (relay) => {
    const alice = await as(relay, 'presence', 'alice', browsers.alice);
    const bob = await as(relay, 'presence', 'bob', browsers.bob);
    assert.equal(await set(bob, 'posts/p1', { author: 'bob' }), 'ok');
    assert.equal(await set(alice, 'posts/p2', { author: 'alice', private: true }), 'ok');
    // The proof holds when the query fixes the author: allowed.
    const own = await bob.evaluate(() => window.outcome(async () => (await window.db.collection('posts').where('author', '==', 'bob').get({ source: 'server' })).docs.map((d) => d.id)));
    assert.deepEqual(own, { ok: ['p1'] });
    // Unfiltered, a result may hold a private post of another author: refused whole.
    const seen = {
      get: await bob.evaluate(() => window.outcome(async () => (await window.db.collection('posts').get({ source: 'server' })).docs.map((d) => d.id))),
      count: await bob.evaluate(() => window.outcome(async () => (await window.db.collection('posts').count().get()).data().count)),
    };
    await listen(bob, 'all', "db.collection('posts')");
    const l = await settle(bob, 'all');
    seen.listen = l.errors.length ? { code: firstCode(l) } : { ok: l.snaps.filter((s) => !s.fromCache).map((s) => s.ids) };
    const refused = { code: 'permission-denied' };
    assert.deepEqual({ get: seen.get.code ? { code: seen.get.code } : seen.get, count: seen.count.code ? { code: seen.count.code } : seen.count, listen: seen.listen },
      { get: refused, count: refused, listen: refused });
    await alice.close();
    await bob.close();
  });
});

test('2. a resumed listen discloses nothing of documents outside its result: no frame names alice\'s notes to mallory', { timeout: 120000 }, async () => {
  const rules = v2(`    match /notes/{n} {
      allow read: if resource.data.owner == request.auth.uid;
      allow write: if request.resource.data.owner == request.auth.uid;
    }`);
  const secrets = ['alice-medical-2026', 'alice-other', 'alice-after-reload'];
  await withRelay('resume', rules, [], async (relay) => {
    const alice = await as(relay, 'resume', 'alice', browsers.alice);
    let mallory = await as(relay, 'resume', 'mallory', browsers.bob);
    const pages = [mallory];
    const query = "db.collection('notes').where('owner', '==', 'mallory')";
    assert.equal(await set(mallory, 'notes/mallory-1', { owner: 'mallory', text: 'mine' }), 'ok');
    await listen(mallory, 'first', query);
    const first = await settle(mallory, 'first');
    assert.deepEqual({ errors: first.errors, last: first.snaps.at(-1)?.ids }, { errors: [], last: ['mallory-1'] });
    await sleep(500); // the target's resume version is stored once its changes are
    await mallory.evaluate(() => window.first.stop());
    // While mallory does not listen, alice writes notes of hers in the same collection.
    assert.equal(await set(alice, 'notes/alice-medical-2026', { owner: 'alice', text: 'diagnosis' }), 'ok');
    assert.equal(await set(alice, 'notes/alice-other', { owner: 'alice', text: 'other' }), 'ok');
    // The same query again, in the same session: the client resumes from the version it kept.
    await listen(mallory, 'second', query);
    const second = await settle(mallory, 'second');
    await sleep(1000);
    // And in a new session (the page reloaded): it resumes from the version stored in IndexedDB.
    await mallory.evaluate(() => window.db.close());
    await mallory.close();
    assert.equal(await set(alice, 'notes/alice-after-reload', { owner: 'alice', text: 'later' }), 'ok');
    mallory = await as(relay, 'resume', 'mallory', browsers.bob);
    pages.push(mallory);
    await listen(mallory, 'third', query);
    const third = await settle(mallory, 'third');
    await sleep(1000);
    // The attack needs the client to resume: both later listens were sent with a resume version.
    const listens = pages.flatMap((p) => p.traces.filter((t) => /target t\d+: "listener" resume/.test(t)));
    assert.equal(listens.length, 3, listens.join('\n'));
    assert.match(listens[0], /resume None$/);
    assert.match(listens[1], /resume Some\(\d+\)$/, 'the second listen resumes');
    assert.match(listens[2], /resume Some\(\d+\)$/, 'the listen after the reload resumes');
    const results = (l) => ({ errors: l.errors, settled: l.settled, last: l.snaps.at(-1)?.ids });
    assert.deepEqual({
      leaked: pages.flatMap((p) => leaked(p, secrets)),
      second: results(second),
      third: results(third),
    }, {
      leaked: [],
      second: { errors: [], settled: true, last: ['mallory-1'] },
      third: { errors: [], settled: true, last: ['mallory-1'] },
    });
    await mallory.close();
    await alice.close();
  });
});

test('3. a document listener is a get: the owner rule lets alice listen to users/alice and not bob; get-only rules allow it, list-only rules refuse it', { timeout: 90000 }, async () => {
  const rules = v2(`    match /users/{uid} {
      allow read: if request.auth.uid == uid;
      allow write: if request.auth.uid == uid;
    }
    match /g/{d} {
      allow get: if true;
      allow list: if false;
    }
    match /h/{d} {
      allow list: if true;
      allow get: if false;
    }`);
  await withRelay('doclisten', rules, [], async (relay) => {
    const job = await as(relay, 'doclisten', { service: 'job' }, browsers.service);
    assert.equal(await set(job, 'g/x', { v: 'get-only' }), 'ok');
    assert.equal(await set(job, 'h/x', { v: 'list-only' }), 'ok');
    const alice = await as(relay, 'doclisten', 'alice', browsers.alice);
    const bob = await as(relay, 'doclisten', 'bob', browsers.bob);
    assert.equal(await set(alice, 'users/alice', { name: 'Alice' }), 'ok');
    await listenDoc(alice, 'own', 'users/alice');
    await listenDoc(bob, 'other', 'users/alice');
    await listenDoc(alice, 'g', 'g/x');
    await listenDoc(alice, 'h', 'h/x');
    const seen = {};
    for (const [p, key] of [[alice, 'own'], [bob, 'other'], [alice, 'g'], [alice, 'h']]) {
      const l = await settle(p, key);
      const server = l.snaps.find((s) => !s.fromCache);
      seen[key] = l.errors.length ? { code: firstCode(l), sawData: l.snaps.some((s) => s.exists) }
        : { data: server ? server.data : `no snapshot from the relay: ${JSON.stringify(l.snaps)}` };
    }
    assert.deepEqual(seen, {
      own: { data: { name: 'Alice' } },
      other: { code: 'permission-denied', sawData: false },
      g: { data: { v: 'get-only' } },
      h: { code: 'permission-denied', sawData: false },
    });
    for (const p of [job, alice, bob]) await p.close();
  });
});

test('4. a denied write or transaction read does not tell whether the document exists', { timeout: 90000 }, async () => {
  const rules = v2(`    match /vault/{d} {
      allow read: if false;
      allow create: if false;
      allow update, delete: if false;
    }`);
  // As in production: denials without the explanation of the rule that decided.
  await withRelay('vault', rules, ['--explain-denials', 'false'], async (relay) => {
    const job = await as(relay, 'vault', { service: 'job' }, browsers.service);
    assert.equal(await set(job, 'vault/exists', { v: 1 }), 'ok');
    const eve = await as(relay, 'vault', 'eve', browsers.bob);
    const text = (o) => (o.code ? `${o.code}: ${o.message}` : `ok ${JSON.stringify(o.ok)}`);
    const update = async (path) => text(await eve.evaluate((path) => window.outcome(() => window.db.doc(path).update({ v: 2 })), path));
    const txRead = async (path) => text(await eve.evaluate((path) => window.outcome(() => window.db.runTransaction(async (tx) => {
      const s = await tx.get(window.db.doc(path));
      return s.exists;
    })), path));
    const seen = {
      update: { exists: await update('vault/exists'), missing: await update('vault/missing') },
      transaction: { exists: await txRead('vault/exists'), missing: await txRead('vault/missing') },
    };
    assert.match(seen.update.exists, /^permission-denied: /);
    assert.match(seen.transaction.exists, /^permission-denied: /);
    // The refusal of the missing document is the existing one's, word for word.
    assert.deepEqual(
      { update: seen.update.missing, transaction: seen.transaction.missing },
      { update: seen.update.exists, transaction: seen.transaction.exists });
    assert.equal(await job.evaluate(async () => (await window.db.doc('vault/exists').get({ source: 'server' })).data().v), 1);
    await job.close();
    await eve.close();
  });
});

test('5. a rules reload reaches open listeners: a listen the new rules deny ends with permission-denied and gets no later document', { timeout: 120000 }, async () => {
  const open = v2(`    match /feed/{d} {
      allow read: if true;
      allow write: if true;
    }`);
  const closed = open.replace('allow read: if true;', 'allow read: if false;');
  await withRelay('reload', open, [], async (relay) => {
    const reader = await as(relay, 'reload', 'reader', browsers.alice);
    const writer = await as(relay, 'reload', 'writer', browsers.service);
    assert.equal(await set(writer, 'feed/before', { text: 'before the reload' }), 'ok');
    await listen(reader, 'feed', "db.collection('feed')");
    const start = await settle(reader, 'feed');
    assert.deepEqual({ errors: start.errors, last: start.snaps.at(-1)?.ids }, { errors: [], last: ['before'] });
    // The rules now deny every read; SIGHUP reloads them.
    writeFileSync(relay.rulesFile, closed);
    relay.signal('SIGHUP');
    const refused = await reader.evaluate(async () => {
      for (let i = 0; i < 60; i++) {
        const o = await window.outcome(() => window.db.collection('feed').get({ source: 'server' }));
        if (o.code === 'permission-denied') return true;
        await new Promise((r) => setTimeout(r, 250));
      }
      return false;
    });
    assert.equal(refused, true, 'the reloaded rules refuse a new query');
    assert.equal(relay.stderr().includes('panicked'), false, relay.stderr());
    const secret = 'written-after-the-reload';
    assert.equal(await set(writer, 'feed/after', { text: secret }), 'ok');
    await reader.waitForFunction(() => window.feed.errors.length > 0 || window.feed.snaps.some((s) => s.ids.includes('after')),
      null, { timeout: 10000 }).catch(() => {});
    await sleep(1000);
    const l = await reader.evaluate(() => ({ snaps: window.feed.snaps, errors: window.feed.errors }));
    assert.deepEqual({
      error: firstCode(l),
      sawAfter: l.snaps.some((s) => s.ids.includes('after')),
      leakedOnWire: leaked(reader, ['feed/after', secret]),
    }, { error: 'permission-denied', sawAfter: false, leakedOnWire: [] });
    await reader.close();
    await writer.close();
  });
});

test('6a. a rules file with a hyphen in a match path (Firebase-valid) is served', { timeout: 60000 }, async () => {
  const rules = v2(`    match /user-profiles/{id} {
      allow read: if true;
    }`);
  await withRelay('hyphen', rules, [], async (relay) => {
    const job = await as(relay, 'hyphen', { service: 'job' }, browsers.service);
    assert.equal(await set(job, 'user-profiles/p1', { name: 'Pat' }), 'ok');
    const anon = await as(relay, 'hyphen', null, browsers.bob);
    assert.deepEqual({
      get: await anon.evaluate(() => window.outcome(async () => (await window.db.doc('user-profiles/p1').get({ source: 'server' })).data())),
      list: await anon.evaluate(() => window.outcome(async () => (await window.db.collection('user-profiles').get({ source: 'server' })).docs.map((d) => d.id))),
    }, { get: { ok: { name: 'Pat' } }, list: { ok: ['p1'] } });
    await job.close();
    await anon.close();
  });
});

test('6b. a rules file without rules_version is version 1: a recursive wildcard serves collection queries, not collection-group queries', { timeout: 60000 }, async () => {
  const rules = `service cloud.firestore {
  match /databases/{database}/documents {
    match /{path=**} {
      allow read: if true;
    }
  }
}
`;
  await withRelay('version1', rules, [], async (relay) => {
    const job = await as(relay, 'version1', { service: 'job' }, browsers.service);
    assert.equal(await set(job, 'items/a', { n: 1 }), 'ok');
    assert.equal(await set(job, 'shelves/s1/items/b', { n: 2 }), 'ok');
    const anon = await as(relay, 'version1', null, browsers.bob);
    const ids = (q) => anon.evaluate((q) => window.outcome(async () => {
      const r = await new Function('db', `return ${q};`)(window.db).get({ source: 'server' });
      return r.docs.map((d) => d.ref.path);
    }), q);
    const group = await ids("db.collectionGroup('items')");
    assert.deepEqual({
      collection: await ids("db.collection('items')"),
      subcollection: await ids("db.collection('shelves/s1/items')"),
      group: group.code ? { code: group.code } : group,
    }, {
      collection: { ok: ['items/a'] },
      subcollection: { ok: ['shelves/s1/items/b'] },
      group: { code: 'permission-denied' },
    });
    await job.close();
    await anon.close();
  });
});
