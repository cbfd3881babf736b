// The model test's runner: one seed end to end. It starts a relay (own launcher, so it can
// be killed with SIGKILL and restarted on the same port and data), the e2e harness's file
// server, and one headless Chromium profile per client (each its own IndexedDB); runs the
// seed's schedule, collecting every snapshot check failure and how every write settled;
// then brings everything back online, waits for quiescence and compares every client's
// listeners and cache with a fresh client's reads from the relay and with the reference
// model. Every wait is bounded, so a hang is reported as a failure with its seed.
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { startBrowser, startServer, root } from '../e2e/harness.mjs';
import { checkModel } from './model.mjs';
import { schedule } from './ops.mjs';
import { launchRelay } from './relay.mjs';
import { ALL_QUERIES, COUNTERS } from './schema.mjs';
import { canonical } from './semantics.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `promise`, or a rejection naming `what` after `ms`. */
function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish in ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** One line of the op log. */
export function describe(op) {
  const who = op.c === undefined ? '' : ` c${op.c}`;
  switch (op.kind) {
    case 'pause': return `#${op.i} pause ${op.ms} ms`;
    case 'net': return `#${op.i}${who} ${op.on ? 'enableNetwork' : 'disableNetwork'}`;
    case 'offline': return `#${op.i}${who} browser${op.p === undefined ? '' : ` of profile ${op.p}`} ${op.on ? 'online' : 'offline'}`;
    case 'kill': case 'restart': case 'reload': return `#${op.i}${who} ${op.kind}`;
    case 'crash': return `#${op.i}${who} tab crashes`;
    case 'ballast': return `#${op.i}${who} ballast ${op.path} ${op.kb} KiB`;
    case 'kill9': return `#${op.i} browser of profile ${op.p} killed (SIGKILL)`;
    default: {
      const ws = op.writes.map((w) => `${w.how} ${w.path}${w.data ? ` ${canonical(w.data)}` : ''}`).join('; ');
      const head = op.kind === 'write' ? op.what : op.kind;
      const tx = op.kind === 'tx' ? ` ${op.txid} on txn/${op.txdoc}${op.item ? ` +items/${op.item}` : ''}` : '';
      return `#${op.i}${who} ${head} ${op.tag}${tx}${ws ? `: ${ws}` : ''}`;
    }
  }
}

/** The replay command of a run. */
export function replayCommand({ seed, ops, clients, tabs = 1, skip = [], only = null }) {
  return `bash scripts/model-sync --seed ${seed} --ops ${ops} --clients ${clients}${tabs > 1 ? ` --tabs ${tabs}` : ''}${skip.length ? ` --skip ${skip.join(',')}` : ''}${only ? ` --only ${only.join(',')}` : ''}`;
}

/** Compares the clients' states with the relay's as a fresh client read it: each
 *  listener's latest result (and, with metadata, that it is synced and has no pending
 *  writes), and the cache reads of the collections a client listens to whole (those of
 *  other collections may hold documents it no longer listens to, stale as in Firestore).
 *  Returns the differences. */
function compareStates(server, states) {
  const diffs = [];
  const docsText = (docs) => JSON.stringify(docs);
  states.forEach((st, c) => {
    // A spec with nothing but its collection listens to the whole collection.
    const whole = new Set(Object.values(st.listeners)
      .filter((l) => l.query && Object.keys(ALL_QUERIES[l.query]).length === 1)
      .map((l) => ALL_QUERIES[l.query].coll));
    for (const [name, l] of Object.entries(st.listeners)) {
      const where = `client ${c} listener ${name}`;
      if (!l.last) { diffs.push(`${where}: no snapshot`); continue; }
      if (l.query && docsText(l.last.docs) !== docsText(server.queries[l.query])) {
        diffs.push(`${where}: ${docsText(l.last.docs)}, the relay: ${docsText(server.queries[l.query])}`);
      }
      if (l.path && l.last.doc !== server.docs[l.path]) diffs.push(`${where}: ${l.last.doc}, the relay: ${server.docs[l.path]}`);
      if (l.meta && (l.last.fromCache || l.last.pending)) {
        diffs.push(`${where} (includeMetadataChanges): fromCache ${l.last.fromCache}, hasPendingWrites ${l.last.pending}`);
      }
    }
    for (const [q, docs] of Object.entries(st.queries)) {
      if (whole.has(ALL_QUERIES[q].coll) && docsText(docs) !== docsText(server.queries[q])) diffs.push(`client ${c} cache query ${q}: ${docsText(docs)}, the relay: ${docsText(server.queries[q])}`);
    }
    for (const [path, doc] of Object.entries(st.docs)) {
      if (whole.has(path.split('/')[0]) && doc !== server.docs[path]) diffs.push(`client ${c} cache ${path}: ${doc}, the relay: ${server.docs[path]}`);
    }
  });
  return diffs;
}

