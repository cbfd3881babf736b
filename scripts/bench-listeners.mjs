#!/usr/bin/env node
// Listeners at scale in one page (issue 24, item 5): a database of N documents of about
// 200 bytes, L listeners on the whole collection (each replays docChanges() as an app would),
// then W updates of random documents, each awaited until every listener has raised the
// snapshot holding it. Prints one JSON line: the time per update (median, p90, max) and the
// updates per second. With --relay, the page syncs with a relay of its own (started here)
// and each update is also awaited until the relay acknowledged it.
//
//   node scripts/bench-listeners.mjs [--docs N] [--listeners L] [--writes W] [--relay]
//                                    [--rate R]
//   node scripts/bench-listeners.mjs --distinct [--docs N] [--listeners L] [--writes W]
//
// --rate R: the W updates are made at R per second, each without waiting for the one before
// (a page that writes as its user types); prints, per update, the time until every listener
// raised it (median, p99, max), the rate reached, and how far behind the last one was.
//
// --distinct: L listeners with distinct queries in one page (`where('n', '>=', l)`,
// `orderBy('n', 'desc')`, `limit(1)`, each l its own) over a relay; prints the time until
// every listener has its first snapshot from the relay, then, for W writes made by another
// client (another browser profile) that enter every result, the time from the write until
// every listener raised it.
//
// Needs pkg/ (bash scripts/build-pkg) and, with --relay or --distinct,
// target/release/hearth-relay.
import { startServer, startBrowser, startRelayProcess } from '../pkg-tests/e2e/harness.mjs';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
}
const docs = arg('docs', 10000);
const listeners = arg('listeners', 20);
const writes = arg('writes', 100);
const rate = arg('rate', 0);
const distinct = process.argv.includes('--distinct');
const withRelay = distinct || process.argv.includes('--relay');

if (withRelay) process.env.HEARTH_RELAY_BIN ??= new URL('../target/release/hearth-relay', import.meta.url).pathname;
const relay = withRelay ? await startRelayProcess() : null;
const server = await startServer();
const browser = await startBrowser();
try {
  if (distinct) {
    await distinctListeners();
    process.exit(0);
  }
  const page = await browser.page(`${server.origin}/pkg-tests/e2e/page.html`);
  const result = await page.evaluate(async ({ docs, listeners, writes, relay, rate }) => {
    const db = await window.hearth.Hearth.open({ name: 'bench-listeners', ...(relay ? { relay } : {}) });
    for (let i = 0; i < docs; i += 500) {
      const b = db.batch();
      for (let k = i; k < Math.min(docs, i + 500); k++) {
        b.set(db.doc(`items/d${String(k).padStart(6, '0')}`), { n: k, label: `item ${k}`, tags: ['a', 'b'], v: 0 });
      }
      await b.commit();
    }
    // Each listener keeps its own copy of the result from docChanges(), as an app would.
    const seen = Array.from({ length: listeners }, () => new Map());
    // With a relay: whether the first listener had a snapshot from it (fromCache false).
    let synced = !relay;
    let waiting = null;
    // With --rate: called once all listeners raised a snapshot (the last one's callback).
    let raised = null;
    const unsubs = [];
    for (let l = 0; l < listeners; l++) {
      // The first listener raises metadata changes too, so that it tells when the relay's
      // first result has come (equal to the cache's, it changes no document).
      const options = { includeMetadataChanges: l === 0 };
      unsubs.push(db.collection('items').onSnapshot(options, (s) => {
        if (!s.metadata.fromCache) synced = true;
        for (const c of s.docChanges()) {
          if (c.type === 'removed') seen[l].delete(c.doc.id);
          else seen[l].set(c.doc.id, c.doc.data().v);
        }
        if (l === listeners - 1) raised?.();
        waiting?.();
      }));
    }
    const t0 = performance.now();
    while (seen.some((m) => m.size < docs)) {
      await new Promise((r) => { waiting = r; });
      if (performance.now() - t0 > 120000) throw new Error('first snapshots not all in after 120 s');
    }
    const firstMs = performance.now() - t0;
    // The updates start once the listeners are in sync with the relay (its first result,
    // every document for each listener, has been applied): they measure the steady state,
    // not that first sync.
    while (!synced) {
      await new Promise((r) => { waiting = r; });
      if (performance.now() - t0 > 120000) throw new Error('listeners not in sync after 120 s');
    }
    const syncedMs = performance.now() - t0;
    if (rate > 0) {
      const result = await atRate(db, seen, (f) => { raised = f; }, () => new Promise((r) => { waiting = r; }));
      for (const u of unsubs) u();
      await db.close();
      return { first_snapshots_ms: Number(firstMs.toFixed(1)), synced_ms: Number(syncedMs.toFixed(1)), ...result };
    }
    const times = [];
    const start = performance.now();
    for (let w = 1; w <= writes; w++) {
      const id = `d${String(Math.floor(Math.random() * docs)).padStart(6, '0')}`;
      const t = performance.now();
      const done = db.doc(`items/${id}`).update({ v: w });
      while (seen.some((m) => m.get(id) !== w)) await new Promise((r) => { waiting = r; });
      if (relay) await done;
      times.push(performance.now() - t);
    }
    const total = performance.now() - start;
    for (const u of unsubs) u();
    await db.close();
    times.sort((a, b) => a - b);
    const q = (p) => Number(times[Math.min(times.length - 1, Math.floor(p * times.length))].toFixed(2));
    return { first_snapshots_ms: Number(firstMs.toFixed(1)), synced_ms: Number(syncedMs.toFixed(1)), update_ms: { p50: q(0.5), p90: q(0.9), max: q(1) },
      updates_per_s: Number((writes / (total / 1000)).toFixed(1)) };
    /** Updates at `rate` per second, not awaited one by one; each timed until every
     *  listener holds it (or a later value of its document). */
    async function atRate(db, seen, onRaised, nextSnapshot) {
      const made = [];
      const acks = [];
      // Updates not yet held by every listener, checked after each snapshot.
      const open = new Set();
      onRaised(() => {
        const now = performance.now();
        for (const m of open) {
          if (seen.every((s) => s.get(m.id) >= 1e6 + m.w)) {
            m.done = now;
            open.delete(m);
          }
        }
      });
      const start = performance.now();
      for (let w = 1; w <= writes; w++) {
        const due = start + (w - 1) * (1000 / rate);
        while (performance.now() < due) await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
        const id = `d${String(Math.floor(Math.random() * docs)).padStart(6, '0')}`;
        const m = { id, w, at: performance.now(), done: null };
        made.push(m);
        open.add(m);
        acks.push(db.doc(`items/${id}`).update({ v: 1e6 + w }));
      }
      const issued = performance.now() - start;
      const deadline = performance.now() + 60000;
      while (open.size > 0) {
        if (performance.now() > deadline) throw new Error(`${open.size} updates not seen after 60 s`);
        await nextSnapshot();
      }
      await Promise.all(acks);
      const lags = made.map((m) => m.done - m.at).sort((a, b) => a - b);
      const q = (p) => Number(lags[Math.min(lags.length - 1, Math.floor(p * lags.length))].toFixed(1));
      return { rate_asked: rate, rate_issued: Number((writes / (issued / 1000)).toFixed(1)),
        lag_ms: { p50: q(0.5), p99: q(0.99), max: q(1) }, last_lag_ms: Number((made.at(-1).done - made.at(-1).at).toFixed(1)) };
    }
  }, { docs, listeners, writes, relay: relay?.url, rate });
  console.log(JSON.stringify({ measurement: 'listeners_at_scale', docs, listeners, writes, relay: withRelay, ...result }));
} finally {
  await browser.stop();
  await server.stop();
  await relay?.stop();
}

