// Browser benchmark of Hearth (local only, no relay) against hand-written raw IndexedDB,
// on seed 000's instrument documents. Runnable by hand (www/bench/index.html) and headless
// (`node scripts/bench-browser.mjs`, which calls window.bench.* through page.evaluate).
//
// `init()` is deliberately NOT called at import time: the cold-start measurement times it.
import init, { Hearth, Timestamp } from '/pkg/hearth.js';

export const DEFAULTS = {
  docs: 10000, // instrument documents
  batch: 500, // documents per batch / transaction
  queryRuns: 50, // limit-5 query runs
  bigQueryRuns: 50, // limit-500 query runs (fewer if over bigQueryBudgetMs)
  bigQueryBudgetMs: 60000, // wall budget for the Hearth + raw limit-500 runs together
  pointRuns: 200, // point reads
  reopenRuns: 10, // first limit-500 queries after reopening the database
  listenRuns: 30, // write -> 10 callbacks
  listeners: 10,
  warmup: 3, // untimed runs before each timed series
  name: 'bench', // Hearth database name (IndexedDB "hearth:bench")
  rawName: 'bench-raw', // the baseline's IndexedDB database
  seed: 1,
};

/** Seed 000's indexes as the brief asks: the (instrumentType asc, timestamp desc) composite
 *  and the exemptions of `timestamp` and `shard` from single-field indexing. */
export const INDEXES = {
  indexes: [
    { collectionGroup: 'instruments', queryScope: 'COLLECTION',
      fields: [{ fieldPath: 'instrumentType', order: 'ASCENDING' },
        { fieldPath: 'timestamp', order: 'DESCENDING' }] },
  ],
  fieldOverrides: [
    { collectionGroup: 'instruments', fieldPath: 'timestamp', indexes: [] },
    { collectionGroup: 'instruments', fieldPath: 'shard', indexes: [] },
  ],
};

const COLLECTION = 'instruments';
const TYPES = ['commonstock', 'etf', 'currency', 'bond', 'option'];
const CURRENCIES = ['USD', 'JPY', 'EUR', 'GBP', 'CHF'];
const SHARDS = ['x', 'y', 'z'];
const ID_CHARS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const BASE_MS = Date.parse('2019-01-01T00:00:00.000Z');
const SPAN_MS = 30 * 24 * 3600 * 1000;
const LIVE_ID = 'zzLiveBenchDocument0'; // the document the listener benchmark rewrites

let log = (...a) => console.log('[bench]', ...a);
export function setLogger(f) { log = f; }

// ---------------------------------------------------------------------------------------
// Data

/** mulberry32: a small deterministic PRNG, so every run loads the same documents. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `n` instruments shaped as in seed 000 (plus `shard`), with unique ids and timestamps
 *  (unique timestamps keep the expected order free of ties). Timestamps are plain ms here. */
export function generate(n, seed = DEFAULTS.seed) {
  const r = rng(seed);
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const ids = new Set();
  const stamps = new Set();
  const out = [];
  while (out.length < n) {
    let id = '';
    for (let i = 0; i < 20; i++) id += ID_CHARS[Math.floor(r() * ID_CHARS.length)];
    const ts = BASE_MS + Math.floor(r() * SPAN_MS);
    if (ids.has(id) || stamps.has(ts) || id === LIVE_ID) continue;
    ids.add(id);
    stamps.add(ts);
    let symbol = '';
    const len = 3 + Math.floor(r() * 2);
    for (let i = 0; i < len; i++) symbol += ID_CHARS[Math.floor(r() * 26)];
    out.push({
      id,
      symbol,
      price: { currency: pick(CURRENCIES), micros: Math.floor(r() * 1e11) },
      exchange: `EXCHG${Math.floor(r() * 10)}`,
      instrumentType: pick(TYPES),
      timestampMs: ts,
      shard: pick(SHARDS),
    });
  }
  return out;
}

/** The brute-force answer: type filter, timestamp desc (ties: id desc, as Firestore). */
function expectedIds(docs, type, limit) {
  return docs.filter((d) => d.instrumentType === type)
    .sort((a, b) => (b.timestampMs - a.timestampMs) || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0))
    .slice(0, limit).map((d) => d.id);
}

