//! Firestore's write model: a mutation (set, update or delete, with a precondition and field
//! transforms) applied to a base document gives the new document.
//!
//! The same code runs at the authority and on the client. The relay applies a mutation at
//! commit with the commit version and commit time; the web client applies its pending writes
//! over cached documents (latency compensation) with a local context. Applying is a pure
//! function of `(mutation, base, context)`, so both sides compute the same document from the
//! same inputs.
//!
//! The order of one application is fixed:
//! 1. [`Mutation::validate`]: the mutation's own shape (no overlapping paths, numeric
//!    increments, ...). It does not look at the base document.
//! 2. The precondition, then the implicit one of `update` (the document must exist).
//! 3. The write: overwrite, merge, field-path update or delete (`fields.rs`).
//! 4. The transforms, in order, each reading the field as the write left it (`transform.rs`).
//! 5. The limits of [`validate_fields`] on the result.
//!
//! Architecture invariant: a failed application changes nothing; the base is only read, and
//! the new document is returned, never written in place.

mod error;
mod fields;
mod transform;
mod validate;

#[cfg(test)]
mod tests;

pub use error::MutationError;

use super::document::{validate_fields, Document};
use super::path::{DocumentName, FieldPath};
use super::value::{Map, Timestamp, Value};

/// A condition on the stored document, checked before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// No condition.
    None,
    /// `true`: the document must exist (else `NotFound`); `false`: it must not (else
    /// `AlreadyExists`).
    Exists(bool),
    /// The document must exist with exactly this `update_version` (else `FailedPrecondition`).
    /// Transactions use it to revalidate their reads at commit.
    UpdateVersion(u64),
}

/// A change of one field computed from its current value at apply time.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldTransform {
    /// Adds an `Integer` or `Double` operand (numeric rules in `transform.rs`).
    Increment(Value),
    /// Keeps the numerically larger of the field and the operand.
    Maximum(Value),
    /// Keeps the numerically smaller of the field and the operand.
    Minimum(Value),
    /// Writes the commit time ([`ApplyContext::commit_time`]).
    ServerTimestamp,
    /// Appends each element not already present (strict equality).
    ArrayUnion(Vec<Value>),
    /// Removes every element strictly equal to one of these.
    ArrayRemove(Vec<Value>),
}

/// How a `set` combines its data with the stored document.
#[derive(Clone, Debug, PartialEq)]
pub enum SetMerge {
    /// Replace the whole document (`set(data)`).
    Overwrite,
    /// Write every leaf of the data, keeping other fields (`set(data, { merge: true })`).
    /// Nested maps merge; an empty map is a leaf and replaces the field with `{}`.
    MergeAll,
    /// Write only these paths, copied from the data (`set(data, { mergeFields })`).
    MergeFields(Vec<FieldPath>),
}

/// What a mutation writes.
#[derive(Clone, Debug, PartialEq)]
pub enum MutationKind {
    /// Creates or replaces (or merges into) the document.
    Set { fields: Map, merge: SetMerge },
    /// Sets each path to `Some(value)` or deletes it on `None` (`FieldValue.delete()`).
    /// The document must exist.
    Update {
        fields: Vec<(FieldPath, Option<Value>)>,
    },
    /// Removes the document; deleting an absent document succeeds.
    Delete,
}

/// One write to one document.
#[derive(Clone, Debug, PartialEq)]
pub struct Mutation {
    /// The document written.
    pub name: DocumentName,
    /// What the write does: set (overwrite or merge), update by field path, or delete.
    pub kind: MutationKind,
    /// What must hold of the stored document for the write to apply.
    pub precondition: Precondition,
    /// Applied in order after the write, each to the field as the write left it.
    pub transforms: Vec<(FieldPath, FieldTransform)>,
    /// `FieldValue.delete()` inside `set(..., { merge })`: only valid with a merging set.
    pub field_deletes_in_merge: Vec<FieldPath>,
}

