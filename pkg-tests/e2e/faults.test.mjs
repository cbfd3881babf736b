// Fault injection in the style of Jepsen (issue 22): a PostgreSQL server of the test's own
// (scripts/pg-server), three relays over it, and three browser clients (the npm package,
// three Chromium profiles), one on each relay. Each client writes all the time (new
// documents `items/<client>-<n>` and increments of `counters/shared`, about 8 writes in
// flight, every promise's outcome recorded) and listens to the whole `items` collection
// and to the counter (tracker.js replays docChanges() and checks every snapshot). One
// fault per test: the server crashes (`pg_ctl restart -m immediate`), stops for 3 s (`-m
// fast`), has every relay connection terminated, a relay is killed (-9) and started again on
// its port, a client goes offline for a few seconds; then four of these drawn at random, in
// a row and overlapping (a killed relay or an offline client is repaired only after the next
// fault). A relay over the embedded store (two clients) is killed and started again on its
// data directory; its disk is full for a few seconds (its file size limit set and lifted
// from outside with prlimit, no restart); and both with a client offline across them.
// Then the writers stop, every client waits for its pending writes, and the outcomes are
// checked against a fresh read through every relay (a fourth profile that never opened the
// database): no acknowledged write lost, none applied twice, none rejected for a transient
// cause, no listener ended by an error, every listener showing the fresh read within 20 s
// of the repair, `hearth-relay check` clean (indexes whole, versions gap-free and agreeing
// with the documents). A listener ended by an error is a failure; the page
// then listens again, as an app would have to, so that convergence is still checked.
// Each test prints its figures (writes attempted, acknowledged, re-sent after a
// reconnection as seen on the WebSocket, lost; the time from the fault to each listener's
// first write of another client made after the fault took hold, and to each client's first
// such write acknowledged; the same latencies before the fault) and every failed check with
// its numbers and the relays' warnings; the summary of every test comes last. Randomness
// (which relay, which client, how long) comes from a seed it prints:
// HEARTH_FAULTS_SEED=<seed> repeats it. Run: node --test pkg-tests/e2e/faults.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, chmodSync, rmSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { root, spawnRelayAt, startServer, startBrowser, installTracker, freePort, varint } from './harness.mjs';

const run = promisify(execFile);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const SEED = Number(process.env.HEARTH_FAULTS_SEED ?? Math.floor(Math.random() * 2 ** 31));
console.log(`faults: seed ${SEED} (HEARTH_FAULTS_SEED=${SEED} repeats it)`);
/** mulberry32: the seeded source of every random choice. */
const random = (() => {
  let a = SEED >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
})();
const between = (lo, hi) => Math.round(lo + (hi - lo) * random());
const pick = (n) => Math.floor(random() * n);

/** Writes each client keeps in flight, and its pause after each outcome (ms). */
const INFLIGHT = 8;
const PACE_MS = 30;
/** Every third write is an increment of the shared counter, the others new documents. */
const INCREMENT_EVERY = 3;
/** How long after the fault every listener must show the fresh read. */
const CONVERGE_MS = 20000;
/** How long the writers go on after the fault was repaired. */
const AFTER_MS = 4000;
/** How long a client may take to have its pending writes acknowledged once writing stops. */
const DRAIN_MS = 15000;
/** Codes a write must never be rejected with: transient causes the client must retry. */
const TRANSIENT = ['unavailable', 'deadline-exceeded', 'resource-exhausted', 'internal', 'aborted'];
const CODES = ['invalid-argument', 'not-found', 'already-exists', 'permission-denied', 'unauthenticated',
  'failed-precondition', 'aborted', 'resource-exhausted', 'unavailable', 'unimplemented', 'internal', 'data-loss'];

const env = { relays: [], summary: [] };


// ---- PostgreSQL ----------------------------------------------------------------------

const pgBin = () => join('/usr/lib/postgresql', readdirSync('/usr/lib/postgresql')
  .sort((a, b) => Number(a) - Number(b)).at(-1), 'bin');
const script = (...args) => run(join(root, 'scripts/pg-server'), args);
const asOwner = (cmd, args) => (process.getuid() === 0
  ? run('runuser', ['-u', 'postgres', '--', cmd, ...args]) : run(cmd, args));
const psql = async (sql, db = 'postgres') => (await run(join(pgBin(), 'psql'),
  ['-h', '127.0.0.1', '-p', String(env.pgPort), '-U', 'postgres', '-d', db, '-At', '-c', sql],
  { env: { ...process.env, PGSSLMODE: 'disable' } })).stdout.trim();

const pgFaults = {
  restart: () => script('restart', env.pg),
  stopFast: () => asOwner(join(pgBin(), 'pg_ctl'), ['-D', join(env.pg, 'pg'), '-m', 'fast', '-w', 'stop']),
  start: () => script('start', env.pg, String(env.pgPort)),
  terminate: () => psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'hearth' AND pid <> pg_backend_pid()"),
};

// ---- relays --------------------------------------------------------------------------