const hearthData = (d) => ({
  symbol: d.symbol, price: { currency: d.price.currency, micros: d.price.micros },
  exchange: d.exchange, instrumentType: d.instrumentType,
  timestamp: Timestamp.fromMillis(d.timestampMs), shard: d.shard,
});
const rawData = (d) => ({
  symbol: d.symbol, price: { currency: d.price.currency, micros: d.price.micros },
  exchange: d.exchange, instrumentType: d.instrumentType, timestamp: d.timestampMs, shard: d.shard,
});

// ---------------------------------------------------------------------------------------
// Statistics

function round(x, digits = 3) { const f = 10 ** digits; return Math.round(x * f) / f; }

export function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  if (!n) return { n: 0 };
  const q = (p) => s[Math.min(n - 1, Math.max(0, Math.round(p * (n - 1))))];
  const median = n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  const mean = s.reduce((a, b) => a + b, 0) / n;
  return { n, median: round(median), mean: round(mean), p10: round(q(0.1)), p90: round(q(0.9)),
    min: round(s[0]), max: round(s[n - 1]) };
}

// ---------------------------------------------------------------------------------------
// Hearth

let hearthReady = null;
function ensureInit() { hearthReady ??= init(); return hearthReady; }

const hearthTop = (db, type, limit) => db.collection(COLLECTION)
  .where('instrumentType', '==', type).orderBy('timestamp', 'desc').limit(limit);

/** Runs the query from the cache and converts every result with data(), as an app would. */
async function hearthQuery(db, limit, timing) {
  const t0 = performance.now();
  const snap = await hearthTop(db, 'commonstock', limit).get({ source: 'cache' });
  const t1 = performance.now();
  const docs = snap.docs;
  const out = new Array(docs.length);
  for (let i = 0; i < docs.length; i++) out[i] = { id: docs[i].id, data: docs[i].data() };
  if (timing) { timing.get = t1 - t0; timing.total = performance.now() - t0; }
  return out;
}

// ---------------------------------------------------------------------------------------
// Raw IndexedDB baseline

function request(r) {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function txDone(tx) {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error || new Error('transaction aborted'));
  });
}

function deleteRaw(name) {
  return new Promise((resolve, reject) => {
    const r = indexedDB.deleteDatabase(name);
    const timer = setTimeout(() => reject(new Error(`deleting ${name} is blocked`)), 10000);
    r.onsuccess = () => { clearTimeout(timer); resolve(); };
    r.onerror = () => { clearTimeout(timer); reject(r.error); };
  });
}

/** Opens the baseline database: one object store of documents (out-of-line id keys) with an
 *  IndexedDB index on the compound key path [instrumentType, timestamp]. */
function openRaw(name) {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open(name, 1);
    r.onupgradeneeded = () => {
      const store = r.result.createObjectStore(COLLECTION);
      store.createIndex('type_ts', ['instrumentType', 'timestamp']);
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.onblocked = () => reject(new Error(`opening ${name} is blocked`));
  });
}

/** The baseline query: a 'prev' cursor over the compound index (timestamp desc; equal keys
 *  by primary key desc, as Firestore breaks ties by name in the last order's direction). */
function rawQuery(db, limit, type = 'commonstock') {
  return new Promise((resolve, reject) => {
    const tx = db.transaction(COLLECTION, 'readonly');
    const range = IDBKeyRange.bound([type, -Infinity], [type, Infinity]);
    const r = tx.objectStore(COLLECTION).index('type_ts').openCursor(range, 'prev');
    const out = [];
    r.onsuccess = () => {
      const c = r.result;
      if (!c) { resolve(out); return; }
      out.push({ id: c.primaryKey, data: c.value });
      if (out.length >= limit) resolve(out);
      else c.continue();
    };
    r.onerror = () => reject(r.error);
  });
}

async function rawQueryTimed(db, limit, timing) {
  const t0 = performance.now();
  const out = await rawQuery(db, limit);
  timing.total = timing.get = performance.now() - t0;
  return out;
}

function rawGet(db, id) {
  return request(db.transaction(COLLECTION, 'readonly').objectStore(COLLECTION).get(id));
}

