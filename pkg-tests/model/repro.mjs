// Reduced reproductions of what the model test found, small enough to debug by reading the
// output: each runs a few writes in one or two headless Chromium clients against a real
// relay, prints what the client showed and what it should have, and exits 1 if they differ.
//   node pkg-tests/model/repro.mjs [counter-seq | counter-kill | group-merge | group-offline | group-race | all]
// Timing decides how often each shows the fault; run it a few times.
import { startBrowser, startServer, root } from '../e2e/harness.mjs';
import { launchRelay } from './relay.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A relay, a file server and `n` clients (separate profiles), each with `window.db` open on
 *  database `name` and a `window.shown` list its listeners push to. */
async function clients(n, name) {
  const relay = await launchRelay(root);
  const server = await startServer();
  const browsers = [];
  const pages = [];
  for (let i = 0; i < n; i++) {
    browsers.push(await startBrowser());
    const p = await browsers[i].context.newPage();
    await p.goto(`${server.origin}/pkg-tests/model/page.html`);
    await p.waitForFunction(() => window.hearthReady === true, null, { timeout: 30000 });
    await p.evaluate(async ({ name, url }) => {
      window.db = await window.hearth.Hearth.open({ name, relay: url });
      window.shown = [];
    }, { name, url: relay.url });
    pages.push(p);
  }
  return { relay, pages,
    async stop() {
      for (const b of browsers) await b.stop();
      await server.stop();
      await relay.stop();
    } };
}

/** Listens to `counters/c` on page `p`, pushing each snapshot's `n`. */
const listenCounter = (p) => p.evaluate(async () => {
  await window.db.doc('counters/c').set({ n: 0 });
  window.db.doc('counters/c').onSnapshot((s) => window.shown.push(s.exists ? s.data().n : null));
});
const increment = (p, times) => p.evaluate((times) => {
  for (let i = 0; i < times; i++) window.db.doc('counters/c').update({ n: window.hearth.FieldValue.increment(1) });
}, times);
const counterState = async (p, reader) => ({
  shown: await p.evaluate(() => window.shown),
  cache: await p.evaluate(async () => (await window.db.doc('counters/c').get({ source: 'cache' })).data().n),
  relay: await reader.evaluate(async () => (await window.db.doc('counters/c').get({ source: 'server' })).data().n),
});
const decreases = (list) => list.some((v, i) => i > 0 && v < list[i - 1]);
/** For snapshots written as `id:v,id:v,...`: whether one shows the ids with different `v`,
 *  and the sequence of `v` (of the first document) for the growth checks. */
const mixedAndValues = (shown) => ({
  mixed: shown.filter((l) => new Set(l.split(',').filter(Boolean).map((x) => x.split(':')[1])).size > 1),
  values: shown.filter(Boolean).map((l) => Number(l.split(',')[0].split(':')[1]) || 0),
});

