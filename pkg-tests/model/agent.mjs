// The model test's agent inside each client page (window.agent): opens the database, keeps
// listeners of every query kind and checks each of their snapshots as it arrives, issues the
// writes, batches and transactions the Node runner sends (without awaiting them: many are in
// flight at once) and records how each settled, and reads the state compared at quiescence.
import { ALL_QUERIES, DOC_LISTENERS, GROUP_OF, GROUPS, MONOTONIC } from './schema.mjs';
import { canonical, compareDocs, matches, unbounded } from './semantics.mjs';

/** Installs `win.agent` over the package's exports `hearth`. */
export function installAgent(win, hearth) {
  const { Hearth, FieldValue } = hearth;
  const agent = {
    db: null,
    client: -1,
    /** Listener name -> tracker (see `track`). */
    trackers: {},
    /** Check failures not yet reported to Node. */
    errors: [],
    /** Tag -> outcome ('ok' or the error's code) of writes settled since the last drain. */
    settled: {},
    /** Tags of writes and transactions issued and not settled. */
    inflight: new Map(),
    /** Whether this client listens to the whole `items` collection. Only then does its
     *  cache know every member of a group or none: a client that caches some members (a
     *  limited query's window) applies its own merge to an unknown base for the others, so
     *  its local view may legitimately show a group's members different until the relay
     *  answers, as Firestore's does. Group checks run only on clients that know the whole
     *  collection. */
    knowsItems: false,
  };
  win.agent = agent;

  /** Failures per listener: after a few, one listener's repeats would drown the rest. */
  const counts = {};
  const fail = (where, message, key = where) => {
    counts[key] = (counts[key] ?? 0) + 1;
    if (counts[key] <= 3) agent.errors.push(`client ${agent.client} ${where}: ${message}`);
    else if (counts[key] === 4) agent.errors.push(`client ${agent.client} ${key}: further failures of this listener not shown`);
  };
  const failOf = (t, where, message) => {
    // Beside the sync layer's trace (HEARTH_MODEL_TRACE_DIR), when tracing.
    if (globalThis.__HEARTH_DEBUG__) console.debug(`model-check ${t.name}: ${where}: ${message}`);
    fail(where, message, t.name);
  };

  /** A write's JSON data, with sentinels ({ $inc }, { $del }, { $union }, { $remove }) made
   *  FieldValues. */
  const toValue = (v) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    if ('$inc' in v) return FieldValue.increment(v.$inc);
    if ('$del' in v) return FieldValue.delete();
    if ('$union' in v) return FieldValue.arrayUnion(...v.$union);
    if ('$remove' in v) return FieldValue.arrayRemove(...v.$remove);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toValue(x)]));
  };

  /** The Hearth query of a spec (schema.mjs). */
  const buildQuery = (spec) => {
    let q = agent.db.collection(spec.coll);
    for (const [f, op, v] of spec.where ?? []) q = q.where(f, op, v);
    for (const [f, d] of spec.orderBy ?? []) q = q.orderBy(f, d);
    for (const k of ['startAt', 'startAfter', 'endAt', 'endBefore']) if (spec[k]) q = q[k](...spec[k]);
    if (spec.offset !== undefined) q = q.offset(spec.offset);
    if (spec.limit !== undefined) q = q.limit(spec.limit);
    if (spec.limitToLast !== undefined) q = q.limitToLast(spec.limitToLast);
    return q;
  };

  const plain = (d) => ({ id: d.id, data: d.data() });
  const text = (docs) => docs.map((d) => ({ id: d.id, data: canonical(d.data) }));

  /** The checks every query snapshot must pass: its docChanges() replay onto the previous
   *  list gives exactly its docs; its docs match the spec, in order, within the limit; the
   *  visible members of a group are identical (and whole, for an unbounded query); counters
   *  and transaction documents never go back. */
  const checkQuery = (t, s) => {
    const n = t.snaps++;
    const where = `${t.name} snapshot ${n}`;
    const changes = s.docChanges();
    const log = [];
    for (const c of changes) {
      const id = c.doc.id;
      log.push(`${c.type} ${id} ${c.oldIndex}->${c.newIndex}`);
      if (c.type === 'added') {
        if (c.oldIndex !== -1) failOf(t, where, `added ${id} with oldIndex ${c.oldIndex}`);
      } else if (t.list[c.oldIndex]?.id !== id) {
        failOf(t, where, `${c.type} ${id}: oldIndex ${c.oldIndex} holds ${t.list[c.oldIndex]?.id} in ${JSON.stringify(t.list.map((d) => d.id))}`);
      } else {
        t.list.splice(c.oldIndex, 1);
      }
      if (c.type === 'removed') {
        if (c.newIndex !== -1) failOf(t, where, `removed ${id} with newIndex ${c.newIndex}`);
      } else if (c.newIndex < 0 || c.newIndex > t.list.length) {
        failOf(t, where, `${c.type} ${id}: newIndex ${c.newIndex} outside 0..${t.list.length}`);
      } else {
        t.list.splice(c.newIndex, 0, { id, data: canonical(c.doc.data()) });
      }
    }
    const docs = s.docs.map(plain);
    const shown = text(docs);
    if (globalThis.__HEARTH_DEBUG__) {
      console.debug(`model-snap ${t.name} ${s.metadata.fromCache ? 'cache' : 'server'}: ${shown.map((d) => `${d.id}:${JSON.parse(d.data).w ?? ''}`).join(' ')}`);
    }
    if (JSON.stringify(shown) !== JSON.stringify(t.list)) {
      failOf(t, where, `docChanges [${log.join(', ')}] replay to ${JSON.stringify(t.list)}, docs are ${JSON.stringify(shown)}`);
    }
    t.list = shown;
    const spec = t.spec;
    const cap = spec.limit ?? spec.limitToLast;
    if (cap !== undefined && docs.length > cap) failOf(t, where, `${docs.length} documents over the limit ${cap}`);
    docs.forEach((d, i) => {
      if (!matches(spec, d)) failOf(t, where, `${d.id} ${canonical(d.data)} does not match the query`);
      if (i > 0 && compareDocs(spec, docs[i - 1], d) >= 0) {
        failOf(t, where, `${docs[i - 1].id} ${canonical(docs[i - 1].data)} is before ${d.id} ${canonical(d.data)} out of query order`);
      }
    });
    if (agent.knowsItems) checkGroups(t, where, spec, shown);
    if (MONOTONIC.has(spec.coll)) for (const d of docs) checkGrowth(t, where, d.id, d.data);
    t.last = { docs: shown, fromCache: s.metadata.fromCache, pending: s.metadata.hasPendingWrites };
  };

  const checkGroups = (t, where, spec, shown) => {
    const seen = {};
    for (const d of shown) {
      const g = GROUP_OF[d.id];
      if (!g) continue;
      if (seen[g] !== undefined && seen[g].data !== d.data) {
        failOf(t, where, `group ${g} mixes versions: ${seen[g].id} ${seen[g].data}, ${d.id} ${d.data}`);
      }
      seen[g] ??= d;
    }
    if (!unbounded(spec)) return;
    for (const g of Object.keys(seen)) {
      const present = GROUPS[g].filter((id) => shown.some((d) => d.id === id));
      if (present.length !== GROUPS[g].length) {
        failOf(t, where, `group ${g} shown in part: ${present.join(',')} of ${GROUPS[g].join(',')}`);
      }
    }
  };

  /** A counter's `n`, or a transaction document's `n` and `done`, never goes back within
   *  one listener: the local view is the relay's state plus pending writes, and neither
   *  loses an increment once shown. */
  const checkGrowth = (t, where, id, data) => {
    const prev = t.growth[id];
    if (prev) {
      if (typeof data.n === 'number' && data.n < prev.n) failOf(t, where, `${id}.n went back from ${prev.n} to ${data.n}`);
      const lost = prev.done.filter((k) => !(k in (data.done ?? {})));
      if (lost.length) failOf(t, where, `${id}.done lost ${lost.join(',')}`);
    }
    t.growth[id] = { n: data.n, done: Object.keys(data.done ?? {}) };
  };

  const checkDocument = (t, s) => {
    const n = t.snaps++;
    const where = `${t.name} snapshot ${n}`;
    const data = s.exists ? s.data() : null;
    if (MONOTONIC.has(t.path.split('/')[0]) && data) checkGrowth(t, where, s.id, data);
    t.last = { doc: data === null ? null : canonical(data), fromCache: s.metadata.fromCache,
      pending: s.metadata.hasPendingWrites };
  };

  /** Starts listener `name` (on `query`, a name of ALL_QUERIES, or on document `path`) and
   *  keeps its checked state in `agent.trackers[name]`. */
  const track = (name, { query, path, meta }) => {
    const spec = query ? ALL_QUERIES[query] : null;
    const t = { name, query, spec, path, meta, list: [], snaps: 0, last: null, growth: {} };
    const target = spec ? buildQuery(spec) : agent.db.doc(path);
    const next = (s) => {
      try {
        if (spec) checkQuery(t, s); else checkDocument(t, s);
      } catch (e) {
        fail(`${name} snapshot ${t.snaps}`, `the check threw ${e?.stack ?? e}`);
      }
    };
    const error = (e) => fail(name, `listener failed: ${e?.code} ${e?.message ?? e}`);
    // Listeners live as long as the page: a reload is what ends them.
    if (meta) target.onSnapshot({ includeMetadataChanges: true }, next, error);
    else target.onSnapshot(next, error);
    agent.trackers[name] = t;
  };

  /** Tracks a write's or transaction's promise until it settles, then records how. */
  const issue = (tag, promise) => {
    agent.inflight.set(tag, promise);
    promise.then(() => 'ok', (e) => e?.code ?? `no code: ${e?.message ?? e}`).then((outcome) => {
      agent.inflight.delete(tag);
      agent.settled[tag] = outcome;
    });
  };

  const ref = (path) => agent.db.doc(path);

  /** One document write ({ path, how, data }) through `batch` (a WriteBatch or a
   *  Transaction), or the reference's own methods when it is null (returning the promise). */
  const apply = (batch, w) => {
    const data = w.data === undefined ? undefined : toValue(w.data);
    if (!batch) {
      if (w.how === 'set') return ref(w.path).set(data);
      if (w.how === 'merge') return ref(w.path).set(data, { merge: true });
      if (w.how === 'update') return ref(w.path).update(data);
      return ref(w.path).delete();
    }
    if (w.how === 'set') return batch.set(ref(w.path), data);
    if (w.how === 'merge') return batch.set(ref(w.path), data, { merge: true });
    if (w.how === 'update') return batch.update(ref(w.path), data);
    return batch.delete(ref(w.path));
  };

  /** A transaction: read its transaction document (and an item, to update it from what it
   *  read), then mark itself done there once, with an increment of `n` from the value read. */
  const transaction = (op) => agent.db.runTransaction(async (tx) => {
    const txRef = ref(`txn/${op.txdoc}`);
    const s = await tx.get(txRef);
    const item = op.item ? await tx.get(ref(`items/${op.item}`)) : null;
    if (s.exists) tx.update(txRef, { n: s.data().n + 1, [`done.${op.txid}`]: true });
    else tx.set(txRef, { n: 1, done: { [op.txid]: true } });
    if (item?.exists) {
      const rank = item.data().rank;
      tx.update(ref(`items/${op.item}`), { rank: (typeof rank === 'number' ? rank : 0) + 1, w: op.tag });
    }
    for (const w of op.writes) apply(tx, w);
  });

  /** Opens database `name` on `relay` as client `client` and starts `listeners`
   *  ({ name: { query } or { path }, with `meta` for includeMetadataChanges }). */
  agent.open = async ({ name, relay, client, listeners }) => {
    agent.client = client;
    agent.knowsItems = Object.values(listeners).some((l) => l.query === 'all');
    // The smallest cache budget: the ballast writes make it overflow, so eviction runs.
    agent.db = await Hearth.open({ name, relay, cacheSizeBytes: 1024 * 1024 });
    for (const [n, l] of Object.entries(listeners)) track(n, l);
  };

  /** Runs one operation of the schedule; returns at once (writes settle later). */
  agent.run = (op) => {
    if (op.kind === 'write') issue(op.tag, apply(null, op.writes[0]));
    else if (op.kind === 'batch') {
      const b = agent.db.batch();
      for (const w of op.writes) apply(b, w);
      issue(op.tag, b.commit());
    } else if (op.kind === 'tx') issue(op.tag, transaction(op));
    else if (op.kind === 'net') return op.on ? agent.db.enableNetwork() : agent.db.disableNetwork();
    else if (op.kind === 'ballast') agent.db.doc(op.path).set({ blob: 'x'.repeat(op.kb * 1024) }).catch(() => {});
    else throw new Error(`the agent does not run ${op.kind}`);
    return undefined;
  };

  /** What happened since the last drain: check failures, settled writes, and the tags
   *  still in flight. */
  agent.drain = () => {
    const out = { errors: agent.errors, settled: agent.settled, inflight: [...agent.inflight.keys()] };
    agent.errors = [];
    agent.settled = {};
    return out;
  };

  /** Writes `barrier/c<client>` = seq and waits until a cache read shows it: local writes
   *  are applied in call order, so every write issued before is then durable in IndexedDB. */
  agent.barrier = async (seq) => {
    const r = ref(`barrier/c${agent.client}`);
    issue(`barrier-${seq}`, r.set({ seq }));
    for (;;) {
      const s = await r.get({ source: 'cache' });
      if (s.exists && s.data().seq === seq) return;
      await new Promise((res) => setTimeout(res, 10));
    }
  };

  /** Waits for waitForPendingWrites() and then for every write and transaction in flight.
   *  Returns the codes waitForPendingWrites() rejected with: Firestore's resolves once the
   *  earlier writes are acknowledged or refused, Hearth's rejects with a refusal's code (the
   *  runner reports it as a note), so it is called again until it resolves. */
  agent.quiesce = async () => {
    const rejected = [];
    for (;;) {
      try {
        await agent.db.waitForPendingWrites();
        break;
      } catch (e) {
        rejected.push(e?.code ?? String(e));
      }
    }
    await Promise.allSettled([...agent.inflight.values()]);
    return rejected;
  };

  /** Adds whole-collection listeners with metadata (a client that lacked them kept no
   *  up-to-date cache), so that cache reads can be compared with the relay. */
  agent.listenWhole = () => {
    for (const coll of ['items', 'counters', 'txn']) {
      if (!agent.trackers[`whole-${coll}`]) track(`whole-${coll}`, { query: coll === 'items' ? 'all' : coll, meta: true });
    }
  };

  /** The state compared at quiescence: every listener's latest result and metadata, and
   *  every spec and document listener path read with `source`. */
  agent.state = async (source) => {
    const listeners = {};
    for (const [n, t] of Object.entries(agent.trackers)) {
      listeners[n] = { query: t.query ?? null, path: t.path ?? null, meta: !!t.meta, last: t.last };
    }
    const queries = {};
    for (const [n, spec] of Object.entries(ALL_QUERIES)) {
      queries[n] = text((await buildQuery(spec).get({ source })).docs.map(plain));
    }
    const docs = {};
    for (const path of DOC_LISTENERS) {
      const s = await ref(path).get({ source });
      docs[path] = s.exists ? canonical(s.data()) : null;
    }
    return { listeners, queries, docs };
  };
}