/** A put in its own readwrite transaction with strict durability (Hearth's setting). */
function rawPut(db, value, id) {
  const tx = db.transaction(COLLECTION, 'readwrite', { durability: 'strict' });
  tx.objectStore(COLLECTION).put(value, id);
  return txDone(tx);
}

// ---------------------------------------------------------------------------------------
// Dexie, the peer: the baseline's documents with their ids inbound (as a Dexie app stores
// them) and one compound index, at Dexie's default durability.

const DEXIE = '/node_modules/dexie/dist/dexie.mjs';

/** Opens a fresh Dexie database, or returns null (and says so) when Dexie cannot be loaded
 *  (the page served without `node_modules`). */
async function openDexie(name, fresh = true) {
  let Dexie;
  try {
    ({ default: Dexie } = await import(DEXIE));
  } catch (e) {
    log(`Dexie not loaded (${e}): its figures are left out`);
    return null;
  }
  if (fresh) await Dexie.delete(name);
  const db = new Dexie(name);
  db.version(1).stores({ [COLLECTION]: 'id,[instrumentType+timestamp]' });
  await db.open();
  return db;
}

const dexieData = (d) => ({ id: d.id, ...rawData(d) });

/** The seed's query with Dexie: the compound index in reverse, values with their ids. */
async function dexieQuery(db, limit, type = 'commonstock') {
  const rows = await db.table(COLLECTION).where('[instrumentType+timestamp]')
    .between([type, -Infinity], [type, Infinity]).reverse().limit(limit).toArray();
  return rows.map((x) => ({ id: x.id, data: x }));
}

// ---------------------------------------------------------------------------------------
// The benchmark

let state = null; // { db, raw } of the main run, for close()

const sameIds = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

function check(cond, what) {
  if (!cond) throw new Error(`correctness check failed: ${what}`);
  log(`check ok: ${what}`);
}

function measurement(name, unit, hearth, raw, extra = {}) {
  // ratio: Hearth's cost over the baseline's (>1 means Hearth is slower); for a rate that is
  // the baseline's rate over Hearth's.
  const ratio = unit.endsWith('/s') ? raw.value / hearth.value : hearth.value / raw.value;
  return { measurement: name, unit, hearth: hearth.value, idb: raw.value, ratio: round(ratio, 2),
    ...extra, hearth_detail: hearth.detail, idb_detail: raw.detail };
}

/** Alternates Hearth and baseline runs (and Dexie's, when given) so that load spikes hit
 *  all of them. */
async function alternate(runs, warmup, hearthRun, rawRun, budgetMs = Infinity, dexieRun = null) {
  for (let i = 0; i < warmup; i++) { await hearthRun(i); await rawRun(i); await dexieRun?.(i); }
  const h = [];
  const r = [];
  const d = [];
  const start = performance.now();
  let truncated = false;
  for (let i = 0; i < runs; i++) {
    h.push(await hearthRun(i));
    r.push(await rawRun(i));
    if (dexieRun) d.push(await dexieRun(i));
    if (performance.now() - start > budgetMs && i + 1 < runs) { truncated = true; break; }
  }
  return { h, r, d, truncated };
}

/** Adds Dexie's figure (a peer, in the same page) to a measurement line: `dexie_ratio` is
 *  Hearth's cost over Dexie's, as `ratio` is over the raw baseline's. */
function withDexie(m, samples, rate = null) {
  if (rate === null && !samples.length) return m;
  const value = rate ?? stats(samples).median;
  const ratio = m.unit.endsWith('/s') ? value / m.hearth : m.hearth / value;
  return { ...m, dexie: value, dexie_ratio: round(ratio, 2),
    dexie_detail: rate === null ? { ms: stats(samples) } : undefined };
}

/** Runs measurements 1–5 and 7 for Hearth and the baseline; leaves both databases filled for the
 *  cold-start measurement (6), which needs fresh pages (see coldHearth / coldRaw). */
