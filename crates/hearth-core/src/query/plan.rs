//! The planner: every query served from index range scans.
//!
//! A query's filter becomes a disjunction of conjunctions; `in` and `array-contains-any`
//! expand each conjunction into equality branches. Each branch is served by one of:
//! - the documents table (a collection read in name order, or a `__name__ ==` point read);
//! - one index whose fields are the branch's equality fields (any order) followed by the
//!   query's remaining order fields, scanned forward or backward, with the first order
//!   field's range filters and the cursors as key bounds;
//! - a zig-zag join of several such indexes that each cover some of the equality fields and
//!   share the same ordered suffix.
//!
//! Branches are merged in query order (k-way, lazily, so a limit stops every scan early).
//! The executor re-checks every candidate with the matcher, so plans may over-approximate
//! (residual filters) but never miss a document or emit one out of order.
//!
//! Architecture invariant: no plan scans a whole collection to filter it, and no plan sorts.

use std::cmp::Ordering;
use std::fmt;

use super::matcher::dir_name;
use super::model::{FieldFilter, LimitType, Operator, OrderBy, Query, Source};
use super::normalize::{dnf, normalized_order, MAX_DISJUNCTIONS};
use super::validate::QueryError;
use crate::encoding::key::{
    class_bounds, prefix_end, write_name, write_string, write_value, Direction,
};
use crate::index::config::{FieldMode, QueryScope};
use crate::index::def::{mode_direction, IndexCatalog, IndexDef};
use crate::index::keys::{collection_prefix, document_key, field_direction, index_prefix};
use crate::kv::{KeyRange, Table};
use crate::path::{CollectionPath, FieldPath};
use crate::value::{TypeClass, Value};

/// Most branches a query may expand to after `in` / `array-contains-any` expansion.
pub const MAX_BRANCHES: usize = 900;

/// How one branch reads candidates.
#[derive(Clone, Debug, PartialEq)]
pub enum Access {
    /// Documents-table ranges; keys are document keys, values the documents.
    Documents { ranges: Vec<KeyRange> },
    /// Index ranges of one index.
    Index {
        def: IndexDef,
        ranges: Vec<KeyRange>,
    },
    /// A zig-zag join: every scan covers the same suffix; matching suffixes are results.
    ZigZag { scans: Vec<JoinScan> },
}

/// One input of a zig-zag join.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinScan {
    pub def: IndexDef,
    /// Index id, scope and equality values: everything before the shared suffix.
    pub prefix: Vec<u8>,
    /// The scan range (within `prefix`).
    pub range: KeyRange,
}

/// One branch of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Branch {
    pub access: Access,
    /// Scan keys in descending order.
    pub reverse: bool,
    /// Human-readable equality constraints, for plan rendering.
    pub equalities: Vec<String>,
}

/// A query plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub branches: Vec<Branch>,
    /// The normalized order results come out in (reversed for `limitToLast`, which the
    /// executor undoes at the end).
    pub order: Vec<OrderBy>,
    /// Branches are read in reverse query order (`limitToLast`).
    pub reversed: bool,
}

/// One expanded branch of a conjunction.
#[derive(Clone, Debug, Default)]
struct Conj {
    /// `field == value` (from `==` and `in`), one per field.
    eqs: Vec<(FieldPath, Value)>,
    /// `field array-contains value` (from `array-contains` and `array-contains-any`).
    contains: Vec<(FieldPath, Value)>,
    /// Inequality filters.
    ineqs: Vec<FieldFilter>,
    /// Statically empty (two different equalities on one field).
    empty: bool,
}

