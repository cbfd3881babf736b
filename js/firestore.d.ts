// Types of `hearth/firestore`: Firestore's modular API (`firebase/firestore`, v9 and later)
// over Hearth, with `openFirestore` as the initializer. Names, argument orders and shapes
// follow Firestore's; what Hearth lacks is declared as functions returning `never` that
// throw a `FirestoreError` with code `unimplemented`.

import type { Hearth, InitInput } from './hearth.js';
import { Bytes, FieldPath, FieldValue, GeoPoint, SnapshotMetadata, Timestamp } from './hearth.js';

export { Bytes, FieldPath, FieldValue, GeoPoint, SnapshotMetadata, Timestamp };

// ---------------------------------------------------------------------------------------
// Data

export interface DocumentData {
  [field: string]: any;
}

type Primitive = string | number | boolean | undefined | null;

/** `T` where any value may also be a `FieldValue` sentinel. */
export type WithFieldValue<T> = T | (T extends Primitive ? T : T extends {} ? {
  [K in keyof T]: WithFieldValue<T[K]> | FieldValue;
} : never);

/** `WithFieldValue<T>` where every field is optional (merging writes). */
export type PartialWithFieldValue<T> = Partial<T> | (T extends Primitive ? T : T extends {} ? {
  [K in keyof T]?: PartialWithFieldValue<T[K]> | FieldValue;
} : never);

/** `updateDoc` data: top-level fields, or dotted paths to nested ones. */
export type UpdateData<T> = T extends Primitive ? T : T extends {} ? {
  [K in keyof T]?: UpdateData<T[K]> | FieldValue;
} & { [fieldPath: string]: any } : Partial<T>;

export type SetOptions = { readonly merge?: boolean } | { readonly mergeFields?: Array<string | FieldPath> };

export interface SnapshotOptions {
  /** How a server timestamp still pending shows: `null` (the default), the local estimate
   *  or the previous value. */
  readonly serverTimestamps?: 'estimate' | 'previous' | 'none';
}

export interface SnapshotListenOptions {
  readonly includeMetadataChanges?: boolean;
  /** Only `'default'` (the cache and the relay together); `'cache'` is unimplemented. */
  readonly source?: 'default' | 'cache';
}

export interface TransactionOptions {
  /** Hearth makes 5 attempts; another number throws `unimplemented`. */
  readonly maxAttempts?: number;
}

/** Converts an app's objects to and from the stored data (`withConverter`). */
export interface FirestoreDataConverter<AppModelType, DbModelType extends DocumentData = DocumentData> {
  toFirestore(modelObject: WithFieldValue<AppModelType>): WithFieldValue<DbModelType>;
  toFirestore(modelObject: PartialWithFieldValue<AppModelType>, options: SetOptions): PartialWithFieldValue<DbModelType>;
  fromFirestore(snapshot: QueryDocumentSnapshot<DocumentData, DocumentData>, options?: SnapshotOptions): AppModelType;
}

export type FirestoreErrorCode =
  | 'cancelled' | 'unknown' | 'invalid-argument' | 'deadline-exceeded' | 'not-found'
  | 'already-exists' | 'permission-denied' | 'resource-exhausted' | 'failed-precondition'
  | 'aborted' | 'out-of-range' | 'unimplemented' | 'internal' | 'unavailable' | 'data-loss'
  | 'unauthenticated';

/** Every error Hearth raises: an `Error` with a stable `code` (`instanceof FirestoreError`). */
export class FirestoreError extends Error {
  constructor(code: FirestoreErrorCode, message: string);
  readonly code: FirestoreErrorCode;
}

// ---------------------------------------------------------------------------------------
// The database