export async function run(options = {}) {
  const o = { ...DEFAULTS, ...options };
  const results = [];
  const meta = { userAgent: navigator.userAgent, crossOriginIsolated: self.crossOriginIsolated,
    hardwareConcurrency: navigator.hardwareConcurrency, options: o };
  log('meta', JSON.stringify(meta));

  const ti = performance.now();
  await ensureInit();
  meta.initMs = round(performance.now() - ti);

  // Fresh databases (a person may run the page twice).
  await Hearth.clearPersistence(o.name);
  await deleteRaw(o.rawName);
  const db = await Hearth.open({ name: o.name, indexes: INDEXES });
  const raw = await openRaw(o.rawName);
  const dexie = await openDexie(`${o.rawName}-dexie`);
  state = { db, raw, dexie };

  const docs = generate(o.docs, o.seed);
  const hearthDocs = docs.map(hearthData);
  const rawDocs = docs.map(rawData);
  const col = db.collection(COLLECTION);

  // 1. Bulk insert in batches of 500.
  log(`bulk insert of ${o.docs} documents in batches of ${o.batch}: Hearth`);
  const hBatches = [];
  let t0 = performance.now();
  for (let i = 0; i < docs.length; i += o.batch) {
    const tb = performance.now();
    const batch = db.batch();
    for (let j = i; j < Math.min(i + o.batch, docs.length); j++) batch.set(col.doc(docs[j].id), hearthDocs[j]);
    await batch.commit();
    hBatches.push(performance.now() - tb);
  }
  const hInsertMs = performance.now() - t0;
  log(`  Hearth: ${round(hInsertMs, 1)} ms; raw IndexedDB…`);
  const rBatches = [];
  t0 = performance.now();
  for (let i = 0; i < docs.length; i += o.batch) {
    const tb = performance.now();
    const tx = raw.transaction(COLLECTION, 'readwrite', { durability: 'strict' });
    const store = tx.objectStore(COLLECTION);
    for (let j = i; j < Math.min(i + o.batch, docs.length); j++) store.put(rawDocs[j], docs[j].id);
    await txDone(tx);
    rBatches.push(performance.now() - tb);
  }
  const rInsertMs = performance.now() - t0;
  log(`  raw: ${round(rInsertMs, 1)} ms`);
  let dexieRate = null;
  if (dexie) {
    const dexieDocs = docs.map(dexieData);
    t0 = performance.now();
    for (let i = 0; i < docs.length; i += o.batch) await dexie.table(COLLECTION).bulkPut(dexieDocs.slice(i, i + o.batch));
    const ms = performance.now() - t0;
    log(`  Dexie: ${round(ms, 1)} ms`);
    dexieRate = Math.round(docs.length / (ms / 1000));
  }
  results.push(withDexie(measurement(`bulk_insert_${o.docs}_batches_of_${o.batch}`, 'docs/s',
    { value: Math.round(docs.length / (hInsertMs / 1000)),
      detail: { total_ms: round(hInsertMs, 1), batch_ms: stats(hBatches) } },
    { value: Math.round(docs.length / (rInsertMs / 1000)),
      detail: { total_ms: round(rInsertMs, 1), batch_ms: stats(rBatches) } }), [], dexieRate));

  // Correctness before timing the reads.
  const want5 = expectedIds(docs, 'commonstock', 5);
  const want500 = expectedIds(docs, 'commonstock', 500);
  const h5 = await hearthQuery(db, 5);
  const r5 = await rawQuery(raw, 5);
  const symbols = (xs) => xs.map((x) => x.data.symbol);
  check(sameIds(h5.map((x) => x.id), r5.map((x) => x.id))
    && sameIds(symbols(h5), symbols(r5)),
  `Hearth limit-5 equals the baseline's: ${JSON.stringify(symbols(h5))}`);
  check(sameIds(h5.map((x) => x.id), want5), 'limit-5 equals the brute-force answer');
  check(h5.every((x, i) => x.data.timestamp.toMillis() === r5[i].data.timestamp),
    'limit-5 timestamps agree');
  const h500 = await hearthQuery(db, 500);
  const r500 = await rawQuery(raw, 500);
  check(sameIds(h500.map((x) => x.id), want500) && sameIds(r500.map((x) => x.id), want500),
    'limit-500 (Hearth and baseline) equals the brute-force answer');
  if (dexie) {
    check(sameIds((await dexieQuery(dexie, 500)).map((x) => x.id), want500), 'Dexie\'s limit-500 equals the brute-force answer');
  }
  const probe = docs[docs.length >> 1];
  const hp = await col.doc(probe.id).get({ source: 'cache' });
  const rp = await rawGet(raw, probe.id);
  check(hp.exists && hp.data().symbol === probe.symbol && rp.symbol === probe.symbol,
    'point read returns the document');
  const count = (await col.count().get()).data().count;
  check(count === o.docs, `Hearth holds ${count} documents`);
  meta.top5 = symbols(h5);

  // 2. and 3. The seed's query, limit 5 and limit 500.
  for (const [limit, runs, budget] of [[5, o.queryRuns, Infinity], [500, o.bigQueryRuns, o.bigQueryBudgetMs]]) {
    log(`query limit ${limit}: ${runs} runs each, alternating`);
    const hGet = [];
    const { h, r, d, truncated } = await alternate(runs, o.warmup,
      async () => { const t = {}; await hearthQuery(db, limit, t); hGet.push(t.get); return t.total; },
      async () => { const t = {}; await rawQueryTimed(raw, limit, t); return t.total; }, budget,
      dexie && (async () => { const t = performance.now(); await dexieQuery(dexie, limit); return performance.now() - t; }));
    hGet.splice(0, o.warmup);
    results.push(withDexie(measurement(`query_commonstock_ts_desc_limit_${limit}`, 'ms (median)',
      { value: stats(h).median, detail: { ms: stats(h), get_only_ms: stats(hGet) } },
      { value: stats(r).median, detail: { ms: stats(r) } },
      { runs: h.length, truncated, note: 'Hearth: get({source:"cache"}) + data() of each result; raw: IDBIndex cursor (prev) over [instrumentType, timestamp]; Dexie: where([instrumentType+timestamp]).between().reverse().limit().toArray()' }), d));
  }

  // 4. Point reads: different documents, cycled.
  log(`point reads: ${o.pointRuns} each, alternating`);
  const step = Math.max(1, Math.floor(docs.length / o.pointRuns));
  const pick = (i) => docs[(i * step + 7) % docs.length];
  results.push(await pointReads(col, raw, pick, o.pointRuns, o.warmup, 'point_read',
    'Hearth: doc(id).get({source:"cache"}) + data(); raw: get() in its own readonly transaction; Dexie: table.get(id)', dexie));

  // 5. Ten live listeners: a local write until all ten callbacks have seen it.
  log(`listeners: ${o.listeners} queries, ${o.listenRuns} writes each, alternating`);
  {
    let newest = docs.reduce((m, d) => Math.max(m, d.timestampMs), 0);
    const live = (ms) => ({ symbol: 'LIVE', price: { currency: 'USD', micros: 1 }, exchange: 'EXCHG1',
      instrumentType: 'commonstock', timestamp: ms, shard: 'x' });

    // Hearth: 10 different queries (limit 5..14), all of which the write changes.
    let pending = null;
    const initial = [];
    const unsubs = [];
    for (let k = 0; k < o.listeners; k++) {
      let first;
      initial.push(new Promise((r) => { first = r; }));
      unsubs.push(hearthTop(db, 'commonstock', 5 + k).onSnapshot((snap) => {
        first();
        const p = pending;
        if (!p || p.seen[k]) return;
        const top = snap.docs[0];
        if (top && top.id === LIVE_ID && top.get('timestamp').toMillis() === p.ms) {
          p.seen[k] = true;
          if (--p.left === 0) p.done(performance.now());
        }
      }, (e) => log('listener error', e)));
    }
    await Promise.all(initial);

    // Baseline: the same write, then each "listener" re-runs its query in its own
    // transaction and is "called back" when it sees the write.
    const rawListeners = Array.from({ length: o.listeners }, (_, k) => 5 + k);

    const setResolved = [];
    const { h, r } = await alternate(o.listenRuns, 2,
      async () => {
        newest += 1000;
        const ms = newest;
        const all = new Promise((done) => {
          pending = { ms, seen: new Array(o.listeners).fill(false), left: o.listeners, done };
        });
        const t = performance.now();
        const write = col.doc(LIVE_ID).set({ ...live(0), timestamp: Timestamp.fromMillis(ms) })
          .then(() => performance.now());
        const end = await all;
        setResolved.push((await write) - t);
        pending = null;
        return end - t;
      },
      async () => {
        newest += 1000;
        const ms = newest;
        const t = performance.now();
        await rawPut(raw, live(ms), LIVE_ID);
        await Promise.all(rawListeners.map(async (limit) => {
          const res = await rawQuery(raw, limit);
          if (res[0]?.id !== LIVE_ID || res[0].data.timestamp !== ms) throw new Error('raw listener missed the write');
        }));
        return performance.now() - t;
      });
    setResolved.splice(0, 2);
    for (const u of unsubs) u();
    results.push(measurement(`listeners_${o.listeners}_write_to_all_callbacks`, 'ms (median)',
      { value: stats(h).median, detail: { ms: stats(h), set_resolved_ms: stats(setResolved) } },
      { value: stats(r).median, detail: { ms: stats(r) } },
      { runs: h.length, note: `Hearth: ${o.listeners} onSnapshot queries (commonstock, timestamp desc, limit 5..${4 + o.listeners}), doc.set() until every callback saw it; raw: put (strict durability) then ${o.listeners} cursor queries in parallel` }));
  }

  // The answer the cold-start pages must reproduce (now with the live document on top).
  const final5 = await hearthQuery(db, 5);
  const finalRaw5 = await rawQuery(raw, 5);
  check(sameIds(final5.map((x) => x.id), finalRaw5.map((x) => x.id)), 'after the listener runs, limit-5 still agrees');
  meta.finalTop5Ids = final5.map((x) => x.id);

  // 7. After reopening: the engine remembers documents it wrote or read (its memory of
  // documents), so 3. and 4. above read them from memory. A reopened database remembers
  // nothing: its first limit-500 queries and point reads go to IndexedDB.
  await reopenedReads(o, docs, raw, results);
  log('done');
  return { meta, results };
}

