// The listener checks the end-to-end tests run inside the browser (a page or a worker): a
// query listener that keeps its list only from docChanges(), as an app would, and checks it
// against snapshot.docs after every snapshot, and a document listener that checks each
// snapshot's existence, data and metadata against the one before. The harness installs them
// in pages (`installTracker`); worker.js imports them. Every tracker made is kept in
// `scope.trackers`, so a test can assert at its end that none found an error.
//
// Two kinds of finding: `errors` break what DESIGN.md promises of every snapshot (the replay
// gives snapshot.docs; metadata agrees with the documents; `exists` agrees with the data);
// `deviations` break Firestore's rules for when a snapshot or a change is raised at all
// (without includeMetadataChanges only for a change of the data, a `modified` only for a
// document whose data changed).

/** Installs `track(query, options?, next?)` and `trackDoc(ref, options?, next?)` in `scope`.
 *  Each registers a listener (`onSnapshot(options, onSnap, onError)`, or `onSnapshot(onSnap,
 *  onError)` without options), checks every snapshot, then calls `next(snapshot)` if given.
 *  A tracker has `snaps` (for a query `{ changes: ['added id', ...], ids, pending, cache }`,
 *  for a document `{ exists, data, pending, cache }`), `errors` (every check that failed,
 *  with the snapshot's number; a listen error reported to the error callback is one too),
 *  `deviations` (from Firestore's raising rules), `what` (names it in messages) and `stop()`. */
export function install(scope) {
  scope.trackers = [];
  // Data as text, for comparing: Bytes and references (wasm objects, no toJSON) by value.
  const json = (v) => JSON.stringify(v, (_, x) => {
    if (x && typeof x === 'object' && typeof x.toBase64 === 'function') return `Bytes(${x.toBase64()})`;
    if (x && typeof x === 'object' && x.__hearthKind === 'reference') return `ref(${x.path})`;
    return x;
  });

  /** A tracker's shared parts: its records and the listener registration. */
  const register = (target, what, options, check, next) => {
    const t = { what, snaps: [], errors: [], deviations: [], metadataChanges: !!options?.includeMetadataChanges };
    const onSnap = (s) => {
      const fail = (m) => t.errors.push(`snapshot ${t.snaps.length}: ${m}`);
      const deviate = (m) => t.deviations.push(`snapshot ${t.snaps.length}: ${m}`);
      check(t, s, fail, deviate);
      if (next) next(s);
    };
    const onError = (e) => t.errors.push(`listen error ${e?.code}: ${e?.message}`);
    t.stop = options ? target.onSnapshot(options, onSnap, onError) : target.onSnapshot(onSnap, onError);
    scope.trackers.push(t);
    return t;
  };

  scope.track = (query, options, next) => register(query, 'query', options, (t, s, fail, deviate) => {
    t.list ??= [];
    const changes = s.docChanges();
    for (const c of changes) {
      const id = c.doc.id;
      const data = json(c.doc.data());
      if (c.type === 'added') {
        if (c.oldIndex !== -1) fail(`added ${id} with oldIndex ${c.oldIndex}`);
      } else if (t.list[c.oldIndex]?.id !== id) {
        fail(`${c.type} ${id}: oldIndex ${c.oldIndex} holds ${t.list[c.oldIndex]?.id}`);
      } else {
        // Without includeMetadataChanges a change is a change of the document itself.
        if (c.type === 'modified' && !t.metadataChanges && t.list[c.oldIndex].data === data) {
          deviate(`modified ${id} without a change of its data`);
        }
        t.list.splice(c.oldIndex, 1);
      }
      if (c.type === 'removed') {
        if (c.newIndex !== -1) fail(`removed ${id} with newIndex ${c.newIndex}`);
      } else if (c.newIndex < 0 || c.newIndex > t.list.length) {
        fail(`${c.type} ${id}: newIndex ${c.newIndex} outside 0..${t.list.length}`);
      } else {
        t.list.splice(c.newIndex, 0, { id, data });
      }
    }
    const docs = s.docs.map((d) => ({ id: d.id, data: json(d.data()) }));
    if (json(docs) !== json(t.list)) {
      fail(`replayed ${json(t.list.map((d) => d.id))}, docs ${json(docs.map((d) => d.id))}`);
      t.list = docs;
    }
    // The snapshot's metadata sums up its documents' (Firestore: hasPendingWrites is whether
    // any document in the result has local writes; every document shares fromCache).
    const { hasPendingWrites: pending, fromCache: cache } = s.metadata;
    if (s.docs.some((d) => d.metadata.hasPendingWrites) !== pending) fail(`hasPendingWrites ${pending} disagrees with its documents`);
    if (s.docs.some((d) => d.metadata.fromCache !== cache)) fail(`a document's fromCache differs from the snapshot's ${cache}`);
    if (s.size !== docs.length || s.empty !== (docs.length === 0)) fail(`size ${s.size} / empty ${s.empty} with ${docs.length} documents`);
    // After the first, a snapshot is raised for a change: of a document, or (only when asked
    // for) of the metadata.
    const prev = t.snaps.at(-1);
    if (prev && changes.length === 0 && (!t.metadataChanges || (prev.pending === pending && prev.cache === cache))) {
      deviate('a snapshot without any change');
    }
    t.snaps.push({ changes: changes.map((c) => `${c.type} ${c.doc.id}`), ids: docs.map((d) => d.id), pending, cache });
  }, next);

  scope.trackDoc = (ref, options, next) => register(ref, `document ${ref.path}`, options, (t, s, fail, deviate) => {
    const data = s.data();
    const snap = { exists: s.exists, data: data === undefined ? undefined : json(data),
      pending: s.metadata.hasPendingWrites, cache: s.metadata.fromCache };
    if (s.exists !== (data !== undefined)) fail(`exists ${s.exists} with data ${snap.data}`);
    if (s.id !== ref.id || s.ref.path !== ref.path) fail(`snapshot of ${s.ref.path} (id ${s.id})`);
    const prev = t.snaps.at(-1);
    if (prev && prev.exists === snap.exists && prev.data === snap.data
      && (!t.metadataChanges || (prev.pending === snap.pending && prev.cache === snap.cache))) {
      deviate('a snapshot without any change');
    }
    t.snaps.push(snap);
  }, next);
}
