//! Key bounds of a branch: where its range filters and cursors land in the key space of the
//! index (or documents table) it reads, forward or backward, ascending or descending.

use std::cmp::Ordering;

use super::{Conj, Layout, NameScope, Planner};
use crate::encoding::key::{
    class_bounds, prefix_end, write_name, write_string, write_value, Direction,
};
use crate::kv::KeyRange;
use crate::query::model::{FieldFilter, Operator};
use crate::value::{TypeClass, Value};

/// A position between keys: before or after every key that starts with `bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pos {
    Before(Vec<u8>),
    After(Vec<u8>),
}

/// Key bounds under a prefix, as concrete bytes: `[lo, hi)`, `hi == None` meaning the end
/// of the prefix.
#[derive(Clone, Debug)]
pub(super) struct Bounds {
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

    pub(super) fn range(&self, prefix: &[u8]) -> Option<KeyRange> {
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

impl<'a> Planner<'a> {
    /// Bounds of a branch over one layout: the first component's range filters and cursors.
    pub(super) fn bounds(&self, conj: &Conj, layout: &Layout, prefix: &[u8]) -> Vec<Bounds> {
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