/** Measurement 7: the first limit-500 query after each of a few reopens, then point reads of
 *  documents not read since the last reopen. */
async function reopenedReads(o, docs, raw, results) {
  log(`after reopening: ${o.reopenRuns} first limit-500 queries, ${o.pointRuns} point reads`);
  const reopen = async () => {
    await state.db.close();
    state.db = await Hearth.open({ name: o.name, indexes: INDEXES });
    return state.db;
  };
  {
    const h = [];
    const r = [];
    for (let i = 0; i < o.reopenRuns; i++) {
      const db = await reopen();
      const t = {};
      await hearthQuery(db, 500, t);
      h.push(t.total);
      const u = {};
      await rawQueryTimed(raw, 500, u);
      r.push(u.total);
    }
    results.push(measurement('query_commonstock_ts_desc_limit_500_first_after_reopen', 'ms (median)',
      { value: stats(h).median, detail: { ms: stats(h) } },
      { value: stats(r).median, detail: { ms: stats(r) } },
      { runs: h.length, note: 'Hearth: the first get({source:"cache"}) + data() after Hearth.open of the database; raw: the cursor query as in 3.' }));
  }
  const db = await reopen();
  const col = db.collection(COLLECTION);
  const step = Math.max(1, Math.floor(docs.length / o.pointRuns));
  // Other documents than 4. read, and each read once.
  const pick = (i) => docs[(i * step + 23) % docs.length];
  results.push(await pointReads(col, raw, pick, o.pointRuns, 0, 'point_read_after_reopen',
    'Hearth: doc(id).get({source:"cache"}) + data() of documents not read since Hearth.open; raw: get() in its own readonly transaction'));
}

