// The model test's reference model: what the relay's final state must be, given the
// schedule and how each write settled. Concurrent clients make the final value of a
// document depend on the relay's order of commits, which the clients cannot see; so the
// model checks what every order allowed by the contract has in common:
// - counters equal the increments issued (none can be refused; lost promises still land);
// - each transaction document has `n` equal to its number of `done` marks, holds every
//   transaction that resolved and none refused for a definite reason (`unavailable`, or a
//   promise lost to a reload, may go either way);
// - a document's `w` names its last writer W: a write to it that was not refused, whose own
//   fields it shows, and after which its client made no write to it that applied (each
//   client's writes apply in the order it issued them; transactions are outside that order);
//   an absent document that some applied write created was deleted by some write;
// - the members of a group are identical or all absent;
// - every query's result from the relay equals the reference semantics over the relay's
//   documents.
import { ALL_QUERIES, GROUPS } from './schema.mjs';
import { canonical, evaluate } from './semantics.mjs';

/** Outcomes that leave a write's fate open: a transaction cut off from the relay, or a
 *  promise lost when its page reloaded. */
const UNKNOWN = new Set(['unavailable', 'lost']);

/** Whether a write op could be refused by the relay: only `update` of an item (the
 *  document may not exist when it applies). Counter documents always exist. */
export const mayRefuse = (op) => op.kind !== 'tx' && op.writes.some((w) => w.how === 'update' && w.path.startsWith('items/'));

/** 'applied', 'refused' or 'unknown' for a write op with `outcome`. */
function fate(op, outcome) {
  if (outcome === 'ok') return 'applied';
  if (outcome === 'lost') return op.kind !== 'tx' && !mayRefuse(op) ? 'applied' : 'unknown';
  if (UNKNOWN.has(outcome)) return 'unknown';
  return 'refused';
}

const isSentinel = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The checks above; `server` is `{ queries: { name: [{ id, data (canonical text) }] } }`
 *  as a fresh client read them from the relay. Returns failure messages. */