/** `openFirestore`'s options: `Hearth.open`'s, and where to load the WebAssembly from. */
export interface OpenFirestoreOptions {
  /** The database's name (letters, digits, `-`, `_`). */
  name: string;
  /** The relay's address (`ws://127.0.0.1:8787`); without it the database is local only. */
  relay?: string;
  /** A JWT, or a function giving one (or a promise of one), asked again before it expires. */
  token?: string | (() => string | Promise<string>);
  /** `firestore.indexes.json`, as an object or text. */
  indexes?: object | string;
  /** The local cache's budget (default 40 MiB, at least 1 MiB, `CACHE_SIZE_UNLIMITED`). */
  cacheSizeBytes?: number;
  /** Where `hearth_bg.wasm` is (by default beside the package's files), as `init()` takes it. */
  wasm?: InitInput | Promise<InitInput>;
}

/** An open Hearth database, in the place of Firestore's `Firestore`. */
export class Firestore {
  private constructor();
  readonly type: 'firestore';
  readonly app: { readonly name: string; readonly options: {} };
  /** The namespaced handle of the same database (`setToken`, `cacheSizeBytes`, `isLeader`). */
  readonly hearth: Hearth;
  toJSON(): object;
}

/** Opens a database, loading the WebAssembly module first if needed: Hearth's replacement
 *  for `initializeApp` + `getFirestore`/`initializeFirestore`. */
export function openFirestore(options: OpenFirestoreOptions): Promise<Firestore>;
export function enableNetwork(firestore: Firestore): Promise<void>;
export function disableNetwork(firestore: Firestore): Promise<void>;
export function waitForPendingWrites(firestore: Firestore): Promise<void>;
export function terminate(firestore: Firestore): Promise<void>;
export function clearIndexedDbPersistence(firestore: Firestore): Promise<void>;
export const CACHE_SIZE_UNLIMITED: -1;

// ---------------------------------------------------------------------------------------
// References and queries

export class Query<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData> {
  protected constructor();
  readonly type: 'query' | 'collection';
  readonly firestore: Firestore;
  readonly converter: FirestoreDataConverter<AppModelType, DbModelType> | null;
  withConverter(converter: null): Query<DocumentData, DocumentData>;
  withConverter<NewAppModelType, NewDbModelType extends DocumentData = DocumentData>(
    converter: FirestoreDataConverter<NewAppModelType, NewDbModelType>): Query<NewAppModelType, NewDbModelType>;
}

export class CollectionReference<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData>
  extends Query<AppModelType, DbModelType> {
  readonly type: 'collection';
  readonly id: string;
  readonly path: string;
  readonly parent: DocumentReference<DocumentData, DocumentData> | null;
  withConverter(converter: null): CollectionReference<DocumentData, DocumentData>;
  withConverter<NewAppModelType, NewDbModelType extends DocumentData = DocumentData>(
    converter: FirestoreDataConverter<NewAppModelType, NewDbModelType>): CollectionReference<NewAppModelType, NewDbModelType>;
}

export class DocumentReference<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData> {
  private constructor();
  readonly type: 'document';
  readonly firestore: Firestore;
  readonly converter: FirestoreDataConverter<AppModelType, DbModelType> | null;
  readonly id: string;
  readonly path: string;
  readonly parent: CollectionReference<AppModelType, DbModelType>;
  withConverter(converter: null): DocumentReference<DocumentData, DocumentData>;
  withConverter<NewAppModelType, NewDbModelType extends DocumentData = DocumentData>(
    converter: FirestoreDataConverter<NewAppModelType, NewDbModelType>): DocumentReference<NewAppModelType, NewDbModelType>;
  toJSON(): object;
}

export function collection(firestore: Firestore, path: string, ...pathSegments: string[]): CollectionReference<DocumentData, DocumentData>;
export function collection<AppModelType, DbModelType extends DocumentData>(
  reference: CollectionReference<AppModelType, DbModelType> | DocumentReference<AppModelType, DbModelType>,
  path: string, ...pathSegments: string[]): CollectionReference<DocumentData, DocumentData>;
export function collectionGroup(firestore: Firestore, collectionId: string): Query<DocumentData, DocumentData>;
export function doc(firestore: Firestore, path: string, ...pathSegments: string[]): DocumentReference<DocumentData, DocumentData>;
/** Without `path`, a new document with an auto id. */
export function doc<AppModelType, DbModelType extends DocumentData>(
  reference: CollectionReference<AppModelType, DbModelType>, path?: string, ...pathSegments: string[]): DocumentReference<AppModelType, DbModelType>;