fn expand(conjunction: &[FieldFilter]) -> Vec<Conj> {
    let mut out = vec![Conj::default()];
    for ff in conjunction {
        let choices: Vec<(bool, Value)> = match ff.op {
            Operator::Equal => vec![(false, ff.value.clone())],
            Operator::In => list(&ff.value).iter().map(|v| (false, v.clone())).collect(),
            Operator::ArrayContains => vec![(true, ff.value.clone())],
            Operator::ArrayContainsAny => {
                list(&ff.value).iter().map(|v| (true, v.clone())).collect()
            }
            _ => {
                for c in &mut out {
                    c.ineqs.push(ff.clone());
                }
                continue;
            }
        };
        let mut next = Vec::with_capacity(out.len() * choices.len());
        for c in &out {
            for (is_contains, v) in &choices {
                let mut c = c.clone();
                if *is_contains {
                    c.contains.push((ff.field.clone(), v.clone()));
                } else if let Some((_, existing)) = c.eqs.iter().find(|(f, _)| *f == ff.field) {
                    // `in` uses strict equality, `==` order equality: keep the branch only if
                    // both can hold, and let the matcher decide exactly.
                    if !existing.eq_order(v) {
                        c.empty = true;
                    }
                } else {
                    c.eqs.push((ff.field.clone(), v.clone()));
                }
                next.push(c);
            }
        }
        out = next;
    }
    out
}

fn list(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        _ => &[],
    }
}

/// A position between keys: before or after every key that starts with `bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pos {
    Before(Vec<u8>),
    After(Vec<u8>),
}

/// Key bounds under a prefix, as concrete bytes: `[lo, hi)`, `hi == None` meaning the end
/// of the prefix.
#[derive(Clone, Debug)]
struct Bounds {
    lo: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
    empty: bool,
}

impl Bounds {
    fn all() -> Bounds {
        Bounds {
            lo: None,
            hi: None,
            empty: false,
        }
    }

    fn key_of(prefix: &[u8], pos: &Pos) -> Option<Vec<u8>> {
        match pos {
            Pos::Before(b) => Some([prefix, b].concat()),
            Pos::After(b) => prefix_end(&[prefix, b].concat()),
        }
    }

    fn lower(&mut self, prefix: &[u8], pos: &Pos) {
        match Bounds::key_of(prefix, pos) {
            None => self.empty = true,
            Some(k) => {
                if self.lo.as_ref().is_none_or(|lo| k > *lo) {
                    self.lo = Some(k);
                }
            }
        }
    }

    fn upper(&mut self, prefix: &[u8], pos: &Pos) {
        if let Some(k) = Bounds::key_of(prefix, pos) {
            if self.hi.as_ref().is_none_or(|hi| k < *hi) {
                self.hi = Some(k);
            }
        }
    }

    fn range(&self, prefix: &[u8]) -> Option<KeyRange> {
        let r = KeyRange {
            start: self.lo.clone().unwrap_or_else(|| prefix.to_vec()),
            end: match &self.hi {
                Some(h) => Some(h.clone()),
                None => prefix_end(prefix),
            },
        };
        (!self.empty && !r.is_empty()).then_some(r)
    }
}

/// Every segment intersected with every interval (a `!=` filter splits each segment in two).
fn intersect(
    segments: Vec<Bounds>,
    prefix: &[u8],
    intervals: &[(Option<Pos>, Option<Pos>)],
) -> Vec<Bounds> {
    let mut next = Vec::with_capacity(segments.len() * intervals.len());
    for seg in segments {
        for (lo, hi) in intervals {
            let mut s = seg.clone();
            if let Some(lo) = lo {
                s.lower(prefix, lo);
            }
            if let Some(hi) = hi {
                s.upper(prefix, hi);
            }
            next.push(s);
        }
    }
    next
}

/// Where a query-order bound lands in key space: identity, or swapped when scanning backward.
fn place(bounds: &mut Bounds, prefix: &[u8], lower_in_query: bool, pos: Pos, flipped: bool) {
    if !flipped {
        if lower_in_query {
            bounds.lower(prefix, &pos);
        } else {
            bounds.upper(prefix, &pos);
        }
    } else {
        let swapped = match pos {
            Pos::Before(b) => Pos::After(b),
            Pos::After(b) => Pos::Before(b),
        };
        if lower_in_query {
            bounds.upper(prefix, &swapped);
        } else {
            bounds.lower(prefix, &swapped);
        }
    }
}

