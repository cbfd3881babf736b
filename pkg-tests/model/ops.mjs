// The model test's schedule: from a seed, the listeners each client keeps and the sequence
// of operations (writes, batches, transactions, offline spells, reloads, tab crashes,
// browser-process kills, relay crashes). It is a pure function of (seed, ops, clients, tabs,
// skip), so a run is replayed from those alone; only the timing of acknowledgements and
// snapshots differs between runs.
//
// A client is a tab: `clients` browser profiles with `tabs` tabs each (one origin, so the
// tabs of a profile share one engine). Client c is tab c % tabs of profile
// floor(c / tabs); going offline and a browser kill take a whole profile.
import { prng } from './prng.mjs';
import { COUNTERS, DOC_LISTENERS, GROUPS, ITEM_QUERIES, KEYS, STRINGS, TAGS, TXN_DOCS } from './schema.mjs';

/** Operation kinds and their weights; `--skip` takes these names, and listener names (the
 *  keys of ITEM_QUERIES, `counters`, `txn`, and the paths of DOC_LISTENERS). */
export const WEIGHTS = {
  set: 10, merge: 8, update: 8, delete: 3, incr: 8, batch: 7, tx: 5,
  pause: 4, net: 2, offline: 1.5, reload: 1.2, kill: 0.7, crash: 0.8, kill9: 0.4, ballast: 1,
};

/** The listeners of client `c`: most query kinds on every client, some with metadata. The
 *  last client keeps no whole-collection listener on items and none on counters, so its
 *  updates there are writes to documents it never read. */
function listenersFor(r, c, clients, skip) {
  const blind = c === clients - 1;
  const out = {};
  const keep = () => Object.fromEntries(Object.entries(out).filter(([name]) => !skip.includes(name)));
  for (const q of Object.keys(ITEM_QUERIES)) {
    if (q === 'all' ? blind : !r.chance(0.8)) continue;
    out[q] = { query: q, meta: r.chance(0.35) };
  }
  if (!blind && r.chance(0.7)) out.counters = { query: 'counters', meta: r.chance(0.35) };
  if (r.chance(0.7)) out.txn = { query: 'txn', meta: r.chance(0.35) };
  for (const path of DOC_LISTENERS) {
    if (blind && path.startsWith('counters/')) continue;
    if (r.chance(0.6)) out[path] = { path, meta: r.chance(0.35) };
  }
  return keep();
}

const rankValue = (r) => {
  const x = r.next();
  if (x < 0.05) return null;
  if (x < 0.08) return 'r';
  return r.int(0, 9);
};

/** A full document for `set`: `rank` sometimes absent (then ordered queries drop it). */
const fullData = (r, tag) => {
  const d = { s: r.pick(STRINGS), tags: r.subset(TAGS), w: tag };
  if (!r.chance(0.05)) d.rank = rankValue(r);
  return d;
};

/** Fields for `set(merge)` or `update`, with transforms and field deletes. */
const partialData = (r, tag) => {
  const d = { w: tag };
  const fields = r.subset(['rank', 's', 'tags'], 0.6);
  if (fields.length === 0) fields.push(r.pick(['rank', 's', 'tags']));
  for (const f of fields) {
    const x = r.next();
    if (f === 'rank') d.rank = x < 0.5 ? rankValue(r) : x < 0.85 ? { $inc: r.int(1, 2) } : { $del: true };
    if (f === 's') d.s = x < 0.75 ? r.pick(STRINGS) : { $del: true };
    if (f === 'tags') d.tags = x < 0.5 ? r.subset(TAGS) : x < 0.75 ? { $union: [r.pick(TAGS)] } : { $remove: [r.pick(TAGS)] };
  }
  return d;
};

const itemWrite = (r, how, key, tag) => {
  const path = `items/${key}`;
  if (how === 'delete') return { path, how };
  return { path, how, data: how === 'set' ? fullData(r, tag) : partialData(r, tag) };
};

/** Writes giving every member of group `g` the same data (set, merge with an increment, or
 *  delete). */
const groupWrites = (r, g, tag) => {
  const x = r.next();
  const how = x < 0.5 ? 'set' : x < 0.8 ? 'merge' : 'delete';
  const data = how === 'set' ? { rank: r.int(0, 9), s: r.pick(STRINGS), tags: r.subset(TAGS), w: tag }
    : how === 'merge' ? { v: { $inc: 1 }, rank: r.int(0, 9), w: tag } : undefined;
  return GROUPS[g].map((id) => ({ path: `items/${id}`, how, data }));
};

const counterWrite = (r, counter) => {
  const how = r.chance(0.5) ? 'update' : 'merge';
  return { path: `counters/${counter}`, how, data: { n: { $inc: r.int(1, 3) } } };
};

/** A batch of 2 to 4 parts on distinct documents: item writes, group writes, counter
 *  increments. A batch with an increment has no item update, so it cannot be refused and
 *  its increments must land. */