export function doc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, path: string, ...pathSegments: string[]): DocumentReference<DocumentData, DocumentData>;
export function refEqual<AppModelType, DbModelType extends DocumentData>(
  left: DocumentReference<AppModelType, DbModelType> | CollectionReference<AppModelType, DbModelType>,
  right: DocumentReference<AppModelType, DbModelType> | CollectionReference<AppModelType, DbModelType>): boolean;
export function queryEqual<AppModelType, DbModelType extends DocumentData>(
  left: Query<AppModelType, DbModelType>, right: Query<AppModelType, DbModelType>): boolean;

// ---------------------------------------------------------------------------------------
// Query constraints

export type WhereFilterOp = '<' | '<=' | '==' | '!=' | '>=' | '>' | 'array-contains' | 'in'
  | 'array-contains-any' | 'not-in';
export type OrderByDirection = 'desc' | 'asc';
export type QueryConstraintType = 'where' | 'orderBy' | 'limit' | 'limitToLast' | 'startAt'
  | 'startAfter' | 'endAt' | 'endBefore';

export abstract class QueryConstraint {
  abstract readonly type: QueryConstraintType | 'and' | 'or';
}
export class QueryFieldFilterConstraint extends QueryConstraint { readonly type: 'where'; }
export class QueryCompositeFilterConstraint extends QueryConstraint { readonly type: 'and' | 'or'; }
export class QueryOrderByConstraint extends QueryConstraint { readonly type: 'orderBy'; }
export class QueryLimitConstraint extends QueryConstraint { readonly type: 'limit' | 'limitToLast'; }
export class QueryStartAtConstraint extends QueryConstraint { readonly type: 'startAt' | 'startAfter'; }
export class QueryEndAtConstraint extends QueryConstraint { readonly type: 'endAt' | 'endBefore'; }
export type QueryFilterConstraint = QueryFieldFilterConstraint | QueryCompositeFilterConstraint;
export type QueryNonFilterConstraint = QueryOrderByConstraint | QueryLimitConstraint
  | QueryStartAtConstraint | QueryEndAtConstraint;

export function query<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>, compositeFilter: QueryCompositeFilterConstraint,
  ...queryConstraints: QueryNonFilterConstraint[]): Query<AppModelType, DbModelType>;
export function query<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>, ...queryConstraints: QueryConstraint[]): Query<AppModelType, DbModelType>;
export function where(fieldPath: string | FieldPath, opStr: WhereFilterOp, value: unknown): QueryFieldFilterConstraint;
export function and(...queryConstraints: QueryFilterConstraint[]): QueryCompositeFilterConstraint;
export function or(...queryConstraints: QueryFilterConstraint[]): QueryCompositeFilterConstraint;
export function documentId(): FieldPath;
export function orderBy(fieldPath: string | FieldPath, directionStr?: OrderByDirection): QueryOrderByConstraint;
export function limit(limit: number): QueryLimitConstraint;
export function limitToLast(limit: number): QueryLimitConstraint;
export function startAt(snapshot: DocumentSnapshot<any, any>): QueryStartAtConstraint;
export function startAt(...fieldValues: unknown[]): QueryStartAtConstraint;
export function startAfter(snapshot: DocumentSnapshot<any, any>): QueryStartAtConstraint;
export function startAfter(...fieldValues: unknown[]): QueryStartAtConstraint;
export function endAt(snapshot: DocumentSnapshot<any, any>): QueryEndAtConstraint;
export function endAt(...fieldValues: unknown[]): QueryEndAtConstraint;
export function endBefore(snapshot: DocumentSnapshot<any, any>): QueryEndAtConstraint;
export function endBefore(...fieldValues: unknown[]): QueryEndAtConstraint;

// ---------------------------------------------------------------------------------------
// Snapshots