/// Key intervals (within one component written in `dir`) where a range filter can hold.
/// Several intervals for `!=`; the matcher removes what an interval over-approximates.
fn filter_intervals(ff: &FieldFilter, dir: Direction) -> Vec<(Option<Pos>, Option<Pos>)> {
    let enc = |v: &Value| {
        let mut out = Vec::new();
        write_value(v, Direction::Ascending, &mut out, &mut Vec::new());
        out
    };
    let class = |c: TypeClass| class_bounds(c);
    // Ascending-space positions.
    let v = &ff.value;
    let (cl, ch) = class(v.type_class());
    let asc: Vec<(Option<Pos>, Option<Pos>)> = match ff.op {
        Operator::LessThan => vec![(Some(Pos::Before(vec![cl])), Some(Pos::Before(enc(v))))],
        Operator::LessThanOrEqual => {
            vec![(Some(Pos::Before(vec![cl])), Some(Pos::After(enc(v))))]
        }
        Operator::GreaterThan => vec![(Some(Pos::After(enc(v))), Some(Pos::Before(vec![ch])))],
        Operator::GreaterThanOrEqual => {
            vec![(Some(Pos::Before(enc(v))), Some(Pos::Before(vec![ch])))]
        }
        Operator::NotEqual => {
            let after_null = Pos::Before(vec![class(TypeClass::Null).1]);
            if matches!(v, Value::Null) {
                vec![(Some(after_null), None)]
            } else {
                vec![
                    (Some(after_null), Some(Pos::Before(enc(v)))),
                    (Some(Pos::After(enc(v))), None),
                ]
            }
        }
        Operator::NotIn => vec![(Some(Pos::Before(vec![class(TypeClass::Null).1])), None)],
        _ => vec![(None, None)],
    };
    match dir {
        Direction::Ascending => asc,
        Direction::Descending => asc
            .into_iter()
            .rev()
            .map(|(lo, hi)| (hi.map(complement_pos), lo.map(complement_pos)))
            .collect(),
    }
}

/// The descending image of an ascending position: complemented bytes, sides swapped
/// (what was before a prefix is now after its complement).
fn complement_pos(p: Pos) -> Pos {
    match p {
        Pos::Before(b) => Pos::After(b.iter().map(|x| !x).collect()),
        Pos::After(b) => Pos::Before(b.iter().map(|x| !x).collect()),
    }
}

/// What a branch reads, before bounds: a prefix and the layout of the suffix after it.
struct Layout<'a> {
    /// The suffix order: (field, key direction) per component, `None` field for the name.
    components: Vec<(Option<&'a FieldPath>, Direction)>,
    /// Scope of the name component.
    name_scope: NameScope,
    /// Key order is the reverse of query order.
    flipped: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NameScope {
    /// The name component is the document id (documents table, collection-scope index).
    Id,
    /// The name component is the full name (collection-group index).
    Full,
}

struct Planner<'a> {
    catalog: &'a IndexCatalog,
    query: &'a Query,
    /// The normalized order up to and including `__name__`.
    order: Vec<OrderBy>,
    scope: QueryScope,
}

impl<'a> Planner<'a> {
    fn parent(&self) -> Option<&CollectionPath> {
        match &self.query.source {
            Source::Collection(c) => Some(c),
            Source::CollectionGroup(_) => None,
        }
    }

    /// Bounds of a branch over one layout: the first component's range filters and cursors.
    fn bounds(&self, conj: &Conj, layout: &Layout, prefix: &[u8]) -> Vec<Bounds> {
        let mut segments = vec![Bounds::all()];
        if let Some((first, dir)) = layout.components.first() {
            let filters = conj.ineqs.iter().filter(|f| match first {
                Some(field) => f.field == **field,
                None => f.field.is_document_id(),
            });
            for ff in filters {
                // Name ranges help only where expressible in the name component.
                let intervals = match first {
                    None => self.name_filter_pos(ff, layout, *dir),
                    Some(_) => Some(filter_intervals(ff, *dir)),
                };
                if let Some(intervals) = intervals {
                    segments = intersect(segments, prefix, &intervals);
                }
            }
        }
        if let Some(start) = &self.query.start {
            if let Some(pos) = self.cursor_pos(conj, layout, &start.values, true, start.inclusive) {
                for s in &mut segments {
                    place(s, prefix, true, pos.clone(), layout.flipped);
                }
            } else {
                segments.clear();
            }
        }
        if let Some(end) = &self.query.end {
            if let Some(pos) = self.cursor_pos(conj, layout, &end.values, false, end.inclusive) {
                for s in &mut segments {
                    place(s, prefix, false, pos.clone(), layout.flipped);
                }
            } else {
                segments.clear();
            }
        }
        if layout.flipped {
            // Key order of the segments follows key space; it is already ascending in key
            // space because intervals were built in key space.
        }
        segments
    }

