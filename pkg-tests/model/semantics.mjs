// The reference query semantics of the model test (../../../shared/SEMANTICS.md, for the value
// types the test writes: null, booleans, integers, strings, arrays, maps): which documents a
// query spec matches and in what order. The page checks every snapshot against it and Node
// evaluates the specs over the relay's documents at quiescence, so the engine's planner,
// views and cursors are compared with an independent implementation. Plain ES module: it runs
// in Node and in the page.

const utf8 = new TextEncoder();

/** Firestore's type order of the kinds the test writes. */
function typeRank(v) {
  if (v === null) return 0;
  if (typeof v === 'boolean') return 1;
  if (typeof v === 'number') return 2;
  if (typeof v === 'string') return 4;
  if (Array.isArray(v)) return 8;
  return 9;
}

function cmpBytes(a, b) {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** Cross-type order of two values: negative, zero or positive. */
export function compareValues(a, b) {
  const ta = typeRank(a);
  const tb = typeRank(b);
  if (ta !== tb) return ta - tb;
  switch (ta) {
    case 0: return 0;
    case 1: return Number(a) - Number(b);
    case 2: return a < b ? -1 : a > b ? 1 : 0;
    case 4: return cmpBytes(a, b);
    case 8: {
      for (let i = 0; i < Math.min(a.length, b.length); i++) {
        const c = compareValues(a[i], b[i]);
        if (c !== 0) return c;
      }
      return a.length - b.length;
    }
    default: {
      const ka = Object.keys(a).sort(cmpBytes);
      const kb = Object.keys(b).sort(cmpBytes);
      for (let i = 0; i < Math.min(ka.length, kb.length); i++) {
        const c = cmpBytes(ka[i], kb[i]) || compareValues(a[ka[i]], b[kb[i]]);
        if (c !== 0) return c;
      }
      return ka.length - kb.length;
    }
  }
}

/** Strict equality (`in`, `array-contains`): the test writes only integers, so numeric
 *  equality is strict equality here. */
function sameValue(a, b) {
  return typeRank(a) === typeRank(b) && compareValues(a, b) === 0;
}

/** JSON with map keys sorted, so two clients' copies of a document compare as text whatever
 *  order their fields were built in. */
export function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function field(data, path) {
  let v = data;
  for (const part of path.split('.')) {
    if (v === null || typeof v !== 'object' || Array.isArray(v) || !(part in v)) return undefined;
    v = v[part];
  }
  return v;
}

function matchesFilter(data, [path, op, operand]) {
  const v = field(data, path);
  if (v === undefined) return false;
  switch (op) {
    case '==': return sameValue(v, operand);
    case '!=': return v !== null && !sameValue(v, operand);
    case '<': case '<=': case '>': case '>=': {
      if (typeRank(v) !== typeRank(operand)) return false;
      const c = compareValues(v, operand);
      return { '<': c < 0, '<=': c <= 0, '>': c > 0, '>=': c >= 0 }[op];
    }
    case 'in': return operand.some((o) => sameValue(v, o));
    case 'array-contains': return Array.isArray(v) && v.some((e) => sameValue(e, operand));
    default: throw new Error(`the model does not know operator ${op}`);
  }
}

const INEQUALITIES = new Set(['<', '<=', '>', '>=', '!=', 'not-in']);

/** The normalized order of a spec: explicit orderBys, then inequality fields not ordered
 *  explicitly (by path), then the document id, in the last explicit direction. */
export function normalizedOrder(spec) {
  const explicit = (spec.orderBy ?? []).map(([f, d]) => [f, d ?? 'asc']);
  const named = new Set(explicit.map(([f]) => f));
  const implicitDir = explicit.at(-1)?.[1] ?? 'asc';
  const implicit = [...new Set((spec.where ?? []).filter(([, op]) => INEQUALITIES.has(op))
    .map(([f]) => f).filter((f) => !named.has(f)))].sort(cmpBytes).map((f) => [f, implicitDir]);
  return [...explicit, ...implicit, ['__name__', implicitDir]];
}

/** Whether document `{ id, data }` belongs to the spec's unbounded result (filters, ordered
 *  fields present, cursors). */
export function matches(spec, doc) {
  if (!(spec.where ?? []).every((f) => matchesFilter(doc.data, f))) return false;
  const order = normalizedOrder(spec);
  if (!order.every(([f]) => f === '__name__' || field(doc.data, f) !== undefined)) return false;
  const position = (values) => {
    for (let i = 0; i < values.length; i++) {
      const [f, dir] = order[i];
      const v = f === '__name__' ? doc.id : field(doc.data, f);
      const c = f === '__name__' ? cmpBytes(v, values[i]) : compareValues(v, values[i]);
      if (c !== 0) return dir === 'desc' ? -c : c;
    }
    return 0;
  };
  if (spec.startAt && position(spec.startAt) < 0) return false;
  if (spec.startAfter && position(spec.startAfter) <= 0) return false;
  if (spec.endAt && position(spec.endAt) > 0) return false;
  if (spec.endBefore && position(spec.endBefore) >= 0) return false;
  return true;
}

/** Compares two documents `{ id, data }` in the spec's query order. */
export function compareDocs(spec, a, b) {
  for (const [f, dir] of normalizedOrder(spec)) {
    const c = f === '__name__' ? cmpBytes(a.id, b.id) : compareValues(field(a.data, f), field(b.data, f));
    if (c !== 0) return dir === 'desc' ? -c : c;
  }
  return 0;
}

/** Whether the spec's result is every matching document (no limit, offset or
 *  limitToLast), so a group of identical documents is in it whole or not at all. */
export function unbounded(spec) {
  return spec.limit === undefined && spec.limitToLast === undefined && spec.offset === undefined;
}

/** The spec's result over a collection's documents `[{ id, data }]`. */
export function evaluate(spec, docs) {
  const all = docs.filter((d) => matches(spec, d)).sort((a, b) => compareDocs(spec, a, b));
  const from = spec.offset ?? 0;
  let out = all.slice(from, spec.limit === undefined ? undefined : from + spec.limit);
  if (spec.limitToLast !== undefined) out = out.slice(Math.max(0, out.length - spec.limitToLast));
  return out;
}
