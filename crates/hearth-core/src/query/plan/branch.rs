//! Planning one branch: a point read, a documents-table read, or the one index that serves
//! every equality and the order; failing those, a zig-zag join or the missing-index error.

use super::render::render_value;
use super::{Access, Branch, Conj, Layout, NameScope, Planner};
use crate::encoding::key::{write_value, Direction};
use crate::index::config::{FieldMode, QueryScope};
use crate::index::def::{mode_direction, IndexCatalog, IndexDef};
use crate::index::keys::{collection_prefix, document_key, field_direction, index_prefix};
use crate::kv::KeyRange;
use crate::path::{CollectionPath, FieldPath};
use crate::query::model::{LimitType, OrderBy};
use crate::query::validate::QueryError;
use crate::value::Value;

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

    pub(super) fn name_dir(&self) -> Direction {
        self.order
            .last()
            .expect("normalized order ends with __name__")
            .dir
    }

    /// Whether `def` serves the branch, covering `covered` equality/contains fields; returns
    /// whether its key order is the reverse of query order.
    pub(super) fn fits(
        &self,
        def: &IndexDef,
        conj: &Conj,
        suffix: &[OrderBy],
        whole: bool,
    ) -> Option<(bool, usize)> {
        if def.fields().len() < suffix.len() {
            return None;
        }
        let p = def.fields().len() - suffix.len();
        let (pre, suf) = def.fields().split_at(p);
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
        let name_flip = def.name_dir() != self.name_dir();
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
            .filter(|d| d.collection_group() == group && d.scope() == self.scope)
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
    pub(super) fn eq_prefix(&self, def: &IndexDef, conj: &Conj, p: usize) -> Vec<u8> {
        let parent = self
            .parent()
            .cloned()
            .unwrap_or_else(|| CollectionPath::parse("unused").expect("a valid collection path"));
        let mut prefix = index_prefix(def, &parent);
        for (f, m) in &def.fields()[..p] {
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

    pub(super) fn layout<'b>(&self, def: &'b IndexDef, p: usize, flipped: bool) -> Layout<'b> {
        let mut components: Vec<(Option<&FieldPath>, Direction)> = def.fields()[p..]
            .iter()
            .map(|(f, m)| (Some(f), field_direction(*m)))
            .collect();
        components.push((None, def.name_dir()));
        Layout {
            components,
            name_scope: match def.scope() {
                QueryScope::Collection => NameScope::Id,
                QueryScope::CollectionGroup => NameScope::Full,
            },
            flipped,
        }
    }

    pub(super) fn plan_branch(&self, conj: &Conj) -> Result<Option<Branch>, QueryError> {
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
}