const batchWrites = (r, tag) => {
  const withCounter = r.chance(0.4);
  const keys = [...KEYS];
  const groups = Object.keys(GROUPS);
  const counters = [...COUNTERS];
  const take = (list) => list.splice(Math.floor(r.next() * list.length), 1)[0];
  const writes = [];
  const parts = r.int(2, 4);
  for (let i = 0; i < parts; i++) {
    const x = r.next();
    if (withCounter && (i === 0 || x < 0.25) && counters.length) writes.push(counterWrite(r, take(counters)));
    else if (x < 0.55 || !groups.length) {
      const hows = withCounter ? ['set', 'merge', 'delete'] : ['set', 'merge', 'update', 'delete'];
      writes.push(itemWrite(r, r.pick(hows), take(keys), tag));
    } else writes.push(...groupWrites(r, take(groups), tag));
  }
  return writes;
};

/** The schedule of seed `seed`: `{ listeners: [per client], ops: [...] }`, for `clients`
 *  profiles of `tabs` tabs each (`listeners` and an op's `c` count tabs; `p` is a
 *  profile). */
export function schedule({ seed, ops, clients: profiles, tabs = 1, skip = [] }) {
  const clients = profiles * tabs;
  const profileOf = (c) => Math.floor(c / tabs);
  const r = prng(seed);
  const weights = { ...WEIGHTS };
  const listenerNames = [...Object.keys(ITEM_QUERIES), 'counters', 'txn', ...DOC_LISTENERS];
  for (const k of skip) {
    if (k in weights) weights[k] = 0;
    else if (!listenerNames.includes(k)) throw new Error(`unknown --skip ${k}: one of ${[...Object.keys(WEIGHTS), ...listenerNames].join(', ')}`);
  }
  // Listeners are drawn whatever is skipped, so skipping one leaves the schedule unchanged.
  const listeners = Array.from({ length: clients }, (_, c) => listenersFor(r, c, clients, skip));
  const disabled = new Set();
  const offline = new Set();
  let relayUp = true;
  let restartAt = 0;
  const out = [];
  for (let i = 0; i < ops; i++) {
    const tag = `o${i}`;
    if (!relayUp && i >= restartAt) {
      relayUp = true;
      out.push({ i, kind: 'restart' });
      continue;
    }
    const kind = r.weighted({ ...weights,
      // Spells end sooner than they start, so clients are mostly online.
      net: weights.net && weights.net * (1 + 2 * disabled.size),
      offline: weights.offline && weights.offline * (1 + 2 * offline.size),
      kill: relayUp ? weights.kill : 0 });
    const c = r.int(0, clients - 1);
    if (kind === 'pause') out.push({ i, kind, ms: r.int(20, 300) });
    // A large document no listener watches: the cache (1 MiB) overflows and is collected.
    else if (kind === 'ballast') out.push({ i, c, kind, path: `ballast/b${r.int(0, 5)}`, kb: r.int(150, 400) });
    else if (kind === 'kill') {
      relayUp = false;
      restartAt = i + r.int(3, 15);
      out.push({ i, kind });
    } else if (kind === 'net') {
      const on = disabled.has(c);
      if (on) disabled.delete(c); else disabled.add(c);
      out.push({ i, c, kind, on });
    } else if (kind === 'offline') {
      const p = profileOf(c);
      const on = offline.has(p);
      if (on) offline.delete(p); else offline.add(p);
      out.push({ i, c, p, kind, on });
    } else if (kind === 'reload' || kind === 'crash') {
      // A page cannot load while its browser is offline: reload a client that is not.
      const candidates = Array.from({ length: clients }, (_, k) => k).filter((k) => !offline.has(profileOf(k)));
      if (candidates.length === 0) { out.push({ i, kind: 'pause', ms: 50 }); continue; }
      const k = r.pick(candidates);
      // The new page's database starts with its network enabled.
      disabled.delete(k);
      out.push({ i, c: k, kind });
    } else if (kind === 'kill9') {
      const candidates = Array.from({ length: profiles }, (_, k) => k).filter((k) => !offline.has(k));
      if (candidates.length === 0) { out.push({ i, kind: 'pause', ms: 50 }); continue; }
      const p = r.pick(candidates);
      for (let k = p * tabs; k < (p + 1) * tabs; k++) disabled.delete(k);
      out.push({ i, p, kind });
    } else if (kind === 'incr') {
      out.push({ i, c, kind: 'write', what: kind, tag, writes: [counterWrite(r, r.pick(COUNTERS))] });
    } else if (kind === 'batch') {
      out.push({ i, c, kind: 'batch', tag, writes: batchWrites(r, tag) });
    } else if (kind === 'tx') {
      const item = r.chance(0.3) ? r.pick(KEYS) : null;
      const group = r.chance(0.25) ? r.pick(Object.keys(GROUPS)) : null;
      out.push({ i, c, kind, tag, txid: `x${i}`, txdoc: r.pick(TXN_DOCS), item,
        writes: group ? groupWrites(r, group, tag).filter((w) => w.how !== 'delete') : [] });
    } else {
      out.push({ i, c, kind: 'write', what: kind, tag, writes: [itemWrite(r, kind, r.pick(KEYS), tag)] });
    }
  }
  return { listeners, ops: out };
}
