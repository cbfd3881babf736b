//! Field transforms: the new value of one field from its current value and the commit.
//!
//! Each rule is total: any current value (or none) gives a result, so a transform never fails
//! at apply time; malformed operands are refused earlier by validation.
//!
//! Numbers (Firestore's rules):
//! - `Increment`: integer + integer stays an integer and saturates at the `i64` bounds;
//!   if either side is a double the sum is a double. A missing or non-numeric field counts
//!   as absent, and the result is the operand itself (keeping its type).
//! - `Maximum` / `Minimum`: a missing or non-numeric field takes the operand. Otherwise the
//!   numerically larger (smaller) value wins with its own type; on a numeric tie (`3` and
//!   `3.0`, `0` and `-0.0`) the stored value stays. NaN on either side gives NaN.
//!
//! Arrays: `ArrayUnion` and `ArrayRemove` compare elements with the strict equality of
//! `Value`'s `PartialEq` (an int never equals a double, `0.0` differs from `-0.0`, NaN equals
//! NaN), through a hash consistent with it, so one transform costs time linear in the array
//! and the operand rather than their product.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use crate::value::Value;

use super::{ApplyContext, FieldTransform};

impl FieldTransform {
    /// The field's value after this transform, given its value before (`None` if absent).
    pub fn apply(&self, current: Option<&Value>, ctx: &ApplyContext) -> Value {
        let numeric = current.filter(|v| matches!(v, Value::Integer(_) | Value::Double(_)));
        match self {
            FieldTransform::Increment(operand) => increment(numeric, operand),
            FieldTransform::Maximum(operand) => extremum(numeric, operand, Ordering::Greater),
            FieldTransform::Minimum(operand) => extremum(numeric, operand, Ordering::Less),
            FieldTransform::ServerTimestamp => Value::Timestamp(ctx.commit_time),
            FieldTransform::ArrayUnion(elements) => Value::Array(array_union(current, elements)),
            FieldTransform::ArrayRemove(elements) => {
                let remove: HashSet<Strict<'_>> = elements.iter().map(Strict).collect();
                let mut out = array_of(current);
                out.retain(|e| !remove.contains(&Strict(e)));
                Value::Array(out)
            }
        }
    }
}

/// The current array (its elements in place, repeats kept), then each element of `elements`
/// that is in neither the array nor earlier in `elements`, in operand order.
fn array_union(current: Option<&Value>, elements: &[Value]) -> Vec<Value> {
    let base: &[Value] = match current {
        Some(Value::Array(a)) => a,
        _ => &[],
    };
    let mut seen: HashSet<Strict<'_>> = base.iter().map(Strict).collect();
    let mut out = base.to_vec();
    for e in elements {
        if seen.insert(Strict(e)) {
            out.push(e.clone());
        }
    }
    out
}

/// A value keyed by strict equality (`Value`'s `PartialEq`), for hash sets.
#[derive(Clone, Copy)]
struct Strict<'a>(&'a Value);

impl PartialEq for Strict<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

/// `PartialEq` for `Value` is an equivalence (NaN equals NaN), so the wrapper is `Eq`.
impl Eq for Strict<'_> {}

impl Hash for Strict<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        hash_strict(self.0, h);
    }
}

/// Hashes `v` so that strictly equal values hash alike: a tag per type (an int and a double
/// never collide by construction, though they may by chance), doubles by their bits with
/// every NaN as one, and containers element by element.
fn hash_strict<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Boolean(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Value::Integer(i) => {
            h.write_u8(2);
            i.hash(h);
        }
        Value::Double(d) => {
            h.write_u8(3);
            h.write_u64(if d.is_nan() {
                f64::NAN.to_bits()
            } else {
                d.to_bits()
            });
        }
        Value::Timestamp(t) => {
            h.write_u8(4);
            t.hash(h);
        }
        Value::String(s) => {
            h.write_u8(5);
            s.hash(h);
        }
        Value::Bytes(b) => {
            h.write_u8(6);
            b.hash(h);
        }
        Value::Reference(r) => {
            h.write_u8(7);
            r.hash(h);
        }
        Value::GeoPoint(g) => {
            h.write_u8(8);
            h.write_u64(g.latitude().to_bits());
            h.write_u64(g.longitude().to_bits());
        }
        Value::Array(a) => {
            h.write_u8(9);
            h.write_usize(a.len());
            for x in a {
                hash_strict(x, h);
            }
        }
        Value::Map(m) => {
            h.write_u8(10);
            h.write_usize(m.len());
            for (k, x) in m {
                k.hash(h);
                hash_strict(x, h);
            }
        }
    }
}

/// The current array, or `[]` for a missing or non-array field.
fn array_of(current: Option<&Value>) -> Vec<Value> {
    match current {
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    }
}

fn increment(current: Option<&Value>, operand: &Value) -> Value {
    match (current, operand) {
        (Some(Value::Integer(a)), Value::Integer(b)) => Value::Integer(a.saturating_add(*b)),
        (Some(Value::Integer(a)), Value::Double(b)) => Value::Double(*a as f64 + b),
        (Some(Value::Double(a)), Value::Integer(b)) => Value::Double(a + *b as f64),
        (Some(Value::Double(a)), Value::Double(b)) => Value::Double(a + b),
        _ => operand.clone(),
    }
}

/// The operand if it is strictly beyond `current` in direction `wins`, else `current`.
fn extremum(current: Option<&Value>, operand: &Value, wins: Ordering) -> Value {
    let Some(current) = current else {
        return operand.clone();
    };
    if current.is_nan() {
        return current.clone();
    }
    if operand.is_nan() || operand.cmp_order(current) == wins {
        return operand.clone();
    }
    current.clone()
}