    /// Positions of a `__name__` range filter in a name component.
    fn name_filter_pos(
        &self,
        ff: &FieldFilter,
        layout: &Layout,
        dir: Direction,
    ) -> Option<Vec<(Option<Pos>, Option<Pos>)>> {
        let Value::Reference(name) = &ff.value else {
            return None;
        };
        let mut enc = Vec::new();
        match layout.name_scope {
            NameScope::Id => {
                if !self.parent().is_some_and(|p| p.contains(name)) {
                    return None;
                }
                write_string(name.id(), Direction::Ascending, &mut enc);
            }
            NameScope::Full => write_name(name, Direction::Ascending, &mut enc),
        }
        let asc = match ff.op {
            Operator::LessThan => vec![(None, Some(Pos::Before(enc)))],
            Operator::LessThanOrEqual => vec![(None, Some(Pos::After(enc)))],
            Operator::GreaterThan => vec![(Some(Pos::After(enc)), None)],
            Operator::GreaterThanOrEqual => vec![(Some(Pos::Before(enc)), None)],
            _ => return None,
        };
        Some(match dir {
            Direction::Ascending => asc,
            Direction::Descending => asc
                .into_iter()
                .map(|(lo, hi)| (hi.map(complement_pos), lo.map(complement_pos)))
                .collect(),
        })
    }

    /// The query-order position of a cursor in this branch's key space, or `None` when the
    /// cursor excludes the whole branch.
    fn cursor_pos(
        &self,
        conj: &Conj,
        layout: &Layout,
        values: &[Value],
        is_start: bool,
        inclusive: bool,
    ) -> Option<Pos> {
        let mut bytes = Vec::new();
        let mut components = layout.components.iter();
        for (o, cv) in self.order.iter().zip(values) {
            let fixed = conj.eqs.iter().find(|(f, _)| *f == o.field);
            if let Some((_, k)) = fixed {
                match o.dir.apply(k.cmp_order(cv)) {
                    Ordering::Equal => continue,
                    // Every document of the branch (sharing `bytes`) is past the cursor.
                    Ordering::Greater => {
                        return Some(Pos::Before(bytes));
                    }
                    // Every document of the branch (sharing `bytes`) is before the cursor.
                    Ordering::Less => return Some(Pos::After(bytes)),
                }
            }
            let Some((field, kdir)) = components.next() else {
                break;
            };
            match field {
                Some(_) => write_value(cv, *kdir, &mut bytes, &mut Vec::new()),
                None => {
                    let Value::Reference(name) = cv else {
                        // Validation resolves name cursors to references.
                        return Some(Pos::Before(bytes));
                    };
                    match layout.name_scope {
                        NameScope::Id => {
                            match self.parent() {
                                Some(p) if p.contains(name) => {
                                    write_string(name.id(), *kdir, &mut bytes)
                                }
                                // A name outside the collection: compare whole names.
                                _ => {
                                    let parent = self.parent().expect("id scope has a parent");
                                    let before = name.segments() < parent.segments();
                                    let past = o.dir.apply(if before {
                                        Ordering::Greater
                                    } else {
                                        Ordering::Less
                                    });
                                    return match past {
                                        Ordering::Greater => Some(Pos::Before(bytes)),
                                        _ => Some(Pos::After(bytes)),
                                    };
                                }
                            }
                        }
                        NameScope::Full => write_name(name, *kdir, &mut bytes),
                    }
                }
            }
        }
        let _ = is_start;
        // Values past `__name__` (an explicit `orderBy` after it) only matter on a tie with
        // the cursor's own document, which an inclusive bound keeps for the matcher to judge.
        let inclusive = inclusive || values.len() > self.order.len();
        Some(if inclusive == is_start {
            Pos::Before(bytes)
        } else {
            Pos::After(bytes)
        })
    }
}

