// Hearth's instruments dashboard demo (seed 000): a writer inserts 1,000–1,500 instrument
// updates a second in batched writes with sharded timestamps, and three live "latest 5"
// views (by exchange, instrument type and currency) are each one query. The page shows the
// acknowledged write rate, the rate of updates the views see, and end-to-end latency.
import { openFirestore, collection, doc, query, where, orderBy, limit, onSnapshot, writeBatch,
  Timestamp } from '/pkg/firestore.js';
import { connectionBadge, errorBar } from '../demo-ui.js';

const $ = (id) => document.getElementById(id);
const relay = new URLSearchParams(location.search).get('relay')
  ?? `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}`;
const SHARDS = ['x', 'y', 'z'];
const WINDOW_MS = 5000;
const MAX_WAITING_BATCHES = 2;
// The instruments the writer moves: [symbol, type, exchange, currency, price in micros].
const UNIVERSE = [
  ['AAA', 'commonstock', 'EXCHG1', 'USD', 34790000], ['BBB', 'commonstock', 'EXCHG2', 'JPY', 64272000000],
  ['CCC', 'commonstock', 'EXCHG3', 'EUR', 12500000], ['DDD', 'commonstock', 'EXCHG1', 'USD', 120400000],
  ['EEE', 'commonstock', 'EXCHG2', 'JPY', 2300000000], ['FFF', 'commonstock', 'EXCHG3', 'USD', 57100000],
  ['Index1 ETF', 'etf', 'EXCHG1', 'USD', 473000000], ['Index2 ETF', 'etf', 'EXCHG2', 'JPY', 1800000000],
  ['Index3 ETF', 'etf', 'EXCHG3', 'EUR', 95300000], ['Bond1', 'bond', 'EXCHG1', 'USD', 99500000],
  ['Bond2', 'bond', 'EXCHG2', 'JPY', 10010000000], ['Bond3', 'bond', 'EXCHG3', 'EUR', 101200000],
];
const CHOICES = { exchange: ['EXCHG1', 'EXCHG2', 'EXCHG3'], instrumentType: ['commonstock', 'etf', 'bond'],
  'price.currency': ['USD', 'JPY', 'EUR'] };
const me = Math.random().toString(36).slice(2, 8);

const showError = errorBar({ 'permission-denied': 'The rules refused this.' }, { uncaught: true });
const showStatus = connectionBadge();

// Figures over the last WINDOW_MS: [time, value] samples, pruned as they age.
const acks = []; // [time, updates acknowledged]
const ackLatency = []; // [time, ms from an update's timestamp to its batch's acknowledgement]
const latency = []; // [time, ms from an update's timestamp to a view here showing it]
const writers = new Map(); // writer id -> { first, last } sequence numbers seen in the views
const seenTotals = []; // [time, updates seen in the views since the page opened]
const viewsPending = new Set(); // the views whose latest snapshot has local writes not yet acknowledged
const prune = (samples, now) => { while (samples.length && samples[0][0] < now - WINDOW_MS) samples.shift(); };
function quantile(samples, q) {
  const v = samples.map((s) => s[1]).sort((a, b) => a - b);
  return v.length ? Math.round(v[Math.min(v.length - 1, Math.floor(q * v.length))]) : null;
}
const perSecond = (n, ms) => (ms > 0 ? Math.round((n * 1000) / ms).toLocaleString('en') : '0');

function showFigures() {
  const now = performance.now();
  [acks, ackLatency, latency, seenTotals].forEach((s) => prune(s, now));
  let total = 0;
  for (const w of writers.values()) total += w.last - w.first;
  seenTotals.push([now, total]);
  const ackedRecent = acks.reduce((n, [, k]) => n + k, 0);
  $('acked').textContent = writing || acks.length ? perSecond(ackedRecent, Math.min(WINDOW_MS, now - startedAt)) : '–';
  $('seen').textContent = perSecond(total - seenTotals[0][1], now - seenTotals[0][0]);
  $('p50').textContent = quantile(latency, 0.5) ?? '–';
  $('p99').textContent = quantile(latency, 0.99) ?? '–';
  const ackP50 = quantile(ackLatency, 0.5);
  $('writer-state').textContent = writing
    ? `Writing as ${me}, up to ${Number($('rate').value).toLocaleString('en')}/s: ${created.toLocaleString('en')} updates, `
      + `${acked.toLocaleString('en')} acknowledged`
      + `${ackP50 === null ? '' : ` (median ${ackP50} ms after their timestamp)`}.`
    : created ? `Stopped after ${created.toLocaleString('en')} updates, ${acked.toLocaleString('en')} acknowledged.`
      : 'The writer is stopped: this page only watches.';
  const unacked = created - acked;
  $('pending').hidden = unacked === 0 && !viewsPending.size;
  $('pending').textContent = unacked ? `${unacked.toLocaleString('en')} not yet saved` : 'Saving…';
}