/** Relay `i` of the shared store: started (again) on its port and data directory. */
async function startPgRelay(i, addr = '127.0.0.1:0') {
  const data = env.relays[i]?.data ?? mkdtempSync(join(tmpdir(), 'hearth-faults-relay-'));
  const proc = await spawnRelayAt(addr, data, ['--postgres', env.pgUrl]);
  env.relays[i] = { data, proc, addr: proc.addr };
  return proc;
}

/** Waits until `relay` answers /healthz with 200 (at most `ms`): how long it took, or null. */
async function healthy(relay, ms = 15000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    const ok = await fetch(`${relay.http}/healthz`).then((r) => r.ok, () => false);
    if (ok) return Date.now() - t0;
    await sleep(100);
  }
  return null;
}

/** `hearth-relay check` with `args`: `{ clean, said }` (its output, shortened). */
async function check(args) {
  const bin = process.env.HEARTH_RELAY_BIN || join(root, 'target/debug/hearth-relay');
  try {
    const { stdout, stderr } = await run(bin, ['check', ...args], { env: { ...process.env, HEARTH_LOG: 'warn' }, timeout: 60000 });
    return { clean: true, said: `${stdout}${stderr}`.trim().split('\n').slice(-2).join(' / ').slice(0, 300) };
  } catch (e) {
    return { clean: false, said: `exit ${e.code ?? e.signal}: ${`${e.stdout}${e.stderr}`.trim().slice(-2000)}` };
  }
}

before(async () => {
  env.dir = mkdtempSync(join(tmpdir(), 'hearth-faults-pg-'));
  chmodSync(env.dir, 0o755);
  env.pg = join(env.dir, 'server');
  env.pgPort = await freePort();
  await script('start', env.pg, String(env.pgPort), String(process.pid));
  await psql('CREATE DATABASE hearth');
  env.pgUrl = `postgres://postgres@127.0.0.1:${env.pgPort}/hearth`;
  for (let i = 0; i < 3; i++) await startPgRelay(i);
  env.server = await startServer();
  // Three clients' browsers, and one more for the fresh reads.
  env.browsers = await Promise.all([0, 1, 2, 3].map(() => startBrowser()));
});

after(async () => {
  console.log('faults: summary');
  for (const s of env.summary) console.log(`  ${s}`);
  for (const b of env.browsers ?? []) await b.stop().catch(() => {});
  await env.server?.stop();
  for (const r of env.relays) {
    await r.proc?.stop();
    rmSync(r.data, { recursive: true, force: true });
  }
  try { await script('stop', env.pg); } catch { /* gone */ }
  rmSync(env.dir, { recursive: true, force: true });
});

// ---- clients -------------------------------------------------------------------------


/** Counts page `p`'s WebSockets and protocol frames (docs/protocol.md): every `Write`'s
 *  batch id (sent more than once: re-sent after a reconnection), and the `Error` codes. */
function watchFrames(p) {
  const f = { sockets: 0, sent: new Map(), errors: {}, targetErrors: [], targets: new Map() };
  p.on('websocket', (ws) => {
    f.sockets++;
    ws.on('framesent', ({ payload }) => {
      if (typeof payload === 'string') return;
      if (payload[0] === 0x07 && payload[varint(payload, 1)[1]] === 0x00) {
        // Listen: target_id, then a query over a collection: its path, and whether filtered.
        const [target, a] = varint(payload, 1);
        const [len, b] = varint(payload, a + 1);
        const filtered = payload[b + len] === 0x01;
        f.targets.set(target, `${payload.subarray(b, b + len).toString()}${filtered ? ' filtered' : ''}`);
      }
      if (payload[0] !== 0x06) return;
      const [, at] = varint(payload, 1);
      const [batch] = varint(payload, at);
      f.sent.set(batch, (f.sent.get(batch) ?? 0) + 1);
    });
    ws.on('framereceived', ({ payload }) => {
      if (typeof payload === 'string') return;
      if (payload[0] === 0x89) {
        const [request, a] = varint(payload, 1);
        const [target, b] = varint(payload, a);
        const code = CODES[payload[b]] ?? `code ${payload[b]}`;
        f.errors[code] = (f.errors[code] ?? 0) + 1;
        if (request === 0 && target !== 0) {
          const [len, c] = varint(payload, b + 1);
          f.targetErrors.push({ at: Date.now(), target, what: f.targets.get(target), code, message: payload.subarray(c, c + len).toString() });
        }
      }
    });
  });
  return f;
}

/** Client `me` in browser `b`: database `db` through relay `url`, its listeners started and
 *  its writer installed (not started). */