export class DocumentSnapshot<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData> {
  protected constructor();
  readonly metadata: SnapshotMetadata;
  readonly id: string;
  readonly ref: DocumentReference<AppModelType, DbModelType>;
  exists(): this is QueryDocumentSnapshot<AppModelType, DbModelType>;
  data(options?: SnapshotOptions): AppModelType | undefined;
  get(fieldPath: string | FieldPath, options?: SnapshotOptions): any;
  /** Unimplemented: throws. */
  toJSON(): never;
}

export class QueryDocumentSnapshot<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData>
  extends DocumentSnapshot<AppModelType, DbModelType> {
  data(options?: SnapshotOptions): AppModelType;
}

export type DocumentChangeType = 'added' | 'removed' | 'modified';

export interface DocumentChange<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData> {
  readonly type: DocumentChangeType;
  readonly doc: QueryDocumentSnapshot<AppModelType, DbModelType>;
  /** -1 for `added`. */
  readonly oldIndex: number;
  /** -1 for `removed`. */
  readonly newIndex: number;
}

export class QuerySnapshot<AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData> {
  private constructor();
  readonly metadata: SnapshotMetadata;
  readonly query: Query<AppModelType, DbModelType>;
  readonly docs: Array<QueryDocumentSnapshot<AppModelType, DbModelType>>;
  readonly size: number;
  readonly empty: boolean;
  forEach(callback: (result: QueryDocumentSnapshot<AppModelType, DbModelType>) => void, thisArg?: unknown): void;
  /** Metadata-only changes only with `{ includeMetadataChanges: true }`, which the listener
   *  must have been given too. */
  docChanges(options?: SnapshotListenOptions): Array<DocumentChange<AppModelType, DbModelType>>;
  /** Unimplemented: throws. */
  toJSON(): never;
}

export function snapshotEqual<AppModelType, DbModelType extends DocumentData>(
  left: DocumentSnapshot<AppModelType, DbModelType> | QuerySnapshot<AppModelType, DbModelType>,
  right: DocumentSnapshot<AppModelType, DbModelType> | QuerySnapshot<AppModelType, DbModelType>): boolean;

// ---------------------------------------------------------------------------------------
// Reads and listeners

export function getDoc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>): Promise<DocumentSnapshot<AppModelType, DbModelType>>;
export function getDocFromCache<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>): Promise<DocumentSnapshot<AppModelType, DbModelType>>;
export function getDocFromServer<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>): Promise<DocumentSnapshot<AppModelType, DbModelType>>;
export function getDocs<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>): Promise<QuerySnapshot<AppModelType, DbModelType>>;
export function getDocsFromCache<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>): Promise<QuerySnapshot<AppModelType, DbModelType>>;
export function getDocsFromServer<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>): Promise<QuerySnapshot<AppModelType, DbModelType>>;

export interface Unsubscribe {
  (): void;
}

export interface Observer<T> {
  next?: (snapshot: T) => void;
  error?: (error: FirestoreError) => void;
  /** Never called: a listen does not end by itself. */
  complete?: () => void;
}

export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>,
  observer: Observer<DocumentSnapshot<AppModelType, DbModelType>>): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, options: SnapshotListenOptions,
  observer: Observer<DocumentSnapshot<AppModelType, DbModelType>>): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>,
  onNext: (snapshot: DocumentSnapshot<AppModelType, DbModelType>) => void,
  onError?: (error: FirestoreError) => void, onCompletion?: () => void): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, options: SnapshotListenOptions,
  onNext: (snapshot: DocumentSnapshot<AppModelType, DbModelType>) => void,
  onError?: (error: FirestoreError) => void, onCompletion?: () => void): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>,
  observer: Observer<QuerySnapshot<AppModelType, DbModelType>>): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>, options: SnapshotListenOptions,
  observer: Observer<QuerySnapshot<AppModelType, DbModelType>>): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>,
  onNext: (snapshot: QuerySnapshot<AppModelType, DbModelType>) => void,
  onError?: (error: FirestoreError) => void, onCompletion?: () => void): Unsubscribe;
