//! Zig-zag joins: several indexes that each cover part of a branch's equalities and share
//! one ordered suffix, scanned together so that matching suffixes are the results.

use super::{Access, Branch, Conj, JoinScan, Planner};
use crate::index::def::IndexDef;
use crate::kv::KeyRange;
use crate::path::FieldPath;
use crate::query::model::{LimitType, OrderBy};

impl Planner<'_> {
    pub(super) fn plan_zigzag(
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
            crate::sort::sort_by_key(&mut parts, |(_, p)| std::cmp::Reverse(*p));
            let mut chosen: Vec<(IndexDef, usize)> = Vec::new();
            let mut covered: Vec<FieldPath> = Vec::new();
            let needed = conj.eqs.len() + conj.contains.len();
            for (def, p) in parts {
                if def.fields()[..p].iter().all(|(f, _)| covered.contains(f)) {
                    continue;
                }
                if let Some((first, _)) = chosen.first() {
                    if first.fields()[first.fields().len() - suffix.len()..] != def.fields()[p..]
                        || first.name_dir() != def.name_dir()
                    {
                        continue;
                    }
                }
                // Field identity is by path; contains and equality on one path both count.
                covered.extend(def.fields()[..p].iter().map(|(f, _)| f.clone()));
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
}