async function openClient(b, url, db, me) {
  const p = await b.page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  const frames = watchFrames(p);
  await installTracker(p);
  await p.evaluate(async ({ url, db, me }) => {
    window.db = await window.hearth.Hearth.open({ name: db, relay: url });
    // The writer's and the listeners' records: `epoch` is 1 from the fault on, and
    // `first[e]` when this listener first showed another client's write of epoch e.
    // `lag`: how long other clients' writes made before the fault took to show here.
    // `relistens`: listeners ended by an error, which the page then listens to again (as
    // an app would have to), so that convergence is still checked after such a failure.
    const F = window.F = { me, epoch: 0, stop: false, ops: [], first: {}, lag: [], relistens: [] };
    const listen = {
      items: () => window.track(window.db.collection('items'), {}, (s) => {
        const now = Date.now();
        for (const c of s.docChanges()) {
          if (c.type === 'removed') continue;
          const d = c.doc.data();
          if (d.client === me) continue;
          if (d.epoch > 0 && F.first[d.epoch] === undefined) F.first[d.epoch] = now;
          if (d.epoch === 0 && c.type === 'added' && F.lag.length < 5000) F.lag.push([now, now - d.at]);
        }
      }),
      counter: () => window.trackDoc(window.db.doc('counters/shared')),
    };
    window.items = listen.items();
    window.counter = listen.counter();
    setInterval(() => {
      for (const key of ['items', 'counter']) {
        if (window[key].errors.some((e) => e.startsWith('listen error'))) {
          F.relistens.push({ key, at: Date.now() });
          window[key] = listen[key]();
        }
      }
    }, 100);
    window.startWriters = ({ inflight, pace, every }) => {
      const { FieldValue } = window.hearth;
      let n = 0;
      const slot = async () => {
        while (!F.stop) {
          const k = n++;
          const op = { n: k, e: F.epoch, o: 'pending', t0: Date.now() };
          let write;
          if (k % every === every - 1) {
            op.k = 'inc';
            write = window.db.doc('counters/shared').set({ n: FieldValue.increment(1) }, { merge: true });
          } else {
            op.k = 'set';
            op.id = `${me}-${k}`;
            write = window.db.doc(`items/${op.id}`).set({ client: me, n: k, epoch: F.epoch, at: op.t0 });
          }
          F.ops.push(op);
          try {
            await write;
            op.o = 'ok';
          } catch (e) {
            op.o = e?.code ?? `no code: ${e?.message ?? e}`;
          }
          op.t1 = Date.now();
          await new Promise((r) => setTimeout(r, pace));
        }
      };
      for (let i = 0; i < inflight; i++) slot();
    };
  }, { url, db, me });
  // The listener's first snapshot from the relay before any write.
  await p.waitForFunction(() => window.items.snaps.some((s) => !s.cache), null, { timeout: 20000 });
  return { p, frames, me };
}

/** A fresh read of database `db` through relay `url`, by a client that never opened it
 *  (its own browser profile): the `items` documents in name order as `{ id, data }` (data
 *  as JSON), and the counter. Tried again for up to `ms` while the read fails. */