/** `runs` point reads of `pick(i)`, Hearth and the baseline alternating, each checked. */
async function pointReads(col, raw, pick, runs, warmup, name, note, dexie = null) {
  const timed = (what, read) => async (i) => {
    const t = performance.now();
    const doc = await read(pick(i).id);
    const ms = performance.now() - t;
    if (!doc || doc.symbol !== pick(i).symbol) throw new Error(`${name}: ${what}: wrong document`);
    return ms;
  };
  const { h, r, d } = await alternate(runs, warmup,
    timed('Hearth', async (id) => (await col.doc(id).get({ source: 'cache' })).data()),
    timed('raw', (id) => rawGet(raw, id)), Infinity,
    dexie && timed('Dexie', (id) => dexie.table(COLLECTION).get(id)));
  return withDexie(measurement(name, 'ms (median)',
    { value: stats(h).median, detail: { ms: stats(h) } },
    { value: stats(r).median, detail: { ms: stats(r) } },
    { runs: h.length, note }), d);
}

/** Closes the main run's databases (before the cold-start pages open them). */
export async function close() {
  if (!state) return;
  await state.db.close();
  state.raw.close();
  state.dexie?.close();
  state = null;
}

/** 6. Cold start, Hearth: init() + Hearth.open + the first limit-5 query, in a fresh page. */
export async function coldHearth(options = {}) {
  const o = { ...DEFAULTS, ...options };
  const t0 = performance.now();
  await ensureInit();
  const t1 = performance.now();
  const db = await Hearth.open({ name: o.name, indexes: INDEXES });
  const t2 = performance.now();
  const top = await hearthQuery(db, 5);
  const t3 = performance.now();
  await db.close();
  return { total: t3 - t0, init: t1 - t0, open: t2 - t1, query: t3 - t2, ids: top.map((x) => x.id) };
}

