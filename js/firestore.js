// `hearth/firestore`: Firestore's modular API (`firebase/firestore`, v9 and later) as free
// functions over Hearth's namespaced classes in ./hearth.js, so a Firestore web app ports by
// changing its imports and its initialization (`openFirestore` for `initializeApp` +
// `getFirestore`).
//
// A thin layer, not a second engine: every read, write and listen is the namespaced API's.
// The modular objects (Firestore, references, queries, snapshots, batches, transactions)
// wrap a namespaced one in `_hearth`/`_ref`/`_query`/`_snap` and add only what Firestore's
// modular shapes have and the namespaced ones lack: `type`, `firestore`, `exists()`, data
// converters, query constraints as values, metadata-only changes left out of
// `docChanges()` unless asked for. What Firestore has and Hearth lacks throws a
// `FirestoreError` with code `unimplemented` naming it.
//
// Tree-shakeable: every export is a declaration, and nothing runs at import.

import init, {
  AggregateField as HearthAggregateField,
  DocumentReference as HearthDocumentReference,
  FieldPath,
  FieldValue,
  Filter,
  Hearth,
} from './hearth.js';

export { Bytes, FieldPath, FieldValue, GeoPoint, SnapshotMetadata, Timestamp } from './hearth.js';

// ---------------------------------------------------------------------------------------
// Errors

/** An error with a stable `code` (`invalid-argument`, `unimplemented`, ...). Every error
 *  Hearth raises passes `instanceof FirestoreError`: it is an `Error` with a string `code`. */
export class FirestoreError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'HearthError';
    this.code = code;
  }

  static [Symbol.hasInstance](value) {
    return value instanceof Error && typeof value.code === 'string';
  }
}

function invalid(message) {
  return new FirestoreError('invalid-argument', message);
}

/** The error of a Firestore function or option Hearth does not have. */
function unimplemented(name, instead) {
  const hint = instead ? `: ${instead}` : '';
  return new FirestoreError('unimplemented', `${name} is not implemented by Hearth${hint}`);
}

/** Hints in `unimplemented` errors: what Hearth does instead. */
const OPEN = 'open the database with `await openFirestore({ name, relay })`';
const IDB = 'Hearth always persists to IndexedDB, one engine shared by the tabs of an origin';
const BUDGET = 'bound the cache with openFirestore({ cacheSizeBytes })';

function describe(value) {
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'object') return value.constructor?.name ? `a ${value.constructor.name}` : 'an object';
  return `${typeof value} ${JSON.stringify(value)}`;
}

// ---------------------------------------------------------------------------------------
// The database

/** Firestore's settings that have no Hearth counterpart, refused by `openFirestore`. */
const FIRESTORE_ONLY_SETTINGS = ['localCache', 'ignoreUndefinedProperties', 'host', 'ssl',
  'experimentalForceLongPolling', 'experimentalAutoDetectLongPolling', 'experimentalLongPollingOptions'];

/** An open Hearth database, in the place of Firestore's `Firestore` instance. */
export class Firestore {
  constructor(hearth, name) {
    this.type = 'firestore';
    /** The namespaced handle (`setToken`, `cacheSizeBytes`, `isLeader`, ...). */
    this._hearth = hearth;
    this._name = name;
    this.app = { name, options: {} };
  }

  /** The namespaced `Hearth` handle of the same database. */
  get hearth() {
    return this._hearth;
  }

  toJSON() {
    return { app: this.app, databaseId: this._name, settings: {} };
  }
}

/** Hearth's initializer, for `initializeApp` + `getFirestore`/`initializeFirestore`: opens
 *  database `name` with `Hearth.open`'s options (`relay`, `token`, `indexes`,
 *  `cacheSizeBytes`), first loading the WebAssembly module (from `wasm` if given, a URL or
 *  module as the package's `init()` takes, else beside this file) unless already loaded. */
export async function openFirestore(options) {
  if (options === null || typeof options !== 'object') {
    throw invalid('openFirestore() takes { name, relay?, token?, indexes?, cacheSizeBytes?, wasm? }');
  }
  const { wasm, ...open } = options;
  const unsupported = FIRESTORE_ONLY_SETTINGS.find((k) => k in open);
  if (unsupported) {
    throw unimplemented(`the Firestore setting \`${unsupported}\``, unsupported === 'localCache' ? IDB : undefined);
  }
  await init(wasm === undefined ? undefined : { module_or_path: wasm });
  return new Firestore(await Hearth.open(open), open.name);
}