// The writer: every tick, one batch of the updates due at the chosen rate, each with a
// random shard and a timestamp unique to the microsecond. At most two batches wait for the
// relay's acknowledgement: a writer the relay cannot keep up with slows down.
let db, writing = false, startedAt = 0, lastTick = 0, owed = 0, created = 0, acked = 0, waiting = 0, lastMicros = 0, timer;
const prices = UNIVERSE.map((u) => u[4]);
function nextUpdate() {
  const i = Math.floor(Math.random() * UNIVERSE.length);
  const [symbol, instrumentType, exchange, currency] = UNIVERSE[i];
  prices[i] = Math.max(1, Math.round(prices[i] * (1 + (Math.random() - 0.5) / 500)));
  lastMicros = Math.max(Date.now() * 1000, lastMicros + 1);
  const timestamp = new Timestamp(Math.floor(lastMicros / 1e6), (lastMicros % 1e6) * 1000);
  return { shard: SHARDS[Math.floor(Math.random() * SHARDS.length)], symbol, price: { currency, micros: prices[i] },
    exchange, instrumentType, timestamp, writer: me, seq: ++created };
}
function tick() {
  const now = performance.now();
  const rate = Number($('rate').value);
  // What is owed past 200 ms (the relay behind, the tab in the background) is dropped.
  owed = Math.min(owed + ((now - lastTick) * rate) / 1000, rate / 5);
  lastTick = now;
  const n = Math.floor(owed);
  if (n <= 0 || waiting >= MAX_WAITING_BATCHES) return;
  waiting++;
  owed -= n;
  const batch = writeBatch(db);
  const firstMillis = Date.now();
  for (let i = 0; i < n; i++) batch.set(doc(collection(db, 'instruments')), nextUpdate());
  batch.commit().then(() => {
    const now = performance.now();
    acked += n;
    acks.push([now, n]);
    ackLatency.push([now, Date.now() - firstMillis]);
  }, (e) => { stopWriting(); showError(e); }).finally(() => { waiting--; });
}
function startWriting() {
  writing = true;
  startedAt = lastTick = performance.now();
  owed = 0;
  timer = setInterval(tick, 100);
  $('writer').textContent = 'Stop writing';
}
function stopWriting() {
  writing = false;
  clearInterval(timer);
  $('writer').textContent = 'Start writing';
}
$('writer').onclick = () => (writing ? stopWriting() : startWriting());

// A view: one live query, listened to again when its select changes.
const clock = (ts) => `${ts.toDate().toTimeString().slice(0, 8)}.${String(Math.floor(ts.nanoseconds / 1000)).padStart(6, '0')}`;
const money = (p) => new Intl.NumberFormat('en', { style: 'currency', currency: p.currency }).format(p.micros / 1e6);
function row(d) {
  const u = d.data();
  const li = document.createElement('li');
  li.dataset.id = d.id;
  li.className = d.metadata.hasPendingWrites ? 'pending' : '';
  const cell = (cls, text) => Object.assign(document.createElement('span'), { className: cls, textContent: text });
  li.append(cell('time', clock(u.timestamp)), cell('symbol', u.symbol), cell('price', money(u.price)),
    cell('meta', `${u.exchange} · ${u.instrumentType} · ${u.shard}`));
  return li;
}
function watch(view) {
  const field = view.dataset.field;
  const select = view.querySelector('select');
  select.append(...CHOICES[field].map((v) => new Option(v, v)));
  let stop = () => {};
  const listen = () => {
    stop();
    let initial = true; // a listen's first result is not news: no latency from it
    const q = query(collection(db, 'instruments'), where('shard', 'in', SHARDS), where(field, '==', select.value),
      orderBy('timestamp', 'desc'), limit(5));
    stop = onSnapshot(q, { includeMetadataChanges: true }, (snap) => {
      showStatus(snap.metadata.fromCache);
      if (snap.metadata.hasPendingWrites) viewsPending.add(field); else viewsPending.delete(field);
      const now = Date.now();
      for (const c of snap.docChanges()) {
        if (c.type !== 'added') continue;
        const { writer, seq, timestamp } = c.doc.data();
        const w = writers.get(writer) ?? { first: seq, last: seq };
        w.last = Math.max(w.last, seq);
        writers.set(writer, w);
        if (writer !== me && !initial) latency.push([performance.now(), now - timestamp.toMillis()]);
      }
      initial &&= snap.metadata.fromCache;
      view.querySelector('ol').replaceChildren(...snap.docs.map(row));
    }, showError);
  };
  select.onchange = listen;
  listen();
}

async function start() {
  const indexes = await (await fetch('../demos.indexes.json')).text();
  db = await openFirestore({ name: 'instruments', relay, indexes });
  document.querySelectorAll('.view').forEach(watch);
  $('writer').disabled = false;
  setInterval(showFigures, 500);
  window.hearthReady = true;
}
showStatus();
start().catch(showError);
