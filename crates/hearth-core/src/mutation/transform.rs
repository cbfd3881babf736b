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

use std::cmp::Ordering;

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
            FieldTransform::ArrayUnion(elements) => {
                let mut out = array_of(current);
                for e in elements {
                    // Checking against `out` (not the base) also de-duplicates the operand.
                    if !out.contains(e) {
                        out.push(e.clone());
                    }
                }
                Value::Array(out)
            }
            FieldTransform::ArrayRemove(elements) => {
                let mut out = array_of(current);
                out.retain(|e| !elements.contains(e));
                Value::Array(out)
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