function firestoreOf(db, fn) {
  if (db instanceof Firestore) return db;
  throw invalid(`${fn}() takes the Firestore that openFirestore() gave, not ${describe(db)}`);
}

export function enableNetwork(db) {
  return firestoreOf(db, 'enableNetwork')._hearth.enableNetwork();
}

export function disableNetwork(db) {
  return firestoreOf(db, 'disableNetwork')._hearth.disableNetwork();
}

/** Resolves when every write made before the call is acknowledged by the relay. */
export function waitForPendingWrites(db) {
  return firestoreOf(db, 'waitForPendingWrites')._hearth.waitForPendingWrites();
}

/** Closes the database; pending writes stay queued for the next open. */
export function terminate(db) {
  return firestoreOf(db, 'terminate')._hearth.close();
}

/** Deletes the local data of the database (after `terminate`, in every tab). */
export function clearIndexedDbPersistence(db) {
  return Hearth.clearPersistence(firestoreOf(db, 'clearIndexedDbPersistence')._name);
}

/** `-1`: `cacheSizeBytes` without a limit. */
export const CACHE_SIZE_UNLIMITED = -1;

// ---------------------------------------------------------------------------------------
// References and queries

/** A query over a collection or a collection group. */
export class Query {
  constructor(firestore, query, converter) {
    this.type = 'query';
    this.firestore = firestore;
    this.converter = converter ?? null;
    this._query = query;
  }

  withConverter(converter) {
    return new Query(this.firestore, this._query, converter);
  }
}

/** A collection: a query over its documents, with an id, a path and a parent. */
export class CollectionReference extends Query {
  constructor(firestore, collection, converter) {
    super(firestore, collection, converter);
    this.type = 'collection';
  }

  get id() {
    return this._query.id;
  }

  get path() {
    return this._query.path;
  }

  /** The document holding this sub-collection, or `null` for a top-level collection. */
  get parent() {
    const parent = this._query.parent;
    return parent ? new DocumentReference(this.firestore, parent, null) : null;
  }

  withConverter(converter) {
    return new CollectionReference(this.firestore, this._query, converter);
  }
}

/** A document's location. Stored in data, it is a reference value. */
export class DocumentReference {
  constructor(firestore, ref, converter) {
    this.type = 'document';
    this.firestore = firestore;
    this.converter = converter ?? null;
    this._ref = ref;
  }

  get id() {
    return this._ref.id;
  }

  get path() {
    return this._ref.path;
  }

  get parent() {
    return new CollectionReference(this.firestore, this._ref.parent, this.converter);
  }

  /** How Hearth's value conversion recognises a reference (read with `path`). */
  get __hearthKind() {
    return 'reference';
  }

  withConverter(converter) {
    return new DocumentReference(this.firestore, this._ref, converter);
  }

  toJSON() {
    return { type: 'firestore/documentReference/1.0', referencePath: this.path };
  }
}

/** The slash-separated path of `path` and `segments`, as Firestore reads it: leading and
 *  trailing slashes dropped, an empty segment refused. */
function joinPath(fn, path, segments) {
  const parts = [];
  for (const p of [path, ...segments]) {
    if (typeof p !== 'string' || p === '') {
      throw invalid(`${fn}(): each path segment is a non-empty string, not ${describe(p)}`);
    }
    if (p.includes('//')) throw invalid(`the path ${p} has an empty segment (//)`);
    parts.push(...p.split('/').filter((s) => s !== ''));
  }
  return parts.join('/');
}

/** The absolute path under `parent` (a Firestore or a reference) and the Firestore. */
function under(fn, parent, path, segments) {
  const relative = joinPath(fn, path, segments);
  if (parent instanceof Firestore) return [parent, relative];
  if (parent instanceof DocumentReference || parent instanceof CollectionReference) {
    return [parent.firestore, `${parent.path}/${relative}`];
  }
  throw invalid(`${fn}() starts from the Firestore, a CollectionReference or a DocumentReference, not ${describe(parent)}`);
}