/// A client's local estimate of a mutation over a document it has never seen (not cached:
/// neither read nor received, as opposed to known to be absent); see
/// [`Mutation::apply_to_unknown`].
#[derive(Clone, Debug, PartialEq)]
pub enum UnknownBase {
    /// The mutation depends on the stored document (an `update`, or a precondition on its
    /// existence or version): the document stays unknown, and the authority decides.
    Stays,
    /// The mutation writes the document whatever it was: the result, as over an absent one.
    Becomes(Option<Document>),
}

/// What the applier supplies: the relay's commit, or the client's local estimate of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApplyContext {
    /// Becomes the new document's `update_version` (and `create_version` when it is created).
    pub commit_version: u64,
    /// The value of `ServerTimestamp` transforms.
    pub commit_time: Timestamp,
}

impl Mutation {
    /// The paths of a merge's field deletes and transforms, sorted: what `merge_fields`
    /// paths and empty maps are checked against by binary search.
    pub(crate) fn merge_sentinels(&self) -> Vec<&FieldPath> {
        let mut sentinels: Vec<&FieldPath> = self
            .field_deletes_in_merge
            .iter()
            .chain(self.transforms.iter().map(|(p, _)| p))
            .collect();
        crate::sort::sort(&mut sentinels);
        sentinels
    }

    fn of(name: DocumentName, kind: MutationKind) -> Mutation {
        Mutation {
            name,
            kind,
            precondition: Precondition::None,
            transforms: Vec::new(),
            field_deletes_in_merge: Vec::new(),
        }
    }

    /// `set(data)`: overwrite.
    pub fn set(name: DocumentName, fields: Map) -> Mutation {
        Mutation::of(
            name,
            MutationKind::Set {
                fields,
                merge: SetMerge::Overwrite,
            },
        )
    }

    /// `set(data, options)` with an explicit merge mode.
    pub fn set_merge(name: DocumentName, fields: Map, merge: SetMerge) -> Mutation {
        Mutation::of(name, MutationKind::Set { fields, merge })
    }

    /// `update(...)` with field paths; `None` deletes the field.
    pub fn update(name: DocumentName, fields: Vec<(FieldPath, Option<Value>)>) -> Mutation {
        Mutation::of(name, MutationKind::Update { fields })
    }

    /// `delete()`.
    pub fn delete(name: DocumentName) -> Mutation {
        Mutation::of(name, MutationKind::Delete)
    }

    /// Adds a field transform (builder style).
    pub fn with_transform(mut self, path: FieldPath, transform: FieldTransform) -> Mutation {
        self.transforms.push((path, transform));
        self
    }

    /// Replaces the precondition (builder style).
    pub fn with_precondition(mut self, precondition: Precondition) -> Mutation {
        self.precondition = precondition;
        self
    }

    /// Adds a `FieldValue.delete()` of a merging set (builder style).
    pub fn with_field_delete(mut self, path: FieldPath) -> Mutation {
        self.field_deletes_in_merge.push(path);
        self
    }

    /// Checks the mutation's own shape, independent of any stored document. [`apply`]
    /// calls it too, so an invalid mutation is never half-applied.
    ///
    /// [`apply`]: Mutation::apply
    pub fn validate(&self) -> Result<(), MutationError> {
        validate::validate(self)
    }

    /// Whether [`Mutation::apply`]'s result depends on the stored document. A plain overwrite
    /// or delete (no precondition, no transform) does not, except for the new document's
    /// `create_version`, which it keeps from the stored one: a writer that skips reading the
    /// base also gives up that.
    pub fn reads_base(&self) -> bool {
        let blind = matches!(
            &self.kind,
            MutationKind::Delete
                | MutationKind::Set {
                    merge: SetMerge::Overwrite,
                    ..
                }
        );
        !(blind && self.precondition == Precondition::None && self.transforms.is_empty())
    }