impl<'a> Planner<'a> {
    /// The order fields a branch must scan by: the normalized order without the trailing
    /// name and without fields fixed by `==`.
    fn suffix(&self, conj: &Conj) -> Vec<OrderBy> {
        self.order[..self.order.len() - 1]
            .iter()
            .filter(|o| !conj.eqs.iter().any(|(f, _)| *f == o.field))
            .cloned()
            .collect()
    }

    fn name_dir(&self) -> Direction {
        self.order
            .last()
            .expect("normalized order ends with __name__")
            .dir
    }

    /// Whether `def` serves the branch, covering `covered` equality/contains fields; returns
    /// whether its key order is the reverse of query order.
    fn fits(
        &self,
        def: &IndexDef,
        conj: &Conj,
        suffix: &[OrderBy],
        whole: bool,
    ) -> Option<(bool, usize)> {
        if def.fields.len() < suffix.len() {
            return None;
        }
        let p = def.fields.len() - suffix.len();
        let (pre, suf) = def.fields.split_at(p);
        if whole && p != conj.eqs.len() + conj.contains.len() {
            return None;
        }
        if !whole && p == 0 {
            return None;
        }
        for (f, m) in pre {
            let ok = match m {
                FieldMode::ArrayContains => conj.contains.iter().any(|(cf, _)| cf == f),
                _ => conj.eqs.iter().any(|(ef, _)| ef == f),
            };
            if !ok {
                return None;
            }
        }
        let mut flip: Option<bool> = None;
        for ((f, m), o) in suf.iter().zip(suffix) {
            let d = mode_direction(*m)?;
            if *f != o.field {
                return None;
            }
            let this = d != o.dir;
            if *flip.get_or_insert(this) != this {
                return None;
            }
        }
        let name_flip = def.name_dir != self.name_dir();
        match flip {
            Some(f) if f != name_flip => None,
            _ => Some((name_flip, p)),
        }
    }

    fn candidates(&self, conj: &Conj, suffix: &[OrderBy]) -> Vec<IndexDef> {
        let group = self.query.source.group();
        let mut out: Vec<IndexDef> = self
            .catalog
            .composites()
            .iter()
            .filter(|d| d.collection_group == group && d.scope == self.scope)
            .cloned()
            .collect();
        if suffix.len() == 1 {
            out.extend(
                self.catalog
                    .ordered_single_field(group, &suffix[0].field, self.scope),
            );
        }
        if suffix.is_empty() {
            for (f, _) in &conj.eqs {
                out.extend(self.catalog.ordered_single_field(group, f, self.scope));
            }
            for (f, _) in &conj.contains {
                out.extend(self.catalog.contains_single_field(group, f, self.scope));
            }
            if self.scope == QueryScope::CollectionGroup
                && conj.eqs.is_empty()
                && conj.contains.is_empty()
            {
                out.push(IndexCatalog::group_name_index(group));
            }
        }
        out
    }

    /// The equality prefix bytes of `def` for this branch.
    fn eq_prefix(&self, def: &IndexDef, conj: &Conj, p: usize) -> Vec<u8> {
        let parent = self
            .parent()
            .cloned()
            .unwrap_or_else(|| CollectionPath::parse("unused").expect("a valid collection path"));
        let mut prefix = index_prefix(def, &parent);
        for (f, m) in &def.fields[..p] {
            let v = match m {
                FieldMode::ArrayContains => {
                    &conj
                        .contains
                        .iter()
                        .find(|(cf, _)| cf == f)
                        .expect("fits")
                        .1
                }
                _ => &conj.eqs.iter().find(|(ef, _)| ef == f).expect("fits").1,
            };
            write_value(v, field_direction(*m), &mut prefix, &mut Vec::new());
        }
        prefix
    }