/** The --distinct measurement (see the top of this file). */
async function distinctListeners() {
  const other = await startBrowser();
  try {
    const writer = await other.page(`${server.origin}/pkg-tests/e2e/page.html`);
    await writer.evaluate(async ({ docs, relay }) => {
      const db = window.db = await window.hearth.Hearth.open({ name: 'bench-distinct', relay });
      for (let i = 0; i < docs; i += 500) {
        const b = db.batch();
        for (let k = i; k < Math.min(docs, i + 500); k++) b.set(db.doc(`items/d${k}`), { n: k });
        await b.commit();
      }
    }, { docs, relay: relay.url });
    const page = await browser.page(`${server.origin}/pkg-tests/e2e/page.html`);
    const first = await page.evaluate(async ({ listeners, relay }) => {
      const db = await window.hearth.Hearth.open({ name: 'bench-distinct', relay });
      window.top1 = Array.from({ length: listeners }, () => null);
      window.fromServer = 0;
      const t0 = performance.now();
      for (let l = 0; l < listeners; l++) {
        let server = false;
        db.collection('items').where('n', '>=', l).orderBy('n', 'desc').limit(1).onSnapshot((s) => {
          if (!server && !s.metadata.fromCache) { server = true; window.fromServer++; }
          const d = s.docs[0];
          if (d && d.data().n >= 1e9) window.top1[l] = { n: d.data().n, at: Date.now() };
        });
      }
      while (window.fromServer < listeners) await new Promise((r) => setTimeout(r, 5));
      return performance.now() - t0;
    }, { listeners, relay: relay.url });
    const latencies = [];
    for (let w = 1; w <= writes; w++) {
      const at = await writer.evaluate(async (n) => {
        const at = Date.now();
        await window.db.doc('items/top').set({ n });
        return at;
      }, 1e9 + w);
      const seen = await page.waitForFunction((n) => {
        if (window.top1.some((x) => x?.n !== n)) return null;
        return Math.max(...window.top1.map((x) => x.at));
      }, 1e9 + w, { timeout: 60000, polling: 5 });
      latencies.push((await seen.jsonValue()) - at);
    }
    latencies.sort((a, b) => a - b);
    console.log(JSON.stringify({ measurement: 'distinct_listeners', docs, listeners, writes,
      first_snapshots_from_relay_ms: Number(first.toFixed(1)),
      remote_write_to_all_ms: { p50: latencies[Math.floor(latencies.length / 2)], max: latencies.at(-1), all: latencies } }));
  } finally {
    await other.stop();
    await browser.stop();
    await server.stop();
    await relay?.stop();
  }
}