export function onSnapshot<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>, options: SnapshotListenOptions,
  onNext: (snapshot: QuerySnapshot<AppModelType, DbModelType>) => void,
  onError?: (error: FirestoreError) => void, onCompletion?: () => void): Unsubscribe;

// ---------------------------------------------------------------------------------------
// Writes

export function setDoc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, data: WithFieldValue<AppModelType>): Promise<void>;
export function setDoc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, data: PartialWithFieldValue<AppModelType>,
  options: SetOptions): Promise<void>;
export function updateDoc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, data: UpdateData<DbModelType>): Promise<void>;
export function updateDoc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>, field: string | FieldPath, value: unknown,
  ...moreFieldsAndValues: unknown[]): Promise<void>;
export function deleteDoc<AppModelType, DbModelType extends DocumentData>(
  reference: DocumentReference<AppModelType, DbModelType>): Promise<void>;
export function addDoc<AppModelType, DbModelType extends DocumentData>(
  reference: CollectionReference<AppModelType, DbModelType>,
  data: WithFieldValue<AppModelType>): Promise<DocumentReference<AppModelType, DbModelType>>;

export class WriteBatch {
  private constructor();
  set<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    data: WithFieldValue<AppModelType>): WriteBatch;
  set<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    data: PartialWithFieldValue<AppModelType>, options: SetOptions): WriteBatch;
  update<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    data: UpdateData<DbModelType>): WriteBatch;
  update<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    field: string | FieldPath, value: unknown, ...moreFieldsAndValues: unknown[]): WriteBatch;
  delete<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>): WriteBatch;
  commit(): Promise<void>;
}
export function writeBatch(firestore: Firestore): WriteBatch;

export class Transaction {
  private constructor();
  get<AppModelType, DbModelType extends DocumentData>(
    documentRef: DocumentReference<AppModelType, DbModelType>): Promise<DocumentSnapshot<AppModelType, DbModelType>>;
  set<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    data: WithFieldValue<AppModelType>): this;
  set<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    data: PartialWithFieldValue<AppModelType>, options: SetOptions): this;
  update<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    data: UpdateData<DbModelType>): this;
  update<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>,
    field: string | FieldPath, value: unknown, ...moreFieldsAndValues: unknown[]): this;
  delete<AppModelType, DbModelType extends DocumentData>(documentRef: DocumentReference<AppModelType, DbModelType>): this;
}
export function runTransaction<T>(firestore: Firestore, updateFunction: (transaction: Transaction) => Promise<T>,
  options?: TransactionOptions): Promise<T>;

export function deleteField(): FieldValue;
export function serverTimestamp(): FieldValue;
export function increment(n: number): FieldValue;
export function arrayUnion(...elements: unknown[]): FieldValue;
export function arrayRemove(...elements: unknown[]): FieldValue;

// ---------------------------------------------------------------------------------------
// Aggregations

export type AggregateType = 'count' | 'avg' | 'sum';

export class AggregateField<T> {
  private constructor();
  readonly type: 'AggregateField';
  readonly aggregateType: AggregateType;
  /** Never set: it only carries `T`. */
  private readonly _result?: T;
}

export type AggregateFieldType = AggregateField<number> | AggregateField<number | null>;
export interface AggregateSpec {
  [field: string]: AggregateFieldType;
}
export type AggregateSpecData<T extends AggregateSpec> = {
  [P in keyof T]: T[P] extends AggregateField<infer U> ? U : never;
};

export class AggregateQuerySnapshot<AggregateSpecType extends AggregateSpec,
  AppModelType = DocumentData, DbModelType extends DocumentData = DocumentData> {
  private constructor();
  readonly type: 'AggregateQuerySnapshot';
  readonly query: Query<AppModelType, DbModelType>;
  data(): AggregateSpecData<AggregateSpecType>;
}

