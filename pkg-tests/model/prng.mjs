// The model test's seeded pseudo-random generator (mulberry32): the same seed gives the same
// schedule of operations in Node, so a failing run is replayed from its seed alone.

/** A generator of 32-bit state: `next()` in [0, 1), and the draws the schedule needs. */
export function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const r = {
    next,
    /** An integer in [lo, hi]. */
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    /** True with probability p. */
    chance: (p) => next() < p,
    pick: (list) => list[Math.floor(next() * list.length)],
    /** A key of `weights` ({ name: weight }), drawn in proportion to its weight. */
    weighted: (weights) => {
      const entries = Object.entries(weights).filter(([, w]) => w > 0);
      let x = next() * entries.reduce((s, [, w]) => s + w, 0);
      for (const [k, w] of entries) {
        x -= w;
        if (x < 0) return k;
      }
      return entries.at(-1)[0];
    },
    /** A random subset of `list`, in its order. */
    subset: (list, p = 0.5) => list.filter(() => next() < p),
  };
  return r;
}