/** 6. Cold start, baseline: indexedDB.open + the first limit-5 query, in a fresh page. */
export async function coldRaw(options = {}) {
  const o = { ...DEFAULTS, ...options };
  const t0 = performance.now();
  const raw = await openRaw(o.rawName);
  const t1 = performance.now();
  const top = await rawQuery(raw, 5);
  const t2 = performance.now();
  raw.close();
  return { total: t2 - t0, open: t1 - t0, query: t2 - t1, ids: top.map((x) => x.id) };
}

/** Combines cold-start samples into a measurement line. */
export function coldMeasurement(hs, rs, name = 'cold_start_init_open_first_query') {
  const pick = (xs, k) => xs.map((x) => x[k]);
  const visit = name === 'cold_start_returning_page'
    ? 'a returning page: the package from the HTTP cache (the server answers 304)'
    : 'a first visit: nothing from the HTTP cache, the package downloaded';
  return measurement(name, 'ms (median)',
    { value: stats(pick(hs, 'total')).median, detail: { ms: stats(pick(hs, 'total')), first_ms: round(hs[0].total),
      init_ms: stats(pick(hs, 'init')), open_ms: stats(pick(hs, 'open')), query_ms: stats(pick(hs, 'query')) } },
    { value: stats(pick(rs, 'total')).median, detail: { ms: stats(pick(rs, 'total')), first_ms: round(rs[0].total),
      open_ms: stats(pick(rs, 'open')), query_ms: stats(pick(rs, 'query')) } },
    { runs: hs.length, note: `a new page per sample in the same browser profile; Hearth, ${visit}: init() (fetch + compile the wasm) + Hearth.open + limit-5 query; raw: indexedDB.open + limit-5 cursor query` });
}

// ---------------------------------------------------------------------------------------
// The page (for a person): buttons, a results table, a log.

function fmt(x) {
  if (typeof x !== 'number') return String(x);
  return x >= 100 ? x.toLocaleString('en-US', { maximumFractionDigits: 0 }) : x.toFixed(x >= 10 ? 1 : 3);
}

function show(results) {
  const tbody = document.querySelector('#results tbody');
  if (!tbody) return;
  for (const m of results) {
    const tr = document.createElement('tr');
    for (const v of [m.measurement, m.unit, fmt(m.hearth), fmt(m.idb), `${m.ratio}×`,
      m.dexie === undefined ? '—' : `${fmt(m.dexie)} (${m.dexie_ratio}×)`, m.runs ?? '']) {
      const td = document.createElement('td');
      td.textContent = v;
      tr.append(td);
    }
    tbody.append(tr);
  }
}