export function count(): AggregateField<number>;
export function sum(field: string | FieldPath): AggregateField<number>;
/** `null` over no document with a number in the field. */
export function average(field: string | FieldPath): AggregateField<number | null>;
/** The relay's answer when connected, else the cache's. */
export function getAggregateFromServer<AggregateSpecType extends AggregateSpec, AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>,
  aggregateSpec: AggregateSpecType): Promise<AggregateQuerySnapshot<AggregateSpecType, AppModelType, DbModelType>>;
/** `snap.data().count`: the relay's answer when connected, else the cache's. */
export function getCountFromServer<AppModelType, DbModelType extends DocumentData>(
  query: Query<AppModelType, DbModelType>): Promise<AggregateQuerySnapshot<{ count: AggregateField<number> }, AppModelType, DbModelType>>;
export function aggregateFieldEqual(left: AggregateField<unknown>, right: AggregateField<unknown>): boolean;
export function aggregateQuerySnapshotEqual<AggregateSpecType extends AggregateSpec, AppModelType, DbModelType extends DocumentData>(
  left: AggregateQuerySnapshot<AggregateSpecType, AppModelType, DbModelType>,
  right: AggregateQuerySnapshot<AggregateSpecType, AppModelType, DbModelType>): boolean;

// ---------------------------------------------------------------------------------------
// What Firestore has and Hearth lacks: each throws `unimplemented`.

/** Unimplemented: use `openFirestore`. */
export function getFirestore(...args: unknown[]): never;
/** Unimplemented: use `openFirestore`. */
export function initializeFirestore(...args: unknown[]): never;
/** Unimplemented: pass the relay to `openFirestore({ relay })`. */
export function connectFirestoreEmulator(...args: unknown[]): never;
/** Unimplemented: Hearth always persists to IndexedDB. */
export function enableIndexedDbPersistence(...args: unknown[]): never;
/** Unimplemented: Hearth always persists to IndexedDB, one engine shared by the tabs. */
export function enableMultiTabIndexedDbPersistence(...args: unknown[]): never;
/** Unimplemented. */
export function persistentLocalCache(...args: unknown[]): never;
/** Unimplemented. */
export function memoryLocalCache(...args: unknown[]): never;
/** Unimplemented. */
export function persistentSingleTabManager(...args: unknown[]): never;
/** Unimplemented: Hearth shares one engine among the tabs by itself. */
export function persistentMultipleTabManager(...args: unknown[]): never;
/** Unimplemented: bound the cache with `openFirestore({ cacheSizeBytes })`. */
export function memoryLruGarbageCollector(...args: unknown[]): never;
/** Unimplemented. */
export function memoryEagerGarbageCollector(...args: unknown[]): never;
/** Unimplemented. */
export function loadBundle(...args: unknown[]): never;
/** Unimplemented. */
export function namedQuery(...args: unknown[]): never;
/** Unimplemented. */
export function onSnapshotsInSync(...args: unknown[]): never;
/** Unimplemented. */
export function onSnapshotResume(...args: unknown[]): never;
/** Unimplemented. */
export function documentSnapshotFromJSON(...args: unknown[]): never;
/** Unimplemented. */
export function querySnapshotFromJSON(...args: unknown[]): never;
/** Unimplemented: pass the indexes to `openFirestore({ indexes })` or the relay. */
export function setIndexConfiguration(...args: unknown[]): never;
/** Unimplemented. */
export function getPersistentCacheIndexManager(...args: unknown[]): never;
/** Unimplemented. */
export function enablePersistentCacheIndexAutoCreation(...args: unknown[]): never;
/** Unimplemented. */
export function disablePersistentCacheIndexAutoCreation(...args: unknown[]): never;
/** Unimplemented. */
export function deleteAllPersistentCacheIndexes(...args: unknown[]): never;
/** Unimplemented. */
export function setLogLevel(...args: unknown[]): never;
/** Unimplemented. */
export function vector(...args: unknown[]): never;
/** Unimplemented. */
export function minimum(...args: unknown[]): never;
/** Unimplemented. */
export function maximum(...args: unknown[]): never;
/** Unimplemented: constructing one throws. */
export class VectorValue {
  private constructor();
}