/** `collection(db, path, ...segments)`, or relative to a document or collection reference. */
export function collection(parent, path, ...segments) {
  const [db, absolute] = under('collection', parent, path, segments);
  return new CollectionReference(db, db._hearth.collection(absolute), null);
}

/** Every collection named `collectionId`, wherever it is. */
export function collectionGroup(db, collectionId) {
  const fs = firestoreOf(db, 'collectionGroup');
  if (typeof collectionId !== 'string' || collectionId === '' || collectionId.includes('/')) {
    throw invalid(`collectionGroup() takes a collection id without '/', not ${describe(collectionId)}`);
  }
  return new Query(fs, fs._hearth.collectionGroup(collectionId), null);
}

/** `doc(db, path, ...segments)`, relative to a reference, or `doc(collectionRef)`: a new
 *  document with an auto id. A collection's converter goes to its documents. */
export function doc(parent, path, ...segments) {
  if (arguments.length === 1 && parent instanceof CollectionReference) {
    return new DocumentReference(parent.firestore, parent._query.doc(), parent.converter);
  }
  const [db, absolute] = under('doc', parent, path, segments);
  const converter = parent instanceof CollectionReference ? parent.converter : null;
  return new DocumentReference(db, db._hearth.doc(absolute), converter);
}

/** Whether two references name the same place of the same database, with one converter. */
export function refEqual(left, right) {
  const kinds = [DocumentReference, CollectionReference];
  if (!kinds.some((k) => left instanceof k) || !kinds.some((k) => right instanceof k)) return false;
  return left.type === right.type && left.firestore === right.firestore && left.path === right.path
    && left.converter === right.converter;
}

/** Whether two queries are the same query of the same database, with one converter. */
export function queryEqual(left, right) {
  if (!(left instanceof Query) || !(right instanceof Query)) return false;
  if (left.firestore !== right.firestore || left.converter !== right.converter) return false;
  if (left._query.constructor !== right._query.constructor) return false;
  return left._query.isEqual(right._query);
}

function docRefOf(ref, fn, firestore) {
  if (!(ref instanceof DocumentReference)) {
    throw invalid(`${fn}() takes a DocumentReference, not ${describe(ref)}`);
  }
  if (firestore && ref.firestore !== firestore) {
    throw invalid(`${fn}(): the DocumentReference is of another Firestore instance`);
  }
  return ref;
}

function queryOf(query, fn) {
  if (query instanceof Query) return query;
  throw invalid(`${fn}() takes a Query or CollectionReference, not ${describe(query)}`);
}

// ---------------------------------------------------------------------------------------
// Query constraints

/** A part of a query, made by `where`, `orderBy`, `limit`, the cursors, `and` or `or`. */
export class QueryConstraint {
  constructor(type, apply) {
    this.type = type;
    this._apply = apply;
  }
}

export class QueryFieldFilterConstraint extends QueryConstraint {}
export class QueryCompositeFilterConstraint extends QueryConstraint {}
export class QueryOrderByConstraint extends QueryConstraint {}
export class QueryLimitConstraint extends QueryConstraint {}
export class QueryStartAtConstraint extends QueryConstraint {}
export class QueryEndAtConstraint extends QueryConstraint {}

/** `query` with `constraints` applied in order. At most one composite filter (`and`, `or`)
 *  and then no field filter beside it, as Firestore requires. */
export function query(base, ...constraints) {
  let q = queryOf(base, 'query');
  const bad = constraints.find((c) => !(c instanceof QueryConstraint));
  if (bad !== undefined) {
    throw invalid(`query() takes constraints made by where(), orderBy(), limit(), and(), or() and the cursors, not ${describe(bad)}`);
  }
  const composite = constraints.filter((c) => c instanceof QueryCompositeFilterConstraint).length;
  const field = constraints.filter((c) => c instanceof QueryFieldFilterConstraint).length;
  if (composite > 1 || (composite > 0 && field > 0)) {
    throw invalid('query() takes one and() or or() filter and no where() beside it: put the where() filters inside an and()');
  }
  for (const c of constraints) q = c._apply(q);
  return q;
}