    /// The document after this mutation, or `None` if it is deleted (or stays absent).
    ///
    /// `base` is the stored document named `self.name`, or `None` if there is none. Passing
    /// a document with another name is a caller bug and panics.
    pub fn apply(
        &self,
        base: Option<&Document>,
        ctx: &ApplyContext,
    ) -> Result<Option<Document>, MutationError> {
        self.apply_with(base, ctx, true)
    }

    /// The document the write would leave if its precondition held, and an `update` of an
    /// absent document wrote its fields into an empty one: what security rules judge a
    /// write by before anything about the stored document (its existence, its version) may
    /// be told to the caller.
    pub fn apply_as_intended(
        &self,
        base: Option<&Document>,
        ctx: &ApplyContext,
    ) -> Result<Option<Document>, MutationError> {
        self.apply_with(base, ctx, false)
    }

    fn apply_with(
        &self,
        base: Option<&Document>,
        ctx: &ApplyContext,
        checked: bool,
    ) -> Result<Option<Document>, MutationError> {
        if let Some(b) = base {
            assert_eq!(b.name, self.name, "mutation applied to another document");
        }
        self.validate()?;
        if checked {
            self.check_precondition(base)?;
        }
        let mut fields = match (&self.kind, base) {
            (MutationKind::Delete, _) => return Ok(None),
            (MutationKind::Update { .. }, None) if checked => {
                return Err(MutationError::NotFound {
                    name: self.name.clone(),
                })
            }
            (MutationKind::Update { fields }, None) => {
                fields::apply_update(&Default::default(), fields)
            }
            (MutationKind::Set { fields, merge }, base) => {
                let base = base.map(|b| &*b.fields);
                fields::apply_set(base, fields, merge, self)
            }
            (MutationKind::Update { fields }, Some(base)) => {
                fields::apply_update(&base.fields, fields)
            }
        };
        for (path, t) in &self.transforms {
            let current = super::document::get_path(&fields, path.segments());
            let new = t.apply(current, ctx);
            fields::set_path(&mut fields, path.segments(), new);
        }
        validate_fields(&fields).map_err(|source| MutationError::Document {
            name: self.name.clone(),
            source,
        })?;
        Ok(Some(Document {
            name: self.name.clone(),
            fields: fields.into(),
            create_version: base.map_or(ctx.commit_version, |b| b.create_version),
            update_version: ctx.commit_version,
        }))
    }

    /// Latency compensation over an unknown base, as Firestore's client does it: a write that
    /// needs the stored document (`update`, `Exists(true)`, `UpdateVersion`) is not applied
    /// locally and invents no document; it is left to the authority, which refuses it with
    /// `NotFound` (or `FailedPrecondition`) if the document is not there. Any other write
    /// (set, merge, create, delete) applies as over an absent document. Errors are only the
    /// mutation's own shape and the limits of its result, never the base's state.
    pub fn apply_to_unknown(&self, ctx: &ApplyContext) -> Result<UnknownBase, MutationError> {
        self.validate()?;
        let needs_base = matches!(self.kind, MutationKind::Update { .. })
            || matches!(
                self.precondition,
                Precondition::Exists(true) | Precondition::UpdateVersion(_)
            );
        if needs_base {
            return Ok(UnknownBase::Stays);
        }
        self.apply(None, ctx).map(UnknownBase::Becomes)
    }

    fn check_precondition(&self, base: Option<&Document>) -> Result<(), MutationError> {
        let name = || self.name.clone();
        match (self.precondition, base) {
            (Precondition::None, _)
            | (Precondition::Exists(true), Some(_))
            | (Precondition::Exists(false), None) => Ok(()),
            (Precondition::Exists(true), None) => Err(MutationError::NotFound { name: name() }),
            (Precondition::Exists(false), Some(_)) => {
                Err(MutationError::AlreadyExists { name: name() })
            }
            (Precondition::UpdateVersion(expected), base) => {
                let actual = base.map(|b| b.update_version);
                if actual == Some(expected) {
                    Ok(())
                } else {
                    Err(MutationError::FailedPrecondition {
                        name: name(),
                        expected,
                        actual,
                    })
                }
            }
        }
    }
}