function wirePage() {
  const out = document.querySelector('#log');
  if (!out) return;
  setLogger((...a) => {
    console.log('[bench]', ...a);
    out.textContent += `${a.join(' ')}\n`;
  });
  const params = new URLSearchParams(location.search);
  const opts = {};
  if (params.has('docs')) opts.docs = Number(params.get('docs'));
  const buttons = document.querySelectorAll('button');
  const busy = (b) => buttons.forEach((x) => { x.disabled = b; });
  document.querySelector('#run').addEventListener('click', async () => {
    busy(true);
    try {
      const { meta, results } = await run(opts);
      window.benchResults = { meta, results };
      show(results);
      log('Measurement 6 (cold start) needs a fresh page: press "Cold start" (it reloads).');
      await close();
    } catch (e) {
      log(`FAILED: ${e && e.stack || e}`);
    } finally { busy(false); }
  });
  document.querySelector('#cold').addEventListener('click', () => {
    params.set('cold', '1');
    location.search = params.toString();
  });
  if (params.get('cold') === '1') {
    // A person's cold start: this page load has not run init() yet.
    (async () => {
      busy(true);
      try {
        const h = await coldHearth(opts);
        const r = await coldRaw(opts);
        // Whether the package came from the HTTP cache (a 304 transfers only headers).
        const wasm = performance.getEntriesByType('resource').find((e) => e.name.endsWith('.wasm'));
        const cached = wasm && wasm.transferSize < wasm.encodedBodySize;
        const m = coldMeasurement([h], [r], cached ? 'cold_start_returning_page' : undefined);
        if (!sameIds(h.ids, r.ids)) log('WARNING: cold-start results differ between Hearth and the baseline');
        log(JSON.stringify(m));
        show([m]);
      } catch (e) {
        log(`FAILED (run the benchmark first, so the data exists): ${e && e.stack || e}`);
      } finally { busy(false); }
    })();
  }
}

// ---------------------------------------------------------------------------------------
// Storage: the same documents stored by Hearth, the raw baseline and Dexie, one fresh
// browser profile each (`node scripts/bench-storage.mjs` measures the profile's IndexedDB
// directory once the browser is closed).


/** Stores the bench's documents in one store (`kind`: hearth, raw or dexie) in batches, closes
 *  it and returns what it took with the origin's `navigator.storage.estimate()`. */
export async function storageFill(kind, options = {}) {
  const o = { ...DEFAULTS, ...options };
  const docs = generate(o.docs, o.seed);
  const t0 = performance.now();
  const batches = async (put) => {
    for (let i = 0; i < docs.length; i += o.batch) await put(docs.slice(i, i + o.batch));
  };
  if (kind === 'hearth') {
    await ensureInit();
    const db = await Hearth.open({ name: o.name, indexes: INDEXES });
    const col = db.collection(COLLECTION);
    await batches(async (part) => {
      const batch = db.batch();
      for (const d of part) batch.set(col.doc(d.id), hearthData(d));
      await batch.commit();
    });
    check((await col.count().get()).data().count === docs.length, 'Hearth holds every document');
    await db.close();
  } else if (kind === 'raw') {
    const raw = await openRaw(o.rawName);
    await batches(async (part) => {
      const tx = raw.transaction(COLLECTION, 'readwrite', { durability: 'strict' });
      for (const d of part) tx.objectStore(COLLECTION).put(rawData(d), d.id);
      await txDone(tx);
    });
    raw.close();
  } else if (kind === 'dexie') {
    const db = await openDexie(`${o.rawName}-dexie`);
    if (!db) throw new Error('Dexie is not available');
    await batches((part) => db.table(COLLECTION).bulkPut(part.map(dexieData)));
    check(await db.table(COLLECTION).count() === docs.length, 'Dexie holds every document');
    db.close();
  } else {
    throw new Error(`unknown store ${kind}`);
  }
  const ms = performance.now() - t0;
  const estimate = await navigator.storage.estimate();
  return { kind, docs: docs.length, ms: round(ms, 1), docsPerSec: Math.round(docs.length / (ms / 1000)),
    estimate: { usage: estimate.usage, indexedDB: estimate.usageDetails?.indexedDB } };
}

window.bench = { run, close, storageFill, coldHearth, coldRaw, coldMeasurement, generate, hearthData, stats, DEFAULTS, INDEXES };
wirePage();
window.benchReady = true;