const scenarios = {
  /** One client increments a counter it listens to, one increment every few milliseconds:
   *  the listener must never show a smaller value than before, nor more than was issued. */
  async 'counter-seq'() {
    const env = await clients(2, 'repro-seq');
    const [a, b] = env.pages;
    try {
      await listenCounter(a);
      await sleep(500);
      for (let i = 0; i < 10; i++) { await increment(a, 1); await sleep(5); }
      await a.evaluate(() => window.db.waitForPendingWrites());
      await sleep(2000);
      const s = await counterState(a, b);
      console.log(`counter-seq: the listener showed ${s.shown.join(' ')}; cache ${s.cache}, relay ${s.relay}; expected 0..10 never decreasing, all 10`);
      return !decreases(s.shown) && Math.max(...s.shown) <= 10 && s.cache === 10 && s.relay === 10 && s.shown.at(-1) === 10;
    } finally { await env.stop(); }
  },
  /** Increments pending across a relay crash (kill -9) and restart: the relay ends right
   *  (9); the writer's cache and listener must converge on it. */
  async 'counter-kill'() {
    const env = await clients(2, 'repro-kill');
    const [a, b] = env.pages;
    try {
      await listenCounter(a);
      await sleep(500);
      await increment(a, 3);
      await env.relay.kill9();
      await increment(a, 3);
      await env.relay.start();
      await increment(a, 3);
      await a.evaluate(() => window.db.waitForPendingWrites());
      await sleep(4000);
      const s = await counterState(a, b);
      console.log(`counter-kill: the listener showed ${s.shown.join(' ')}; cache ${s.cache}, relay ${s.relay}; expected all three 9 at the end, never decreasing`);
      return !decreases(s.shown) && s.cache === 9 && s.relay === 9 && s.shown.at(-1) === 9;
    } finally { await env.stop(); }
  },
  /** Four batches from one client each merge `v: increment(1)` into three documents; a
   *  collection listener must show the three equal in every snapshot, `v` never going back
   *  nor past 4, and the cache must end equal to the relay. */
  async 'group-merge'() {
    const env = await clients(1, 'repro-group');
    const [a] = env.pages;
    try {
      await a.evaluate(() => {
        window.db.collection('g').onSnapshot((s) => window.shown.push(s.docs.map((d) => `${d.id}:${d.data().v}`).join(',')));
      });
      for (let i = 0; i < 4; i++) {
        await a.evaluate(() => {
          const b = window.db.batch();
          for (const id of ['a', 'b', 'c']) b.set(window.db.doc(`g/${id}`), { v: window.hearth.FieldValue.increment(1) }, { merge: true });
          b.commit();
        });
        await sleep(20);
      }
      await a.evaluate(() => window.db.waitForPendingWrites());
      await sleep(2000);
      const shown = await a.evaluate(() => window.shown);
      const read = (source) => a.evaluate(async (source) => (await window.db.collection('g').get({ source }))
        .docs.map((d) => `${d.id}:${d.data().v}`).join(','), source);
      const cache = await read('cache');
      const relay = await read('server');
      const { mixed, values } = mixedAndValues(shown);
      console.log(`group-merge: snapshots ${shown.map((l) => `[${l}]`).join(' ')}; cache [${cache}], relay [${relay}]; expected a, b, c equal in each, never going back or past 4, ending at 4`);
      return mixed.length === 0 && !decreases(values) && Math.max(...values) <= 4
        && [shown.at(-1), cache, relay].every((l) => l === 'a:4,b:4,c:4');
    } finally { await env.stop(); }
  },
  /** Another client creates three documents; this one, offline, merges `v: increment(1)`
   *  into all three in one batch, goes online and at once merges again: a collection
   *  listener must show the three equal in every snapshot, `v` never going back nor past 2,
   *  ending at 2. */
  async 'group-offline'() {
    const env = await clients(2, 'repro-offline');
    const [a, b] = env.pages;
    try {
      await b.evaluate(() => Promise.all(['a', 'b', 'c'].map((id) => window.db.doc(`g/${id}`).set({ rank: 4 }))));
      await a.evaluate(() => {
        window.db.collection('g').onSnapshot((s) => window.shown.push(s.docs.map((d) => `${d.id}:${d.data().v}`).join(',')));
      });
      await sleep(1000);
      const merge = () => a.evaluate(() => {
        const batch = window.db.batch();
        for (const id of ['a', 'b', 'c']) batch.set(window.db.doc(`g/${id}`), { v: window.hearth.FieldValue.increment(1), rank: 3 }, { merge: true });
        batch.commit();
      });
      await a.evaluate(() => window.db.disableNetwork());
      await merge();
      await sleep(200);
      await a.evaluate(() => window.db.enableNetwork());
      await merge();
      await a.evaluate(() => window.db.waitForPendingWrites());
      await sleep(2000);
      const shown = await a.evaluate(() => window.shown);
      const { mixed, values } = mixedAndValues(shown);
      console.log(`group-offline: snapshots ${shown.map((l) => `[${l}]`).join(' ')}; expected a, b, c equal in each, never going back or past 2, ending at 2`);
      return mixed.length === 0 && !decreases(values) && Math.max(...values) <= 2 && shown.at(-1) === 'a:2,b:2,c:2';
    } finally { await env.stop(); }
  },
  /** Another client's batch sets two documents while this one issues two batches setting
   *  both (no waiting between the three): a collection listener on this client must show
   *  the two equal in every snapshot, and once it showed its own last write (a2), only that
   *  or the relay's final state (b1 if the relay committed it last, never a1): latency
   *  compensation keeps a write shown until the relay's copy holds it or something newer. */
  async 'group-race'() {
    const env = await clients(2, 'repro-race');
    const [a, b] = env.pages;
    try {
      await a.evaluate(() => {
        window.db.collection('g').onSnapshot((s) => window.shown.push(s.docs.map((d) => `${d.id}:${d.data().w}`).join(',')));
      });
      await sleep(1000);
      const batch = (p, w) => p.evaluate((w) => {
        const bt = window.db.batch();
        for (const id of ['a', 'b']) bt.set(window.db.doc(`g/${id}`), { w });
        bt.commit();
      }, w);
      await batch(b, 'b1');
      await batch(a, 'a1');
      await batch(a, 'a2');
      await a.evaluate(() => window.db.waitForPendingWrites());
      await sleep(2000);
      const shown = await a.evaluate(() => window.shown);
      const relay = await b.evaluate(async () => (await window.db.collection('g').get({ source: 'server' }))
        .docs.map((d) => `${d.id}:${d.data().w}`).join(','));
      const mixed = shown.filter((l) => new Set(l.split(',').filter(Boolean).map((x) => x.split(':')[1])).size > 1);
      const last = shown.indexOf('a:a2,b:a2');
      const back = last >= 0 && shown.slice(last).some((l) => l !== 'a:a2,b:a2' && l !== relay);
      console.log(`group-race: snapshots ${shown.map((l) => `[${l}]`).join(' ')}; relay [${relay}]; expected a and b equal in each, only a2 or the relay's state once a2 was shown, ending as the relay`);
      return mixed.length === 0 && !back && shown.at(-1) === relay;
    } finally { await env.stop(); }
  },
};

const names = process.argv[2] && process.argv[2] !== 'all' ? [process.argv[2]] : Object.keys(scenarios);
let failed = 0;
for (const n of names) {
  if (!scenarios[n]) throw new Error(`no scenario ${n}: one of ${Object.keys(scenarios).join(', ')}`);
  const ok = await scenarios[n]();
  console.log(`${n}: ${ok ? 'as expected' : 'FAULT'}`);
  if (!ok) failed += 1;
}
process.exitCode = failed ? 1 : 0;