/** `q` with the namespaced query `next` in its place. */
function derived(q, next) {
  return next === q._query ? q : new Query(q.firestore, next, q.converter);
}

/** A filter: `where('city', '==', 'Paris')`, `where(documentId(), 'in', ids)`. */
export function where(field, op, value) {
  const c = new QueryFieldFilterConstraint('where', (q) => derived(q, q._query.where(field, op, value)));
  c._filter = () => Filter.where(field, op, value);
  return c;
}

function composite(type, filters) {
  const bad = filters.find((f) => !(f instanceof QueryFieldFilterConstraint || f instanceof QueryCompositeFilterConstraint));
  if (bad !== undefined) {
    throw invalid(`${type}() combines filters made by where(), and() or or(), not ${describe(bad)}`);
  }
  const c = new QueryCompositeFilterConstraint(type, (q) => {
    const f = c._filter();
    return f ? derived(q, q._query.where(f)) : q;
  });
  // An empty composite adds nothing; one with a single filter is that filter.
  c._filter = () => {
    const parts = filters.map((f) => f._filter()).filter(Boolean);
    if (parts.length <= 1) return parts[0];
    return type === 'and' ? Filter.and(...parts) : Filter.or(...parts);
  };
  return c;
}

/** Documents matching every filter. */
export function and(...filters) {
  return composite('and', filters);
}

/** Documents matching any of the filters. */
export function or(...filters) {
  return composite('or', filters);
}

/** The special field path of the document's id, for `where` and `orderBy`. */
export function documentId() {
  return FieldPath.documentId();
}

export function orderBy(field, direction = 'asc') {
  return new QueryOrderByConstraint('orderBy', (q) => derived(q, q._query.orderBy(field, direction)));
}

function positive(fn, n) {
  if (typeof n !== 'number' || !Number.isInteger(n) || n <= 0) {
    throw invalid(`${fn}() takes a whole number of at least 1, not ${describe(n)}`);
  }
}

export function limit(n) {
  positive('limit', n);
  return new QueryLimitConstraint('limit', (q) => derived(q, q._query.limit(n)));
}

/** The last `n` documents in the query's order (it needs an `orderBy`). */
export function limitToLast(n) {
  positive('limitToLast', n);
  return new QueryLimitConstraint('limitToLast', (q) => derived(q, q._query.limitToLast(n)));
}

/** Cursor values as the namespaced API takes them: a modular snapshot unwrapped. */
function cursorValues(values) {
  return values.length === 1 && values[0] instanceof DocumentSnapshot ? [values[0]._snap] : values;
}

function cursor(Kind, type, values) {
  const args = cursorValues(values);
  return new Kind(type, (q) => derived(q, q._query[type](...args)));
}

/** Starts at a document snapshot, or at these values of the `orderBy` fields. */
export function startAt(...values) {
  return cursor(QueryStartAtConstraint, 'startAt', values);
}

export function startAfter(...values) {
  return cursor(QueryStartAtConstraint, 'startAfter', values);
}

export function endAt(...values) {
  return cursor(QueryEndAtConstraint, 'endAt', values);
}

export function endBefore(...values) {
  return cursor(QueryEndAtConstraint, 'endBefore', values);
}

// ---------------------------------------------------------------------------------------
// Snapshots

/** `value` read from Hearth with its references (at any depth) made modular ones of `db`. */
function modularValue(db, value) {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof HearthDocumentReference) return new DocumentReference(db, value, null);
  if (Array.isArray(value)) return modularEntries(db, value, value.slice());
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  return modularEntries(db, value, { ...value });
}

/** `value` with each entry converted; `value` itself when none changed. */
function modularEntries(db, value, copy) {
  let changed = false;
  for (const k of Object.keys(value)) {
    copy[k] = modularValue(db, value[k]);
    changed ||= copy[k] !== value[k];
  }
  return changed ? copy : value;
}

/** A document as read: its data or absence, and metadata. */
export class DocumentSnapshot {
  constructor(firestore, snap, converter) {
    this._firestore = firestore;
    this._snap = snap;
    this._converter = converter ?? null;
    this.metadata = snap.metadata;
  }

  get id() {
    return this._snap.id;
  }

  get ref() {
    return new DocumentReference(this._firestore, this._snap.ref, this._converter);
  }