    fn layout<'b>(&self, def: &'b IndexDef, p: usize, flipped: bool) -> Layout<'b> {
        let mut components: Vec<(Option<&FieldPath>, Direction)> = def.fields[p..]
            .iter()
            .map(|(f, m)| (Some(f), field_direction(*m)))
            .collect();
        components.push((None, def.name_dir));
        Layout {
            components,
            name_scope: match def.scope {
                QueryScope::Collection => NameScope::Id,
                QueryScope::CollectionGroup => NameScope::Full,
            },
            flipped,
        }
    }

    fn plan_branch(&self, conj: &Conj) -> Result<Option<Branch>, QueryError> {
        let reversed_query = self.query.limit_type == LimitType::Last;
        let mut equalities: Vec<String> = conj
            .eqs
            .iter()
            .map(|(f, v)| format!("{f} == {}", render_value(v)))
            .collect();
        equalities.extend(
            conj.contains
                .iter()
                .map(|(f, v)| format!("{f} contains {}", render_value(v))),
        );
        // A `__name__ ==` is a point read.
        if let Some((_, v)) = conj.eqs.iter().find(|(f, _)| f.is_document_id()) {
            let Value::Reference(name) = v else {
                return Ok(None);
            };
            return Ok(Some(Branch {
                access: Access::Documents {
                    ranges: vec![KeyRange::prefix(&document_key(name))],
                },
                reverse: false,
                equalities,
            }));
        }
        let suffix = self.suffix(conj);
        // An array-contains on a field the branch also fixes with `==` or orders by stays a
        // residual filter that the matcher checks: no index can hold one field twice.
        let narrowed;
        let conj = if conj.contains.iter().any(|(f, _)| {
            conj.eqs.iter().any(|(e, _)| e == f) || suffix.iter().any(|o| o.field == *f)
        }) {
            narrowed = Conj {
                contains: conj
                    .contains
                    .iter()
                    .filter(|(f, _)| {
                        !conj.eqs.iter().any(|(e, _)| e == f)
                            && !suffix.iter().any(|o| o.field == *f)
                    })
                    .cloned()
                    .collect(),
                ..conj.clone()
            };
            &narrowed
        } else {
            conj
        };
        // A collection read in name order: the documents table.
        if let (Some(parent), true, true) = (
            self.parent(),
            suffix.is_empty(),
            conj.eqs.is_empty() && conj.contains.is_empty(),
        ) {
            let prefix = collection_prefix(parent);
            let flipped = self.name_dir() == Direction::Descending;
            let layout = Layout {
                components: vec![(None, Direction::Ascending)],
                name_scope: NameScope::Id,
                flipped,
            };
            let ranges: Vec<KeyRange> = self
                .bounds(conj, &layout, &prefix)
                .iter()
                .filter_map(|b| b.range(&prefix))
                .collect();
            return Ok(Some(Branch {
                access: Access::Documents { ranges },
                reverse: flipped != reversed_query,
                equalities,
            }));
        }
        let candidates = self.candidates(conj, &suffix);
        // One index serving everything.
        let mut best: Option<(IndexDef, bool, usize)> = None;
        for def in &candidates {
            if let Some((flip, p)) = self.fits(def, conj, &suffix, true) {
                best = Some((def.clone(), flip, p));
                break;
            }
        }
        if let Some((def, flipped, p)) = best {
            let prefix = self.eq_prefix(&def, conj, p);
            let layout = self.layout(&def, p, flipped);
            let ranges: Vec<KeyRange> = self
                .bounds(conj, &layout, &prefix)
                .iter()
                .filter_map(|b| b.range(&prefix))
                .collect();
            return Ok(Some(Branch {
                access: Access::Index { def, ranges },
                reverse: flipped != reversed_query,
                equalities,
            }));
        }
        // A zig-zag join of indexes that each cover part of the equalities.
        if let Some(branch) = self.plan_zigzag(conj, &suffix, &candidates, equalities) {
            return Ok(Some(branch));
        }
        Err(self.missing_index(conj, &suffix))
    }

    fn plan_zigzag(
        &self,
        conj: &Conj,
        suffix: &[OrderBy],
        candidates: &[IndexDef],
        equalities: Vec<String>,
    ) -> Option<Branch> {
        let reversed_query = self.query.limit_type == LimitType::Last;
        for want_flip in [false, true] {
            let mut parts: Vec<(IndexDef, usize)> = candidates
                .iter()
                .filter_map(|d| match self.fits(d, conj, suffix, false) {
                    Some((f, p)) if f == want_flip => Some((d.clone(), p)),
                    _ => None,
                })
                .collect();
            // The shared suffix must have one layout: same name scope and directions.
            parts.sort_by_key(|(_, p)| std::cmp::Reverse(*p));
            let mut chosen: Vec<(IndexDef, usize)> = Vec::new();
            let mut covered: Vec<FieldPath> = Vec::new();
            let needed = conj.eqs.len() + conj.contains.len();
            for (def, p) in parts {
                if def.fields[..p].iter().all(|(f, _)| covered.contains(f)) {
                    continue;
                }
                if let Some((first, _)) = chosen.first() {
                    if first.fields[first.fields.len() - suffix.len()..] != def.fields[p..]
                        || first.name_dir != def.name_dir
                    {
                        continue;
                    }
                }
                // Field identity is by path; contains and equality on one path both count.
                covered.extend(def.fields[..p].iter().map(|(f, _)| f.clone()));
                chosen.push((def, p));
                if conj
                    .eqs
                    .iter()
                    .chain(&conj.contains)
                    .all(|(f, _)| covered.contains(f))
                {
                    break;
                }
            }
            let all_covered = conj
                .eqs
                .iter()
                .chain(&conj.contains)
                .all(|(f, _)| covered.contains(f));
            if needed == 0 || !all_covered || chosen.len() < 2 {
                continue;
            }
            let mut scans = Vec::new();
            for (def, p) in &chosen {
                let prefix = self.eq_prefix(def, conj, *p);
                let layout = self.layout(def, *p, want_flip);
                // A join needs one contiguous range per input: take the hull of `!=` gaps.
                let bounds = self.bounds(conj, &layout, &prefix);
                let ranges: Vec<KeyRange> =
                    bounds.iter().filter_map(|b| b.range(&prefix)).collect();
                let range = match (ranges.first(), ranges.last()) {
                    (Some(a), Some(b)) => KeyRange {
                        start: a.start.clone(),
                        end: b.end.clone(),
                    },
                    _ => KeyRange {
                        start: prefix.clone(),
                        end: Some(prefix.clone()),
                    },
                };
                scans.push(JoinScan {
                    def: def.clone(),
                    prefix,
                    range,
                });
            }
            return Some(Branch {
                access: Access::ZigZag { scans },
                reverse: want_flip != reversed_query,
                equalities,
            });
        }
        None
    }

    fn missing_index(&self, conj: &Conj, suffix: &[OrderBy]) -> QueryError {
        let group = self.query.source.group();
        let mut fields: Vec<(FieldPath, FieldMode)> = Vec::new();
        for (f, _) in &conj.eqs {
            fields.push((f.clone(), FieldMode::Ascending));
        }
        for (f, _) in &conj.contains {
            fields.push((f.clone(), FieldMode::ArrayContains));
        }
        for o in suffix {
            fields.push((
                o.field.clone(),
                match o.dir {
                    Direction::Ascending => FieldMode::Ascending,
                    Direction::Descending => FieldMode::Descending,
                },
            ));
        }
        if !suffix.is_empty() && suffix.last().map(|o| o.dir) != Some(self.name_dir()) {
            fields.push((
                FieldPath::document_id(),
                match self.name_dir() {
                    Direction::Ascending => FieldMode::Ascending,
                    Direction::Descending => FieldMode::Descending,
                },
            ));
        }
        let def = IndexDef::new(group, self.scope, fields);
        let spec = def.to_spec();
        let message = if spec.fields.len() == 1 {
            let f = &spec.fields[0];
            // An override replaces the field's automatic indexes, so the entry lists the ones
            // the field has now as well: pasting it adds an index and removes none.
            let mut entries = Vec::new();
            for scope in [QueryScope::Collection, QueryScope::CollectionGroup] {
                let m = self.catalog.single_field_modes(group, &f.field_path, scope);
                for (on, mode) in [
                    (m.ascending, FieldMode::Ascending),
                    (m.descending, FieldMode::Descending),
                    (m.array_contains, FieldMode::ArrayContains),
                ] {
                    if on || (mode == f.mode && scope == self.scope) {
                        let (key, value) = match mode {
                            FieldMode::Ascending => ("order", "ASCENDING"),
                            FieldMode::Descending => ("order", "DESCENDING"),
                            FieldMode::ArrayContains => ("arrayConfig", "CONTAINS"),
                        };
                        entries.push(format!(
                            "{{ \"{key}\": \"{value}\", \"queryScope\": \"{}\" }}",
                            scope.as_str()
                        ));
                    }
                }
            }
            format!(
                "the query requires a single-field index that is not enabled: add this to \"fieldOverrides\" in firestore.indexes.json, in place of any entry for the same field:\n{{\n  \"collectionGroup\": {},\n  \"fieldPath\": {},\n  \"indexes\": [\n    {}\n  ]\n}}",
                json_string(group),
                json_string(&f.field_path.to_string()),
                entries.join(",\n    ")
            )
        } else {
            format!(
                "the query requires an index: add this to \"indexes\" in firestore.indexes.json:\n{}",
                spec.to_json_entry()
            )
        };
        QueryError::MissingIndex {
            message,
            index: spec,
        }
    }
}