async function freshRead(url, db, ms = 10000) {
  const p = await env.browsers[3].page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  try {
    return await p.evaluate(async ({ url, db, ms }) => {
      const h = await window.hearth.Hearth.open({ name: db, relay: url });
      const t0 = Date.now();
      try {
        for (;;) {
          try {
            const items = await h.collection('items').get({ source: 'server' });
            const c = await h.doc('counters/shared').get({ source: 'server' });
            return { items: items.docs.map((d) => ({ id: d.id, data: JSON.stringify(d.data()) })),
              counter: c.exists ? c.data().n : null };
          } catch (e) {
            if (Date.now() - t0 > ms) throw new Error(`fresh read through ${url}: ${e?.code} ${e?.message}`);
            await new Promise((r) => setTimeout(r, 250));
          }
        }
      } finally {
        // The next read (through another relay) starts without this one's cache too.
        await h.close();
        await window.hearth.Hearth.clearPersistence(db).catch(() => {});
      }
    }, { url, db, ms });
  } finally {
    await p.close();
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : s[Math.min(s.length - 1, Math.floor(q * s.length))];
};
const worst = (xs) => (xs.length ? Math.max(...xs) : null);

/** The lines of `text` that are warnings or errors, each once, at most `n`. */
function logLines(text, n = 6) {
  const seen = new Set();
  for (const l of text.split('\n')) {
    if (!/WARN|ERROR|panick/.test(l)) continue;
    // Without the timestamp, so that repeats collapse.
    seen.add(l.replace(/^\S*\d{2}:\d{2}:\d{2}\S*\s+/, '').replace(/\x1b\[[0-9;]*m/g, '').slice(0, 300));
    if (seen.size >= n) break;
  }
  return [...seen];
}

// ---- one schedule --------------------------------------------------------------------

/** Runs one schedule: client i in browser i on database `db` through `urls[i]()`; writes for
 *  a while, runs `fault({ epoch })` (which calls `epoch()` once the fault took hold, and
 *  gives `restored`, when it was repaired, and a `note`), writes on, stops, and checks.
 *  `relays()` are the relays (their /healthz before, their logs after); `storeCheck()` is
 *  `hearth-relay check`'s verdict. Prints the figures and every failed check,
 *  and gives the failed checks (empty: all held). */
async function schedule(spec) {
  const pages = [];
  try {
    return await scheduleOn(spec, pages);
  } finally {
    for (const p of pages) await p.close().catch(() => {});
  }
}

/** `schedule`'s body; the pages it opens go into `pages`, for closing. */
async function scheduleOn({ name, db, urls, relays, fault, storeCheck }, pages) {
  const failures = [];
  const fail = (invariant, detail) => failures.push(`${invariant}: ${detail}`);
  for (const [i, r] of relays().entries()) {
    if (await healthy(r) === null) fail('relay healthy before the schedule', `relay ${i} /healthz not 200 within 15 s`);
  }
  const logFrom = new Map(relays().map((r) => [r, r.stderr().length]));
  const clients = await Promise.all(urls.map((u, i) => openClient(env.browsers[i], u(), db, `c${i}`)));
  pages.push(...clients.map((c) => c.p));
  await Promise.all(clients.map((c) => c.p.evaluate((o) => window.startWriters(o),
    { inflight: INFLIGHT, pace: PACE_MS, every: INCREMENT_EVERY })));
  await sleep(between(1500, 2500));

  const tFault = Date.now();
  let tHeld = null;
  const { restored: tRestored, note } = await fault({
    // Called by the fault once it took hold: writes from here on are of epoch 1.
    epoch: () => { tHeld = Date.now(); return Promise.all(clients.map((c) => c.p.evaluate(() => { window.F.epoch = 1; }))); },
  });
  await sleep(AFTER_MS);

  // Stop writing; every client's pending writes acknowledged (bounded).
  const drained = await Promise.all(clients.map((c) => c.p.evaluate(async (ms) => {
    window.F.stop = true;
    const t0 = Date.now();
    const r = await Promise.race([
      window.db.waitForPendingWrites().then(() => 'ok', (e) => `rejected ${e?.code}`),
      new Promise((r) => setTimeout(() => r('timed out'), ms)),
    ]);
    await new Promise((r) => setTimeout(r, 50));
    return { r, ms: Date.now() - t0 };
  }, DRAIN_MS)));
  drained.forEach((d, i) => { if (d.r !== 'ok') fail('waitForPendingWrites', `client c${i}: ${d.r} after ${d.ms} ms`); });
  const ops = await Promise.all(clients.map((c) => c.p.evaluate(() => window.F.ops)));

  // The reference: a fresh read through every relay of the schedule, which must agree.
  let fresh = null;
  for (const url of new Set(urls.map((u) => u()))) {
    try {
      const r = await freshRead(url, db);
      if (!fresh) fresh = { ...r, url };
      else if (JSON.stringify(r) !== JSON.stringify({ items: fresh.items, counter: fresh.counter })) {
        fail('relays agree', `through ${url}: ${r.items.length} documents, counter ${r.counter}; through ${fresh.url}: ${fresh.items.length}, counter ${fresh.counter}`);
      }
    } catch (e) {
      fail('fresh read', String(e?.message ?? e).slice(0, 500));
    }
  }

  const views = fresh ? await converge(clients, fresh, tRestored, fail) : [];
  const fig = outcomes(ops, fresh, fail);

  // What the clients saw on their WebSockets: batches sent again, reconnections, errors.
  fig.resent = clients.reduce((s, c) => s + [...c.frames.sent.values()].filter((k) => k > 1).length, 0);
  fig.reconnections = clients.map((c) => c.frames.sockets - 1);
  fig.relayErrors = clients.map((c) => c.frames.errors);
  // Listens the relay ended with an error (target `Error` frames, the client's internal
  // listens included; one that reaches an app listener is a failure below).
  fig.listensEndedByRelay = clients.map((c) => c.frames.targetErrors.map((e) => `${c.me} target ${e.target} (${e.what}) ${e.code} at +${e.at - tFault} ms`));

  // Tracker findings: a wrong replay, inconsistent metadata, a listen error.
  for (const c of clients) {
    const t = await c.p.evaluate(() => window.trackers.map((t) => ({ what: t.what, errors: t.errors.slice(0, 3), n: t.errors.length, deviations: t.deviations.slice(0, 3), d: t.deviations.length })));
    const used = new Set();
    for (const [k, x] of t.entries()) {
      const ended = x.errors.filter((e) => e.startsWith('listen error'));
      for (const e of ended) {
        // The relay's frame that ended it: an app listener's target (unfiltered `items`, or
        // `counters`) with this message, not matched before.
        const frame = c.frames.targetErrors.find((f) => !used.has(f) && e.endsWith(f.message)
          && (x.what === 'query' ? f.what === 'items' : f.what?.startsWith('counters')));
        if (frame) used.add(frame);
        fail('no listener ended by a transient error', `client ${c.me}'s ${x.what} listener (number ${k}) got "${e.slice(0, 300)}"${frame ? ` (the relay ended its target ${frame.target} at +${frame.at - tFault} ms after the fault)` : ''}: it stops for good (the test listens again)`);
      }
      if (x.n > ended.length) fail('listener snapshots consistent (tracker.js)', `client ${c.me}, ${x.what}: ${x.n} errors, first ${JSON.stringify(x.errors)}`);
      if (x.d) (fig.deviations ??= []).push(`${c.me} ${x.what}: ${x.d}, first ${JSON.stringify(x.deviations)}`);
    }
  }

  // Recovery: from the fault to each listener's first write of another client made after
  // the fault took hold, and to each client's first such write acknowledged.
  const recs = await Promise.all(clients.map((c) => c.p.evaluate(() => ({ first: window.F.first[1] ?? null, lag: window.F.lag, relistens: window.F.relistens }))));
  fig.relistenedAfterError = recs.map((r, i) => r.relistens.map((x) => `c${i} ${x.key} at +${x.at - tFault} ms`)).flat();
  const firsts = recs.map((r) => r.first);
  firsts.forEach((t, i) => { if (t === null) fail('listener delivers writes after the fault', `client c${i}'s listener never showed another client's write made after the fault`); });
  const fromFault = firsts.filter((t) => t !== null).map((t) => t - tFault);
  const acked = ops.map((list) => list.filter((o) => o.e === 1 && o.o === 'ok').map((o) => o.t1 - tFault));
  const lags = recs.flatMap((r) => r.lag).filter(([at]) => at < tFault).map(([, lag]) => lag);
  const latency = ops.flat().filter((o) => o.o === 'ok' && o.t1 < tFault).map((o) => o.t1 - o.t0);
  fig.timing = {
    faultHeldMs: tHeld - tFault, faultRepairedMs: tRestored - tFault,
    listenerRecoveryMs: { median: median(fromFault), worst: worst(fromFault), each: firsts.map((t) => (t === null ? null : t - tFault)) },
    writeRecoveryMs: acked.map((xs) => (xs.length ? Math.min(...xs) : null)),
    beforeFault: { ackMs: { median: median(latency), p99: quantile(latency, 0.99) }, deliveryLagMs: { median: median(lags), p99: quantile(lags, 0.99) } },
    convergedByMsAfterRepair: views.map((v) => (v.same ? v.after : `not after ${v.after}`)),
  };

  const verdict = await storeCheck();
  fig.check = verdict.said;
  if (!verdict.clean) fail('hearth-relay check clean', verdict.said);

  console.log(`faults: ${name}: ${note ? `${note} ` : ''}${JSON.stringify(fig)}`);
  for (const f of failures) console.log(`faults: ${name}: FAILED ${f}`);
  if (failures.length) {
    relays().forEach((r, i) => {
      for (const l of logLines(r.stderr().slice(logFrom.get(r) ?? 0))) console.log(`faults: ${name}: relay ${i} logged: ${l}`);
    });
  }
  const t = fig.timing;
  const failed = {};
  for (const f of failures) failed[f.split(':')[0]] = (failed[f.split(':')[0]] ?? 0) + 1;
  env.summary.push(`${name}: ${note ? `${note} ` : ''}attempted ${fig.attempted}, acknowledged ${fig.acknowledged}, rejected ${fig.rejected}, unsettled ${fig.pending}, re-sent ${fig.resent}, lost ${fig.lost}; listener recovery from the fault median ${t.listenerRecoveryMs.median} ms, worst ${t.listenerRecoveryMs.worst} ms (fault repaired at ${t.faultRepairedMs} ms); ${failures.length ? `FAILED: ${Object.entries(failed).map(([k, n]) => `${k} (${n})`).join(', ')}` : 'all checks held'}`);
  return failures;
}

/** Waits until every client's listeners show `fresh` (the `items` result and the counter), until `CONVERGE_MS` after `tRestored` (at least 2 s from now); gives
 *  each client's `{ same, after }` (ms from `tRestored`). */
async function converge(clients, fresh, tRestored, fail) {
  const want = JSON.stringify(fresh.items);
  const wantCounter = JSON.stringify({ n: fresh.counter });
  const deadline = Math.max(tRestored + CONVERGE_MS, Date.now() + 2000);
  const look = (c) => c.p.evaluate(({ want, wantCounter }) => {
    const last = window.items.snaps.at(-1);
    const cl = window.counter.snaps.at(-1);
    // Data only: without includeMetadataChanges an acknowledgement that changes no data
    // raises no snapshot (Firestore's rule), so the last one may still say pending.
    return { same: JSON.stringify(window.items.list) === want && cl?.data === wantCounter,
      size: window.items.list.length, pending: last.pending, cache: last.cache,
      counter: cl?.data, counterPending: cl?.pending };
  }, { want, wantCounter });
  // Every client polled each round; each view kept from the round it first matched.
  const views = clients.map(() => null);
  for (;;) {
    const round = await Promise.all(clients.map((c, i) => (views[i]?.same ? views[i] : look(c))));
    const now = Date.now();
    round.forEach((v, i) => { if (!views[i]?.same) views[i] = { ...v, after: now - tRestored }; });
    if (views.every((v) => v.same) || now > deadline) break;
    await sleep(100);
  }
  for (const [i, v] of views.entries()) {
    const c = clients[i];
    if (v.same && v.after <= CONVERGE_MS) continue;
    if (v.same) {
      fail('listener converges in time', `client ${c.me}'s listener showed the fresh read only ${v.after} ms after the repair`);
      continue;
    }
    const diff = await c.p.evaluate((want) => {
      const have = new Map(window.items.list.map((d) => [d.id, d.data]));
      const w = JSON.parse(want);
      const wm = new Map(w.map((d) => [d.id, d.data]));
      const missing = w.filter((d) => have.get(d.id) !== d.data).map((d) => d.id);
      return { missing: missing.length, first: missing.slice(0, 5),
        extra: [...have.keys()].filter((id) => !wm.has(id)).slice(0, 5) };
    }, want);
    fail('listener converges', `client ${c.me}'s listener ${v.after} ms after the repair: ${v.size} documents, fresh read ${fresh.items.length} (missing or different ${diff.missing}, first ${diff.first.join(' ')}; extra ${JSON.stringify(diff.extra)}), last snapshot pending ${v.pending} fromCache ${v.cache}; counter ${v.counter} (pending ${v.counterPending}), fresh ${fresh.counter}`);
  }
  return views;
}

/** Checks the outcomes `ops` (one list per client) against the fresh read: no acknowledged
 *  write lost, none applied twice, none rejected for a transient cause, every one settled.
 *  Gives the counts. */
function outcomes(ops, fresh, fail) {
  const all = ops.flat();
  const sets = all.filter((o) => o.k === 'set');
  const incs = all.filter((o) => o.k === 'inc');
  const count = (xs, o) => xs.filter((x) => x.o === o).length;
  const fig = {
    attempted: all.length, acknowledged: count(all, 'ok'), pending: count(all, 'pending'),
    rejected: all.length - count(all, 'ok') - count(all, 'pending'), rejectedBy: {},
    sets: { attempted: sets.length, acknowledged: count(sets, 'ok') },
    increments: { attempted: incs.length, acknowledged: count(incs, 'ok'), server: fresh?.counter },
    lost: 0,
  };
  for (const [i, list] of ops.entries()) {
    for (const o of list) {
      if (o.o === 'ok' || o.o === 'pending') continue;
      fig.rejectedBy[o.o] = (fig.rejectedBy[o.o] ?? 0) + 1;
      if (TRANSIENT.includes(o.o)) fail('no transient rejection', `client c${i}'s ${o.k} #${o.n} (epoch ${o.e}) rejected with ${o.o}`);
    }
    const unknown = list.filter((o) => o.o === 'pending').length;
    if (unknown) fail('every write settled', `client c${i}: ${unknown} writes neither acknowledged nor rejected at the end`);
  }
  if (!fresh) return fig;
  const server = new Map(fresh.items.map((d) => [d.id, JSON.parse(d.data)]));
  const lostIds = [];
  for (const o of sets) {
    const got = server.get(o.id);
    if (o.o === 'ok' && got === undefined) lostIds.push(`${o.id} (epoch ${o.e})`);
    if (o.o === 'ok' && got !== undefined && (got.n !== o.n || got.epoch !== o.e)) fail('acknowledged set stored as written', `${o.id}: ${JSON.stringify(got)}`);
    if (o.o !== 'ok' && o.o !== 'pending' && got !== undefined) fail('rejected set not applied', `${o.id} rejected with ${o.o} but stored: ${JSON.stringify(got)}`);
  }
  const attempted = new Set(sets.map((o) => o.id));
  const ghosts = fresh.items.filter((d) => !attempted.has(d.id)).map((d) => d.id);
  if (ghosts.length) fail('no document nobody wrote', ghosts.slice(0, 10).join(', '));
  if (lostIds.length) fail('no acknowledged set lost', `${lostIds.length} of ${fig.sets.acknowledged} missing from the fresh read: ${lostIds.slice(0, 10).join(', ')}`);
  fig.lost = lostIds.length;
  const ok = count(incs, 'ok');
  const maybe = count(incs, 'pending');
  const n = fresh.counter ?? 0;
  if (n < ok) {
    fig.lost += ok - n;
    fail('no acknowledged increment lost', `counter ${n} < ${ok} acknowledged increments (${incs.length} attempted)`);
  }
  if (n > ok + maybe) fail('no increment applied twice', `counter ${n} > ${ok} acknowledged + ${maybe} unsettled increments (${incs.length} attempted)`);
  return fig;
}

// ---- the schedules -------------------------------------------------------------------

const pgUrls = [0, 1, 2].map((i) => () => env.relays[i].proc.url);
const pgRelays = () => env.relays.map((r) => r.proc);
const pgCheck = () => check(['--postgres', env.pgUrl]);

/** A schedule over the shared store whose fault is `inflict(epoch)`. */
const pgSchedule = (name, inflict) => test(name, { timeout: 90000 }, async () => {
  const key = name.split(':')[0];
  const failures = await schedule({ name: key, db: `faults-${key}`, urls: pgUrls, relays: pgRelays,
    storeCheck: pgCheck, fault: inflict });
  assert.deepEqual(failures, []);
});

pgSchedule('restart: PostgreSQL crashes and restarts (pg_ctl restart -m immediate)', async ({ epoch }) => {
  await pgFaults.restart();
  const restored = Date.now();
  await epoch();
  return { restored };
});

pgSchedule('stop: PostgreSQL stops (-m fast) for 3 s, then starts', async ({ epoch }) => {
  await pgFaults.stopFast();
  await epoch();
  await sleep(3000);
  await pgFaults.start();
  return { restored: Date.now() };
});

// A client with many listeners connects again during an outage (here it went offline for
// a moment): the relay answers every Listen of the new connection with an error (it cannot
// read for them), and each target listens again after its backoff. That backoff was once
// one for all targets and doubled with each end, so twelve ends in one round sent every
// listener to a wait of 15 to 45 s: they looked live long after PostgreSQL was back.
test('many listeners: PostgreSQL stops for 3 s; every listener hears the write made after it is back, soon', { timeout: 90000 }, async () => {
  const db = 'faults-many';
  const LISTENERS = 12;
  const listener = await env.browsers[0].page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  const writer = await env.browsers[1].page(`${env.server.origin}/pkg-tests/e2e/page.html`);
  try {
    await listener.evaluate(async ({ url, db, n }) => {
      window.db = await window.hearth.Hearth.open({ name: db, relay: url });
      window.heard = Array.from({ length: n }, () => null);
      window.fromServer = Array.from({ length: n }, () => false);
      for (let k = 0; k < n; k++) {
        // A collection each: a resumed target hears of every document of its collection
        // changed since its version, and no other listener's query matches them.
        window.db.collection(`many-${k}`).onSnapshot((s) => {
          if (!s.metadata.fromCache) window.fromServer[k] = true;
          if (s.docs.length > 0 && window.heard[k] === null) window.heard[k] = Date.now();
        }, (e) => { window.heard[k] = `error ${e.code}`; });
      }
    }, { url: env.relays[0].proc.url, db, n: LISTENERS });
    await listener.waitForFunction(() => window.fromServer.every((x) => x), null, { timeout: 20000 });
    await writer.evaluate(async ({ url, db }) => {
      window.db = await window.hearth.Hearth.open({ name: db, relay: url });
    }, { url: env.relays[1].proc.url, db });

    await pgFaults.stopFast();
    await env.browsers[0].context.setOffline(true);
    await sleep(500);
    await env.browsers[0].context.setOffline(false);
    await sleep(2500);
    await pgFaults.start();
    const restored = Date.now();
    await writer.evaluate(async (n) => {
      const batch = window.db.batch();
      for (let k = 0; k < n; k++) batch.set(window.db.doc(`many-${k}/after`), { k });
      await batch.commit();
    }, LISTENERS);
    const acked = Date.now();
    // Generous for a loaded machine, and still well short of a doubled shared backoff.
    const BOUND_MS = 12000;
    await listener.waitForFunction(() => window.heard.every((x) => x !== null), null, { timeout: BOUND_MS })
      .catch(() => {});
    const heard = await listener.evaluate(() => window.heard);
    const after = heard.map((t) => (typeof t === 'number' ? t - restored : t));
    console.log(`faults: many listeners: write acknowledged ${acked - restored} ms after the repair; each listener heard it at (ms after the repair) ${JSON.stringify(after)}`);
    assert.ok(after.every((t) => typeof t === 'number' && t <= BOUND_MS),
      `every listener hears the write within ${BOUND_MS} ms of the repair: ${JSON.stringify(after)}`);
  } finally {
    await listener.close();
    await writer.close();
  }
});

pgSchedule('terminate: every relay connection terminated (pg_terminate_backend)', async ({ epoch }) => {
  const killed = await pgFaults.terminate();
  const restored = Date.now();
  await epoch();
  return { restored, note: `${killed} connections terminated` };
});

pgSchedule('kill: a relay killed (-9) and started again on its port', async ({ epoch }) => {
  const i = pick(3);
  const down = between(300, 1500);
  const r = env.relays[i];
  r.proc.kill('SIGKILL');
  await r.proc.exited;
  await epoch();
  await sleep(down);
  await startPgRelay(i, r.addr);
  return { restored: Date.now(), note: `relay ${i} killed, down ${down} ms;` };
});

pgSchedule('offline: a client offline for a few seconds while writing', async ({ epoch }) => {
  const i = pick(3);
  const down = between(2500, 4000);
  await env.browsers[i].context.setOffline(true);
  try {
    await epoch();
    await sleep(down);
  } finally {
    await env.browsers[i].context.setOffline(false);
  }
  return { restored: Date.now(), note: `client c${i} offline ${down} ms;` };
});

/** A fault for the combined schedules: takes hold, and gives its repair (called later). */
const pgFault = {
  restart: async () => { await pgFaults.restart(); return { said: 'PostgreSQL restarted', repair: async () => {} }; },
  stop: async () => {
    const down = between(1000, 3000);
    await pgFaults.stopFast();
    // PostgreSQL comes back before the next fault: a relay started while it is down would exit.
    await sleep(down);
    await pgFaults.start();
    return { said: `PostgreSQL stopped ${down} ms`, repair: async () => {} };
  },
  terminate: async () => ({ said: `${await pgFaults.terminate()} connections terminated`, repair: async () => {} }),
  kill: async () => {
    // One of the relays not down already (at most one is: its repair follows the next fault).
    const up = [0, 1, 2].filter((i) => !env.relays[i].down);
    const i = up[pick(up.length)];
    const r = env.relays[i];
    r.down = true;
    r.proc.kill('SIGKILL');
    await r.proc.exited;
    return { said: `relay ${i} killed`, repair: async () => { await startPgRelay(i, r.addr); r.down = false; } };
  },
  offline: (browsers) => async () => {
    const i = pick(browsers);
    await env.browsers[i].context.setOffline(true);
    return { said: `client c${i} offline`, repair: () => env.browsers[i].context.setOffline(false) };
  },
};

/** Runs `faults` (each gives a fault that took hold, and its repair) one after another, a
 *  random pause between them; a killed relay or an offline client is repaired only after the
 *  next fault took hold, so that faults overlap. Calls `epoch()` once the first took hold;
 *  gives `{ restored, note }`. */
async function faultSequence(faults, epoch) {
  const said = [];
  let pending = null;
  for (const [k, inflict] of faults.entries()) {
    const f = await inflict();
    said.push(f.said);
    if (k === 0) await epoch();
    if (pending) await pending();
    pending = f.repair;
    await sleep(between(200, 1500));
  }
  await pending?.();
  return { restored: Date.now(), note: `${said.join(', then ')};` };
}

pgSchedule('combined: four faults in a row, overlapping (restart, stop, terminate, kill, offline)', async ({ epoch }) => {
  const kinds = [pgFault.restart, pgFault.stop, pgFault.terminate, pgFault.kill, pgFault.offline(3)];
  return faultSequence([0, 1, 2, 3].map(() => kinds[pick(kinds.length)]), epoch);
});

/** A schedule over a relay on its embedded store (two clients) whose fault is
 *  `inflict({ epoch, relay })` (`relay.proc` is the running relay, which the fault may
 *  replace). The store is checked with its relay stopped. */
const embeddedSchedule = (name, inflict) => test(name, { timeout: 90000 }, async () => {
  const key = name.split(':')[0];
  const data = mkdtempSync(join(tmpdir(), 'hearth-faults-embedded-'));
  const relay = { data, proc: await spawnRelayAt('127.0.0.1:0', data) };
  relay.addr = relay.proc.addr;
  try {
    const failures = await schedule({
      name: key, db: `faults-${key}`, urls: [() => relay.proc.url, () => relay.proc.url], relays: () => [relay.proc],
      fault: ({ epoch }) => inflict({ epoch, relay }),
      storeCheck: async () => { await relay.proc.stop(); return check(['--data', data]); },
    });
    assert.deepEqual(failures, []);
  } finally {
    await relay.proc.stop();
    rmSync(data, { recursive: true, force: true });
  }
});

/** Faults of a relay over its embedded store. */
const embeddedFault = {
  kill: (relay) => async () => {
    relay.down = true;
    relay.proc.kill('SIGKILL');
    await relay.proc.exited;
    return { said: 'relay killed', repair: async () => { relay.proc = await spawnRelayAt(relay.addr, relay.data); relay.down = false; } };
  },
  // A full disk: the relay's files may not grow (its file size limit, set from outside; a
  // relay started again has none).
  disk: (relay) => async () => {
    const pid = relay.proc.pid;
    await run('prlimit', ['--pid', String(pid), '--fsize=1:unlimited']);
    // Lifted unless the relay was killed since (one started again has no limit).
    const lift = () => run('prlimit', ['--pid', String(pid), '--fsize=unlimited:unlimited']);
    return { said: 'disk full', repair: () => (relay.down || relay.proc.pid !== pid ? null : lift()) };
  },
};

/** One fault of the embedded store's relay for a random `lo`..`hi` ms, then its repair. */
const oneEmbeddedFault = (fault, [lo, hi], label) => async ({ epoch, relay }) => {
  const down = between(lo, hi);
  const f = await fault(relay)();
  await epoch();
  await sleep(down);
  await f.repair();
  return { restored: Date.now(), note: `${label} ${down} ms;` };
};

embeddedSchedule('embedded: the relay over its embedded store killed (-9) and started again on its data directory',
  oneEmbeddedFault(embeddedFault.kill, [300, 1500], 'down'));

embeddedSchedule('disk: the embedded store\'s disk full for a few seconds, then not (no restart)',
  oneEmbeddedFault(embeddedFault.disk, [2000, 4000], 'full'));

embeddedSchedule('embedded-combined: disk full, the relay killed while it is, a client offline across them', async ({ epoch, relay }) => {
  // The client's spell in any place; the disk fills before the kill (a dead relay has no
  // file size limit to set), and the relay started again has none.
  const order = [embeddedFault.disk(relay), embeddedFault.kill(relay)];
  order.splice(pick(3), 0, pgFault.offline(2));
  return faultSequence(order, epoch);
});