export function checkModel({ ops, outcomes, server }) {
  const failures = [];
  const writes = ops.filter((op) => op.tag);
  const parse = (docs) => docs.map((d) => ({ id: d.id, data: JSON.parse(d.data) }));
  const items = parse(server.queries.all);
  const byId = (docs, id) => docs.find((d) => d.id === id);

  for (const op of writes) {
    if (outcomes[op.tag] === undefined) failures.push(`write ${op.tag} (client ${op.c}) never settled`);
  }

  // Counters.
  const counters = parse(server.queries.counters);
  const expected = {};
  for (const op of writes) {
    for (const w of op.writes) {
      if (!w.path.startsWith('counters/')) continue;
      if (fate(op, outcomes[op.tag]) !== 'applied') failures.push(`increment ${op.tag} (client ${op.c}) was refused: ${outcomes[op.tag]}`);
      const id = w.path.split('/')[1];
      expected[id] = (expected[id] ?? 0) + w.data.n.$inc;
    }
  }
  for (const [id, n] of Object.entries(expected)) {
    const got = byId(counters, id)?.data.n;
    if (got !== n) failures.push(`counter ${id}: n is ${got}, the increments issued sum to ${n}`);
  }

  // Transactions.
  const txns = parse(server.queries.txn);
  const txOps = writes.filter((op) => op.kind === 'tx');
  for (const d of txns) {
    const done = Object.keys(d.data.done ?? {});
    if (d.data.n !== done.length) failures.push(`txn/${d.id}: n is ${d.data.n} but ${done.length} transactions are marked done`);
    for (const txid of done) {
      if (!txOps.some((op) => op.txid === txid && op.txdoc === d.id)) failures.push(`txn/${d.id}: done.${txid} names no transaction on it`);
    }
  }
  for (const op of txOps) {
    const doneHere = !!byId(txns, op.txdoc)?.data.done?.[op.txid];
    const f = fate(op, outcomes[op.tag]);
    if (f === 'applied' && !doneHere) failures.push(`transaction ${op.tag} (client ${op.c}) resolved but txn/${op.txdoc} lacks done.${op.txid}`);
    if (f === 'refused' && doneHere) failures.push(`transaction ${op.tag} (client ${op.c}) was refused (${outcomes[op.tag]}) but applied: txn/${op.txdoc} has done.${op.txid}`);
  }

  // Last writers of items.
  const touching = {};
  for (const op of writes) {
    const ws = [...op.writes];
    if (op.kind === 'tx' && op.item) ws.push({ path: `items/${op.item}`, how: 'update', data: { w: op.tag }, conditional: true });
    for (const w of ws) if (w.path.startsWith('items/')) (touching[w.path] ??= []).push({ op, w });
  }
  for (const [path, list] of Object.entries(touching)) {
    const id = path.split('/')[1];
    const doc = byId(items, id);
    if (!doc) {
      const created = list.some(({ op, w }) => w.how !== 'delete' && !w.conditional && fate(op, outcomes[op.tag]) === 'applied');
      const deleted = list.some(({ op, w }) => w.how === 'delete' && fate(op, outcomes[op.tag]) !== 'refused');
      if (created && !deleted) failures.push(`${path} is absent, but applied writes created it and no write deleted it`);
      continue;
    }
    const last = list.find(({ op, w }) => op.tag === doc.data.w && w.how !== 'delete');
    if (!last) { failures.push(`${path} has w=${doc.data.w}, which names no write of it: ${canonical(doc.data)}`); continue; }
    const { op, w } = last;
    const f = fate(op, outcomes[op.tag]);
    if (f === 'refused') failures.push(`${path} shows ${op.tag} (client ${op.c}), which was refused (${outcomes[op.tag]}): ${canonical(doc.data)}`);
    if (op.kind !== 'tx') {
      const later = list.find((x) => x.op.c === op.c && x.op.i > op.i && x.op.kind !== 'tx'
        && fate(x.op, outcomes[x.op.tag]) === 'applied');
      if (later) failures.push(`${path} shows ${op.tag} of client ${op.c}, but that client's later ${later.op.tag} (${later.w.how}) of it applied: writes out of order or lost`);
    }
    const want = w.how === 'set' ? w.data : null;
    if (want && canonical(want) !== canonical(doc.data)) {
      failures.push(`${path}: set by ${op.tag} to ${canonical(want)} but is ${canonical(doc.data)}`);
    }
    if (!want) {
      for (const [k, v] of Object.entries(w.data)) {
        if (isSentinel(v) && v.$del && k in doc.data) failures.push(`${path}: ${op.tag} deleted ${k} but it is ${canonical(doc.data[k])}`);
        if (!isSentinel(v) && canonical(v) !== canonical(doc.data[k])) {
          failures.push(`${path}: ${op.tag} wrote ${k}=${canonical(v)} but it is ${canonical(doc.data[k])}`);
        }
      }
    }
  }

  // Groups.
  for (const [g, ids] of Object.entries(GROUPS)) {
    const shown = ids.map((id) => byId(items, id));
    const texts = new Set(shown.map((d) => (d ? canonical(d.data) : 'absent')));
    if (texts.size > 1) failures.push(`group ${g} differs at the relay: ${ids.map((id, k) => `${id}=${shown[k] ? canonical(shown[k].data) : 'absent'}`).join(' ')}`);
  }

  // Query results against the reference semantics.
  const collections = { items, counters, txn: txns };
  for (const [name, spec] of Object.entries(ALL_QUERIES)) {
    const want = evaluate(spec, collections[spec.coll]).map((d) => d.id);
    const got = server.queries[name].map((d) => d.id);
    if (want.join() !== got.join()) failures.push(`query ${name} at the relay gives [${got}], the reference semantics [${want}]`);
  }
  return failures;
}