  exists() {
    return this._snap.exists;
  }

  /** The fields (through the converter's `fromFirestore`, if any), or `undefined`.
   *  `options.serverTimestamps`: `'none'`, `'estimate'` or `'previous'`. */
  data(options) {
    if (this._converter && this._snap.exists) {
      return this._converter.fromFirestore(new QueryDocumentSnapshot(this._firestore, this._snap, null), options);
    }
    return modularValue(this._firestore, this._snap.data(options));
  }

  /** One field by path (string or FieldPath), or `undefined`. */
  get(field, options) {
    return modularValue(this._firestore, this._snap.get(field, options));
  }

  toJSON() {
    throw unimplemented('DocumentSnapshot.toJSON()');
  }
}

/** A document of a query result: it exists. */
export class QueryDocumentSnapshot extends DocumentSnapshot {}

/** A query's result. `listen` says how a listener got it: `{ metadata }`, whether it takes
 *  metadata changes, and `previous`, its namespaced snapshot before this one. */
export class QuerySnapshot {
  constructor(query, snap, listen) {
    this.query = query;
    this.metadata = snap.metadata;
    this._snap = snap;
    this._listen = listen ?? null;
    this._changes = {};
  }

  get docs() {
    return this._snap.docs.map((d) => this._doc(d));
  }

  get size() {
    return this._snap.size;
  }

  get empty() {
    return this._snap.empty;
  }

  forEach(callback, thisArg) {
    this._snap.forEach((d) => callback.call(thisArg, this._doc(d)));
  }

  /** The changes since the listener's previous snapshot (all `added` for the first): of the
   *  data only, unless `includeMetadataChanges` (the listener must have asked for it too). */
  docChanges(options = {}) {
    const all = Boolean(options.includeMetadataChanges);
    if (all && this._listen && !this._listen.metadata) {
      throw invalid('docChanges({ includeMetadataChanges: true }) needs a listener started with { includeMetadataChanges: true }');
    }
    const key = all ? 'all' : 'data';
    this._changes[key] ??= this._changeList(all);
    return this._changes[key];
  }

  toJSON() {
    throw unimplemented('QuerySnapshot.toJSON()');
  }

  _doc(snap) {
    return new QueryDocumentSnapshot(this.query.firestore, snap, this.query.converter);
  }

  _changeList(all) {
    let changes = this._snap.docChanges();
    const previous = this._listen?.metadata && this._listen.previous;
    if (!all && previous) changes = dataChangesOnly(changes, previous);
    return changes.map((c) => ({ type: c.type, doc: this._doc(c.doc), oldIndex: c.oldIndex, newIndex: c.newIndex }));
  }
}

/** `changes` without the `modified` ones whose data equals the `previous` snapshot's: a
 *  write acknowledged, a pending state changed. Such a change never moves its document, so
 *  leaving it out keeps the rest replayable. */
function dataChangesOnly(changes, previous) {
  if (!changes.some((c) => c.type === 'modified')) return changes;
  const before = new Map(previous.docs.map((d) => [d.ref.path, d]));
  return changes.filter((c) => {
    const old = c.type === 'modified' && before.get(c.doc.ref.path);
    return !old || !sameValue(old.data(), c.doc.data());
  });
}

/** Deep equality of values read from Hearth (class instances by their `isEqual`). */
function sameValue(a, b) {
  if (Object.is(a, b)) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (typeof a.isEqual === 'function') return a.isEqual(b);
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => Object.hasOwn(b, k) && sameValue(a[k], b[k]));
}