/** Runs one seed; with `only` (op indices), just those ops of its schedule, to reduce a
 *  failure by hand. `print` gets progress lines. Resolves `{ ok, failures, log, ms, ... }`;
 *  never rejects (an error is a failure of the run). */
export async function runSeed({ seed, ops, clients: profiles, tabs = 1, skip = [], only = null, print = console.log }) {
  const t0 = Date.now();
  const plan = schedule({ seed, ops, clients: profiles, tabs, skip });
  // A client is a tab; `browsers` are the profiles.
  const clients = profiles * tabs;
  const profileOf = (c) => Math.floor(c / tabs);
  if (only) plan.ops = plan.ops.filter((op) => only.includes(op.i));
  const failures = [];
  const log = [];
  const outcomes = {};
  const consoleErrors = [];
  const notes = [];
  const browsers = [];
  const pages = [];
  const disabled = new Set();
  const offline = new Set();
  let relay;
  let server;
  let auditor;
  let barrier = 0;
  // What the fresh client read from the relay at quiescence, kept in the record.
  let serverState = null;
  const phases = {};
  const mark = (name, since) => { phases[name] = Date.now() - since; };

  // The failures a drain brings were found while or after the op `at` ran.
  let at = 'setup';
  const collect = (c, d) => {
    for (const e of d.errors) failures.push(`[${at}] ${e}`);
    Object.assign(outcomes, d.settled);
    return d;
  };
  const onPage = (c, what, fn, arg, ms = 20000) => bounded(pages[c].evaluate(fn, arg), ms, `client ${c}: ${what}`);
  const drain = async (c) => collect(c, await onPage(c, 'drain', () => window.agent.drain()));

  const openClient = async (c) => {
    const page = pages[c];
    await bounded(page.waitForFunction(() => window.hearthReady === true, null, { timeout: 30000 }), 35000, `client ${c}: page load`);
    await onPage(c, 'open', (a) => window.agent.open(a),
      { name: 'model', relay: relay.url, client: c, listeners: plan.listeners[c] }, 30000);
  };
  const watchConsole = async (c, page) => {
    // Connection errors while the relay is down are expected; 404s are the favicon.
    const expected = /WebSocket connection to|Failed to load resource/;
    page.on('console', (m) => { if (m.type() === 'error' && !expected.test(m.text())) consoleErrors.push(`client ${c} console: ${m.text()}`); });
    // HEARTH_MODEL_TRACE_DIR: each client's sync layer logs what it sends and applies
    // (globalThis.__HEARTH_DEBUG__), kept with timestamps in <dir>/seed-<seed>-client-<c>.log.
    if (process.env.HEARTH_MODEL_TRACE_DIR) {
      const file = join(process.env.HEARTH_MODEL_TRACE_DIR, `seed-${seed}-client-${c}.log`);
      await page.addInitScript(() => { globalThis.__HEARTH_DEBUG__ = true; });
      page.on('console', (m) => { if (m.type() === 'debug') appendFileSync(file, `${Date.now()} ${m.text()}\n`); });
    }
    page.on('pageerror', (e) => consoleErrors.push(`client ${c} page error: ${e.message}`));
  };

  /** Before a page goes (a reload, a crash, a killed browser): a barrier makes the earlier
   *  writes durable locally first (a write issued just before may legitimately be lost, as
   *  in Firestore); promises still unsettled are lost with the page. */
  const beforeGoing = async (c) => {
    await drain(c);
    barrier += 1;
    await onPage(c, 'barrier', (s) => window.agent.barrier(s), barrier);
    const d = await drain(c);
    for (const tag of d.inflight) if (!tag.startsWith('barrier-')) outcomes[tag] = 'lost';
  };
  const reload = async (c) => {
    await beforeGoing(c);
    await bounded(pages[c].reload({ waitUntil: 'load', timeout: 30000 }), 35000, `client ${c}: reload`);
    disabled.delete(c);
    await openClient(c);
  };
  /** A new tab for client `c` in its profile. */
  const newTab = async (c) => {
    pages[c] = await browsers[profileOf(c)].context.newPage();
    await watchConsole(c, pages[c]);
    await pages[c].goto(`${server.origin}/pkg-tests/model/page.html`);
    disabled.delete(c);
    await openClient(c);
  };
  /** The tab crashes (the renderer process dies: no unload); a new tab takes its place. */
  const crash = async (c) => {
    await beforeGoing(c);
    const cdp = await pages[c].context().newCDPSession(pages[c]);
    cdp.send('Page.crash').catch(() => {});
    await bounded(new Promise((r) => { pages[c].once('crash', r); pages[c].once('close', r); }), 10000, `client ${c}: crash`).catch(() => {});
    await pages[c].close().catch(() => {});
    await newTab(c);
  };
  /** The browser process of profile `p` is killed with SIGKILL; it starts again on the same
   *  profile and every tab of it opens again. */
  const kill9 = async (p) => {
    const tabsOf = Array.from({ length: tabs }, (_, k) => p * tabs + k);
    for (const c of tabsOf) await beforeGoing(c);
    const profile = browsers[p].profile;
    await browsers[p].kill9();
    browsers[p] = await startBrowser(profile);
    for (const c of tabsOf) await newTab(c);
  };

  const step = async (op) => {
    at = `#${op.i}`;
    log.push(describe(op));
    switch (op.kind) {
      case 'pause': await sleep(op.ms); break;
      case 'kill': await relay.kill9(); break;
      case 'restart': await relay.start(); break;
      case 'offline': {
        const p = op.p ?? profileOf(op.c);
        await browsers[p].context.setOffline(!op.on);
        if (op.on) offline.delete(p); else offline.add(p);
        break;
      }
      case 'reload': await reload(op.c); break;
      case 'crash': await crash(op.c); break;
      case 'kill9': await kill9(op.p); break;
      default:
        if (op.kind === 'net') { if (op.on) disabled.delete(op.c); else disabled.add(op.c); }
        collect(op.c, await onPage(op.c, describe(op), async (o) => {
          await window.agent.run(o);
          return window.agent.drain();
        }, op));
    }
  };

  try {
    print(`seed ${seed}: ${ops} ops, ${profiles} profiles of ${tabs} tab${tabs > 1 ? 's' : ''}${skip.length ? `, skipping ${skip.join(',')}` : ''}`);
    let t = Date.now();
    relay = await launchRelay(root);
    server = await startServer();
    for (let p = 0; p < profiles; p++) browsers[p] = await startBrowser();
    for (let c = 0; c < clients; c++) {
      pages[c] = await browsers[profileOf(c)].context.newPage();
      await watchConsole(c, pages[c]);
      await pages[c].goto(`${server.origin}/pkg-tests/model/page.html`);
      await openClient(c);
    }
    // Counters exist before any increment (so none can be refused); txn/t0 exists and
    // txn/t1 does not, so transactions both update and create.
    await onPage(0, 'setup', async (counters) => {
      const { db } = window.agent;
      for (const id of counters) db.doc(`counters/${id}`).set({ n: 0 });
      db.doc('txn/t0').set({ n: 0, done: {} });
      await db.waitForPendingWrites();
    }, COUNTERS, 30000);
    mark('start', t);

    t = Date.now();
    for (const op of plan.ops) {
      await step(op);
      if (op.i % 10 === 9) for (let c = 0; c < clients; c++) await drain(c);
    }
    mark('ops', t);

    at = 'end';
    t = Date.now();
    if (!relay.running) { log.push('end: restart'); await relay.start(); }
    for (const c of offline) await browsers[c].context.setOffline(false);
    for (const c of disabled) await onPage(c, 'enableNetwork', () => window.agent.db.enableNetwork());
    log.push('end: every client online; quiescence');
    await Promise.all(pages.map(async (_, c) => {
      try {
        const rejected = await onPage(c, 'waitForPendingWrites and every write in flight', () => window.agent.quiesce(), undefined, 45000);
        if (rejected.length) notes.push(`client ${c}: waitForPendingWrites() rejected with ${rejected.join(', ')} (Firestore's resolves when earlier writes are refused)`);
      } catch (e) {
        const d = await drain(c);
        failures.push(`${e.message}; still in flight: ${d.inflight.join(',')}`);
      }
    }));
    for (let c = 0; c < clients; c++) await drain(c);
    // What the leaders' caches hold after the ballast: at most about the 1 MiB budget when
    // the collection ran.
    for (let c = 0; c < clients; c++) {
      const bytes = await onPage(c, 'cache size', () => (window.agent.db.isLeader ? window.agent.db.cacheSizeBytes() : null));
      if (bytes !== null) notes.push(`client ${c} leads; its cache holds ${bytes} bytes`);
    }
    mark('quiesce', t);

    t = Date.now();
    auditor = await startBrowser();
    const ap = await auditor.context.newPage();
    await ap.goto(`${server.origin}/pkg-tests/model/page.html`);
    await bounded(ap.waitForFunction(() => window.hearthReady === true, null, { timeout: 30000 }), 35000, 'auditor: page load');
    await bounded(ap.evaluate((a) => window.agent.open(a), { name: 'model', relay: relay.url, client: 'auditor', listeners: {} }), 30000, 'auditor: open');
    // The clients converge after quiescence: poll, and report what still differs. First
    // as they are; then with whole-collection listeners added everywhere, whose fresh
    // results must bring every cache level with the relay (documents deleted there leave).
    const converge = async (label, seconds) => {
      let diffs = [];
      const deadline = Date.now() + seconds * 1000;
      do {
        if (diffs.length) await sleep(1000);
        serverState = await bounded(ap.evaluate(() => window.agent.state('server')), 20000, 'auditor: server reads');
        const states = [];
        for (let c = 0; c < clients; c++) states.push(await onPage(c, 'state', () => window.agent.state('cache')));
        diffs = compareStates(serverState, states);
      } while (diffs.length && Date.now() < deadline);
      for (let c = 0; c < clients; c++) await drain(c);
      failures.push(...diffs.map((d) => `${label} (${seconds} s after quiescence): ${d}`));
    };
    await converge('as listened', 20);
    for (let c = 0; c < clients; c++) await onPage(c, 'whole-collection listeners', () => window.agent.listenWhole());
    await converge('with whole-collection listeners', 15);
    failures.push(...checkModel({ ops: plan.ops, outcomes, server: serverState }));
    mark('check', t);
  } catch (e) {
    failures.push(`the run failed: ${e?.stack ?? e}`);
  } finally {
    const closing = [auditor, ...browsers].filter(Boolean).map((b) => b.stop().catch(() => {}));
    await bounded(Promise.all(closing), 30000, 'closing the browsers').catch(() => {});
    await server?.stop();
    await relay?.stop();
  }
  const panics = consoleErrors.filter((m) => /panicked|unreachable|RuntimeError/.test(m));
  failures.push(...panics);
  const ms = Date.now() - t0;
  return { ok: failures.length === 0, seed, ops, clients: profiles, tabs, skip, failures, notes, log, phases, ms, server: serverState, outcomes,
    consoleErrors, relayLog: relay?.log() ?? '', replay: replayCommand({ seed, ops, clients: profiles, tabs, skip, only }) };
}

/** A failed run's report: the seed, its failures, the op log's tail and the replay line. */
export function report(r, tail = 30) {
  const lines = [`MODEL TEST FAILED: seed ${r.seed}, ${r.ops} ops, ${r.clients} profiles of ${r.tabs ?? 1} tabs (${(r.ms / 1000).toFixed(1)} s)`];
  const cut = (l) => (l.length > 600 ? `${l.slice(0, 600)} …` : l);
  lines.push(...r.failures.slice(0, 25).map((f) => `  ${cut(f)}`));
  if (r.failures.length > 25) lines.push(`  ... and ${r.failures.length - 25} more`);
  lines.push(`op log, last ${Math.min(tail, r.log.length)} of ${r.log.length}:`);
  lines.push(...r.log.slice(-tail).map((l) => `  ${l}`));
  if (r.notes.length) lines.push('notes:', ...r.notes.map((l) => `  ${l}`));
  if (r.consoleErrors.length) lines.push('page console errors:', ...r.consoleErrors.slice(-10).map((l) => `  ${l}`));
  if (r.relayLog) lines.push('relay log tail:', ...r.relayLog.split('\n').slice(-10).map((l) => `  ${l}`));
  lines.push(`replay: ${r.replay}`);
  return lines.join('\n');
}
