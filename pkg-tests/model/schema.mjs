// The model test's data layout and query specs, shared by the Node runner and the page agent.
//
// - `items/k0..k7`: written at random by every operation kind; every write sets `w` to its
//   own unique tag, so the relay's final copy names the last write that reached it.
// - `items/g0a,g0b` and `items/g1a,g1b,g1c`: groups written only by batches and transactions
//   that give every member of a group the same data in one commit. Any consistent snapshot
//   therefore shows the visible members of a group identical, and an unbounded query shows a
//   group whole or not at all: a snapshot mixing two versions of a batch is caught.
// - `counters/c0..c2`: created once, then only incremented, so each must end equal to the sum
//   of the increments issued (none of those writes can be refused).
// - `txn/t0,t1`: each transaction increments `n` and sets `done.<txid>` in one of these, so
//   `n` equals the number of keys of `done` exactly when every commit applied once.
// - `barrier/c<i>`: client i's own document, written before a reload to learn that its
//   earlier writes are durable in IndexedDB (the engine applies local writes in call order).

export const KEYS = ['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7'];
export const GROUPS = { g0: ['g0a', 'g0b'], g1: ['g1a', 'g1b', 'g1c'] };
export const GROUP_OF = Object.fromEntries(Object.entries(GROUPS)
  .flatMap(([g, ids]) => ids.map((id) => [id, g])));
export const COUNTERS = ['c0', 'c1', 'c2'];
export const TXN_DOCS = ['t0', 't1'];
export const STRINGS = ['a', 'b', 'c'];
export const TAGS = ['x', 'y', 'z'];

/** Query specs over `items`, listened to by the clients and compared at quiescence. Each
 *  kind of query shape the contract names: plain, where, orderBy+limit, limitToLast,
 *  offset(+limit), cursors on both sides, array-contains, in, !=. */
export const ITEM_QUERIES = {
  all: { coll: 'items' },
  ge3: { coll: 'items', where: [['rank', '>=', 3]] },
  top3: { coll: 'items', orderBy: [['rank', 'asc']], limit: 3 },
  last2: { coll: 'items', orderBy: [['rank', 'desc']], limitToLast: 2 },
  page: { coll: 'items', orderBy: [['rank', 'asc']], offset: 2, limit: 3 },
  window: { coll: 'items', orderBy: [['rank', 'asc']], startAfter: [2], endBefore: [7] },
  tagx: { coll: 'items', where: [['tags', 'array-contains', 'x']] },
  sin: { coll: 'items', where: [['s', 'in', ['a', 'b']]] },
  sneq: { coll: 'items', where: [['s', '!=', 'a']], limit: 4 },
  sdesc: { coll: 'items', orderBy: [['s', 'desc']], startAt: ['b'], limit: 4 },
};

/** Every query compared at quiescence: the item queries and whole collections. */
export const ALL_QUERIES = {
  ...ITEM_QUERIES,
  counters: { coll: 'counters' },
  txn: { coll: 'txn' },
};

/** Document listeners: on a written item, a counter and a transaction document. */
export const DOC_LISTENERS = ['items/k0', 'items/g0a', 'counters/c0', 'txn/t0'];

/** Collections whose every document only grows in `n` (counters), or in `n` and `done`
 *  (transaction documents): a snapshot showing a smaller value than an earlier one of the
 *  same listener lost a write it had shown. */
export const MONOTONIC = new Set(['counters', 'txn']);