/** Whether two snapshots show the same thing (documents: also the same converter). */
export function snapshotEqual(left, right) {
  if (left instanceof DocumentSnapshot && right instanceof DocumentSnapshot) {
    return left._firestore === right._firestore && left._converter === right._converter
      && left._snap.isEqual(right._snap);
  }
  if (left instanceof QuerySnapshot && right instanceof QuerySnapshot) {
    return queryEqual(left.query, right.query) && left._snap.isEqual(right._snap);
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// Reads and listeners

function readDoc(ref, fn, options) {
  const r = docRefOf(ref, fn);
  return r._ref.get(options).then((s) => new DocumentSnapshot(r.firestore, s, r.converter));
}

function readQuery(query, fn, options) {
  const q = queryOf(query, fn);
  return q._query.get(options).then((s) => new QuerySnapshot(q, s, null));
}

/** Reads the document: from the relay when connected, else from the cache. */
export function getDoc(reference) {
  return readDoc(reference, 'getDoc');
}

export function getDocFromCache(reference) {
  return readDoc(reference, 'getDocFromCache', { source: 'cache' });
}

export function getDocFromServer(reference) {
  return readDoc(reference, 'getDocFromServer', { source: 'server' });
}

/** Runs the query: at the relay when connected, else on the cache. */
export function getDocs(query) {
  return readQuery(query, 'getDocs');
}

export function getDocsFromCache(query) {
  return readQuery(query, 'getDocsFromCache', { source: 'cache' });
}

export function getDocsFromServer(query) {
  return readQuery(query, 'getDocsFromServer', { source: 'server' });
}

function isObserver(v) {
  return typeof v === 'object' && v !== null
    && ['next', 'error', 'complete'].some((k) => typeof v[k] === 'function');
}

/** `onSnapshot`'s arguments after the reference: `[options?, observer | next, error?,
 *  complete?]`, as `{ options, next, error }` (`complete` is never called: a listen does
 *  not end by itself). */
function listenArgs(args) {
  let i = 0;
  let options = {};
  if (typeof args[0] === 'object' && args[0] !== null && !isObserver(args[0])) options = args[i++];
  let [next, error] = [args[i], args[i + 1]];
  if (isObserver(args[i])) {
    const o = args[i];
    [next, error] = [o.next?.bind(o), o.error?.bind(o)];
  }
  const fns = [next, error].filter((f) => f !== undefined);
  if (fns.some((f) => typeof f !== 'function') || fns.length === 0) {
    throw invalid('onSnapshot() needs callbacks: (ref, next, error?), (ref, { next, error }) or either after options');
  }
  if (options.source !== undefined && options.source !== 'default') {
    throw unimplemented(`onSnapshot() with { source: ${JSON.stringify(options.source)} }`,
      'a Hearth listener shows the cache and the relay together');
  }
  return { metadata: Boolean(options.includeMetadataChanges), next, error };
}

/** Listens to a document or a query: every overload of Firestore's `onSnapshot`. Returns
 *  the function that stops listening. */
export function onSnapshot(reference, ...args) {
  const { metadata, next, error } = listenArgs(args);
  const options = { includeMetadataChanges: metadata };
  if (reference instanceof DocumentReference) {
    const { firestore, converter } = reference;
    return reference._ref.onSnapshot(options, (s) => next?.(new DocumentSnapshot(firestore, s, converter)), error);
  }
  const q = queryOf(reference, 'onSnapshot');
  let previous = null;
  return q._query.onSnapshot(options, (s) => {
    const snap = new QuerySnapshot(q, s, { metadata, previous });
    previous = s;
    next?.(snap);
  }, error);
}

// ---------------------------------------------------------------------------------------
// Writes

/** `data` as stored: through the reference's converter, if any. */
function toStored(ref, data, options) {
  const c = ref.converter;
  if (!c) return data;
  return options && (options.merge || options.mergeFields) ? c.toFirestore(data, options) : c.toFirestore(data);
}

/** Writes the document (`{ merge: true }` or `{ mergeFields }` to merge). */
export function setDoc(reference, data, options) {
  const r = docRefOf(reference, 'setDoc');
  return r._ref.set(toStored(r, data, options), options);
}

/** `updateDoc(ref, { 'a.b': 1 })` or `updateDoc(ref, 'a.b', 1, new FieldPath('c'), 2)`.
 *  The document must exist. */
export function updateDoc(reference, ...dataOrPairs) {
  return docRefOf(reference, 'updateDoc')._ref.update(...dataOrPairs);
}

export function deleteDoc(reference) {
  return docRefOf(reference, 'deleteDoc')._ref.delete();
}

/** Creates a document with an auto id; resolves to its reference once written. */
export async function addDoc(reference, data) {
  if (!(reference instanceof CollectionReference)) {
    throw invalid(`addDoc() takes a CollectionReference, not ${describe(reference)}`);
  }
  const ref = doc(reference);
  await setDoc(ref, data);
  return ref;
}

/** The writes a batch or a transaction buffers: `set`, `update`, `delete` on the namespaced
 *  object `inner`, each checked to be a reference of this Firestore; `kind` names the class
 *  in errors. */
class BufferedWrites {
  constructor(firestore, inner, kind) {
    this._firestore = firestore;
    this._inner = inner;
    this._kind = kind;
  }

  set(reference, data, options) {
    const r = docRefOf(reference, `${this._kind}.set`, this._firestore);
    this._inner.set(r._ref, toStored(r, data, options), options);
    return this;
  }

  update(reference, ...dataOrPairs) {
    this._inner.update(docRefOf(reference, `${this._kind}.update`, this._firestore)._ref, ...dataOrPairs);
    return this;
  }

  delete(reference) {
    this._inner.delete(docRefOf(reference, `${this._kind}.delete`, this._firestore)._ref);
    return this;
  }
}

/** Writes applied together, atomically, by `commit()`. */
export class WriteBatch extends BufferedWrites {
  constructor(firestore, batch) {
    super(firestore, batch, 'WriteBatch');
  }

  commit() {
    return this._inner.commit();
  }
}

export function writeBatch(db) {
  const fs = firestoreOf(db, 'writeBatch');
  return new WriteBatch(fs, fs._hearth.batch());
}

/** A transaction in progress: reads go to the relay; writes are buffered to the commit. */
export class Transaction extends BufferedWrites {
  constructor(firestore, transaction) {
    super(firestore, transaction, 'Transaction');
  }

  get(reference) {
    const r = docRefOf(reference, 'Transaction.get', this._firestore);
    return this._inner.get(r._ref).then((s) => new DocumentSnapshot(r.firestore, s, r.converter));
  }
}

/** Hearth's transactions make Firestore's default 5 attempts, no other number. */
function checkAttempts(options) {
  const n = options?.maxAttempts;
  if (n === undefined || n === 5) return;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) throw invalid('maxAttempts must be at least 1');
  throw unimplemented(`runTransaction() with { maxAttempts: ${n} }`, 'Hearth makes 5 attempts');
}

/** Runs `updateFunction(transaction)` with optimistic concurrency: its reads are
 *  revalidated at commit and the whole function retried when one changed. Resolves to what
 *  the function resolved to. */
export function runTransaction(db, updateFunction, options) {
  const fs = firestoreOf(db, 'runTransaction');
  checkAttempts(options);
  return fs._hearth.runTransaction((t) => updateFunction(new Transaction(fs, t)));
}

/** Deletes the field (`updateDoc`, or `setDoc` with `merge`). */
export function deleteField() {
  return FieldValue.delete();
}

/** The commit time, filled in by the relay (by the local clock until acknowledged). */
export function serverTimestamp() {
  return FieldValue.serverTimestamp();
}

export function increment(n) {
  return FieldValue.increment(n);
}

export function arrayUnion(...elements) {
  return FieldValue.arrayUnion(...elements);
}

export function arrayRemove(...elements) {
  return FieldValue.arrayRemove(...elements);
}

// ---------------------------------------------------------------------------------------
// Aggregations

/** An aggregation for `getAggregateFromServer`: `count()`, `sum(field)`, `average(field)`. */
export class AggregateField {
  constructor(aggregateType, field) {
    this.type = 'AggregateField';
    this.aggregateType = aggregateType;
    this._field = field;
  }

  _hearth() {
    if (this.aggregateType === 'count') return HearthAggregateField.count();
    return this.aggregateType === 'sum' ? HearthAggregateField.sum(this._field) : HearthAggregateField.average(this._field);
  }
}

export function count() {
  return new AggregateField('count');
}

export function sum(field) {
  return new AggregateField('sum', field);
}

export function average(field) {
  return new AggregateField('avg', field);
}

export function aggregateFieldEqual(left, right) {
  if (!(left instanceof AggregateField) || !(right instanceof AggregateField)) return false;
  if (left.aggregateType !== right.aggregateType) return false;
  return String(left._field) === String(right._field);
}

/** The result of an aggregation: `data()` maps each alias to its value. */
export class AggregateQuerySnapshot {
  constructor(query, data) {
    this.type = 'AggregateQuerySnapshot';
    this.query = query;
    this._data = data;
  }

  data() {
    return { ...this._data };
  }
}

export function aggregateQuerySnapshotEqual(left, right) {
  return left instanceof AggregateQuerySnapshot && right instanceof AggregateQuerySnapshot
    && queryEqual(left.query, right.query) && sameValue(left._data, right._data);
}

/** Runs the aggregations of `spec` (`{ alias: count() | sum(f) | average(f) }`) over the
 *  query's result: at the relay when connected, else on the cache. */
export async function getAggregateFromServer(query, spec) {
  const q = queryOf(query, 'getAggregateFromServer');
  if (spec === null || typeof spec !== 'object') throw invalid('getAggregateFromServer() takes { alias: count() | sum(field) | average(field) }');
  const hearthSpec = {};
  for (const [alias, field] of Object.entries(spec)) {
    if (!(field instanceof AggregateField)) throw invalid(`aggregate \`${alias}\` is ${describe(field)}, not count(), sum() or average()`);
    hearthSpec[alias] = field._hearth();
  }
  const snap = await q._query.aggregate(hearthSpec).get();
  return new AggregateQuerySnapshot(q, snap.data());
}

/** `getAggregateFromServer(query, { count: count() })`: `snap.data().count`. */
export function getCountFromServer(query) {
  return getAggregateFromServer(query, { count: count() });
}

// ---------------------------------------------------------------------------------------
// What Firestore has and Hearth lacks

export function getFirestore() { throw unimplemented('getFirestore()', OPEN); }
export function initializeFirestore() { throw unimplemented('initializeFirestore()', OPEN); }
export function connectFirestoreEmulator() { throw unimplemented('connectFirestoreEmulator()', OPEN); }
export function enableIndexedDbPersistence() { throw unimplemented('enableIndexedDbPersistence()', IDB); }
export function enableMultiTabIndexedDbPersistence() { throw unimplemented('enableMultiTabIndexedDbPersistence()', IDB); }
export function persistentLocalCache() { throw unimplemented('persistentLocalCache()', IDB); }
export function memoryLocalCache() { throw unimplemented('memoryLocalCache()', IDB); }
export function persistentSingleTabManager() { throw unimplemented('persistentSingleTabManager()', IDB); }
export function persistentMultipleTabManager() { throw unimplemented('persistentMultipleTabManager()', IDB); }
export function memoryLruGarbageCollector() { throw unimplemented('memoryLruGarbageCollector()', BUDGET); }
export function memoryEagerGarbageCollector() { throw unimplemented('memoryEagerGarbageCollector()', BUDGET); }
export function loadBundle() { throw unimplemented('loadBundle()'); }
export function namedQuery() { throw unimplemented('namedQuery()'); }
export function onSnapshotsInSync() { throw unimplemented('onSnapshotsInSync()'); }
export function onSnapshotResume() { throw unimplemented('onSnapshotResume()'); }
export function documentSnapshotFromJSON() { throw unimplemented('documentSnapshotFromJSON()'); }
export function querySnapshotFromJSON() { throw unimplemented('querySnapshotFromJSON()'); }
export function setIndexConfiguration() {
  throw unimplemented('setIndexConfiguration()', 'give the indexes to openFirestore({ indexes }) and the relay (--indexes)');
}
export function getPersistentCacheIndexManager() { throw unimplemented('getPersistentCacheIndexManager()'); }
export function enablePersistentCacheIndexAutoCreation() { throw unimplemented('enablePersistentCacheIndexAutoCreation()'); }
export function disablePersistentCacheIndexAutoCreation() { throw unimplemented('disablePersistentCacheIndexAutoCreation()'); }
export function deleteAllPersistentCacheIndexes() { throw unimplemented('deleteAllPersistentCacheIndexes()'); }
export function setLogLevel() { throw unimplemented('setLogLevel()'); }
export function vector() { throw unimplemented('vector()'); }
export function minimum() { throw unimplemented('minimum()'); }
export function maximum() { throw unimplemented('maximum()'); }

export class VectorValue {
  constructor() {
    throw unimplemented('VectorValue');
  }
}