/// `s` as a JSON string literal (field paths may hold quotes and backslashes).
fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Plans a validated query.
pub fn plan(catalog: &IndexCatalog, query: &Query) -> Result<Plan, QueryError> {
    let order = normalized_order(query);
    // Scans order by the normalized order up to `__name__`: nothing after it breaks a tie.
    let name_at = order
        .iter()
        .position(|o| o.field.is_document_id())
        .expect("the normalized order has __name__");
    let planner = Planner {
        catalog,
        query,
        order: order[..=name_at].to_vec(),
        scope: match query.source {
            Source::Collection(_) => QueryScope::Collection,
            Source::CollectionGroup(_) => QueryScope::CollectionGroup,
        },
    };
    let conjunctions = dnf(query.filter.as_ref(), MAX_DISJUNCTIONS).ok_or_else(|| {
        QueryError::InvalidArgument(format!(
            "the filter expands to more than {MAX_DISJUNCTIONS} disjunctions"
        ))
    })?;
    let mut branches = Vec::new();
    let mut expanded = 0usize;
    for c in &conjunctions {
        let parts = expand(c);
        expanded += parts.len();
        if expanded > MAX_BRANCHES {
            return Err(QueryError::InvalidArgument(format!(
                "the query expands to more than {MAX_BRANCHES} index scans ('in' and 'array-contains-any' values multiply)"
            )));
        }
        for conj in parts.iter().filter(|c| !c.empty) {
            if let Some(b) = planner.plan_branch(conj)? {
                branches.push(b);
            }
        }
    }
    Ok(Plan {
        branches,
        order,
        reversed: query.limit_type == LimitType::Last,
    })
}

fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Integer(i) => i.to_string(),
        Value::Double(d) => format!("{d:?}"),
        Value::Reference(r) => format!("ref({r})"),
        other => format!("{other:?}"),
    }
}

impl fmt::Display for Plan {
    /// A stable text rendering for plan tests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order: Vec<String> = self
            .order
            .iter()
            .map(|o| format!("{} {}", o.field, dir_name(o.dir)))
            .collect();
        writeln!(
            f,
            "order by {}{}",
            order.join(", "),
            if self.reversed {
                " (read from the end)"
            } else {
                ""
            }
        )?;
        if self.branches.len() > 1 {
            writeln!(f, "merge {} branches", self.branches.len())?;
        }
        for b in &self.branches {
            let dir = if b.reverse { "backward" } else { "forward" };
            let eq = if b.equalities.is_empty() {
                String::new()
            } else {
                format!(" where {}", b.equalities.join(" and "))
            };
            match &b.access {
                Access::Documents { ranges } => {
                    writeln!(f, "  documents {dir}, {} range(s){eq}", ranges.len())?
                }
                Access::Index { def, ranges } => writeln!(
                    f,
                    "  index {} {dir}, {} range(s){eq}",
                    def.canonical(),
                    ranges.len()
                )?,
                Access::ZigZag { scans } => {
                    writeln!(f, "  zig-zag join {dir}{eq}")?;
                    for s in scans {
                        writeln!(f, "    index {}", s.def.canonical())?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Access {
    /// The table this access reads first.
    pub fn table(&self) -> Table {
        match self {
            Access::Documents { .. } => Table::Documents,
            _ => Table::Index,
        }
    }
}
