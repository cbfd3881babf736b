//! What a list proof knows of a field the query constrains without fixing it: a range
//! (`where('age', '>', 20)`: a number above 20, since a range filter only matches values
//! of its bound's type) and values it cannot be (`!=`, `not-in`). A rule's comparison of
//! such a field with a constant is decided when every value in the range decides it the
//! same way, and unknown otherwise.

use std::cmp::Ordering;

use hearth_core::query::model::Operator;

use crate::eval::{equal, order, Error, Val};

/// The values a field may hold in a query's results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bounds {
    /// The lower bound and whether it is included.
    pub lo: Option<(Val, bool)>,
    /// The upper bound and whether it is included.
    pub hi: Option<(Val, bool)>,
    /// Values the field does not hold.
    pub not: Vec<Val>,
    /// Values the field, a list, holds (`array-contains`).
    pub contains: Vec<Val>,
    /// Whether the field is known to be a list (`array-contains`, `array-contains-any`).
    pub list: bool,
    /// The field's path in the document (for explanations).
    pub field: Vec<String>,
}

/// A comparison the list proof could not decide, as the query filter that would decide it:
/// `where(field, op, value)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Hint {
    /// The document field.
    pub field: Vec<String>,
    /// The operator, with the field on the left.
    pub op: &'static str,
    /// The value compared with.
    pub value: Val,
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "where('{}', '{}', {})",
            self.field.join("."),
            self.op,
            literal(&self.value)
        )
    }
}

/// A value as the JavaScript literal an app would write in the filter.
fn literal(v: &Val) -> String {
    match v {
        Val::Str(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Val::Int(i) => i.to_string(),
        Val::Float(x) => x.to_string(),
        Val::Bool(b) => b.to_string(),
        Val::Null => "null".into(),
        Val::List(items) | Val::Set(items) => {
            let items: Vec<String> = items.iter().map(literal).collect();
            format!("[{}]", items.join(", "))
        }
        v => format!("<a {}>", crate::eval::type_name(v)),
    }
}

/// The filter that would decide `a op b`, when one side is a field the query leaves open
/// and the other a known value.
pub fn hint(op: &str, a: &Val, b: &Val) -> Option<Hint> {
    let (field, op, value) = match (a, b) {
        (Val::Range(r), v) if !v.is_uncertain() => (&r.field, op, v),
        (v, Val::Range(r)) if !v.is_uncertain() => (
            &r.field,
            match op {
                "<" => ">",
                ">" => "<",
                "<=" => ">=",
                ">=" => "<=",
                "in" => "array-contains",
                op => op,
            },
            v,
        ),
        _ => return None,
    };
    let op = match op {
        "==" => "==",
        "!=" => "!=",
        "<" => "<",
        "<=" => "<=",
        ">" => ">",
        ">=" => ">=",
        "in" if matches!(value, Val::List(_) | Val::Set(_)) => "in",
        "array-contains" => "array-contains",
        _ => return None,
    };
    (!field.is_empty()).then(|| Hint {
        field: field.clone(),
        op,
        value: value.clone(),
    })
}

/// Whether a range filter on `v` tells its type: numbers, strings and timestamps.
fn rangeable(v: &Val) -> bool {
    matches!(
        v,
        Val::Int(_) | Val::Float(_) | Val::Str(_) | Val::Timestamp(_)
    )
}

impl Bounds {
    /// Narrows the bounds by the filter `field op v`; filters it cannot use are ignored
    /// (knowing less is always sound).
    pub fn narrow(&mut self, op: Operator, v: Val) {
        match op {
            // `!=` compares as the rules do (numbers by value), and excludes null.
            Operator::NotEqual => {
                self.not.push(v);
                self.not.push(Val::Null);
            }
            // `not-in` compares strictly (`not-in [1]` keeps 1.0), the rules by value: only
            // values without numbers are known not to be held. It excludes null.
            Operator::NotIn => {
                if let Val::List(items) = v {
                    self.not
                        .extend(items.into_iter().filter(|i| !holds_number(i)));
                }
                self.not.push(Val::Null);
            }
            Operator::ArrayContains => {
                self.list = true;
                self.contains.push(v);
            }
            Operator::ArrayContainsAny => self.list = true,
            Operator::GreaterThan | Operator::GreaterThanOrEqual if rangeable(&v) => {
                let new = (v, op == Operator::GreaterThanOrEqual);
                self.lo = Some(match self.lo.take() {
                    None => new,
                    Some(old) => tighter(old, new, Ordering::Greater),
                });
            }
            Operator::LessThan | Operator::LessThanOrEqual if rangeable(&v) => {
                let new = (v, op == Operator::LessThanOrEqual);
                self.hi = Some(match self.hi.take() {
                    None => new,
                    Some(old) => tighter(old, new, Ordering::Less),
                });
            }
            _ => {}
        }
    }

    /// The type the bounds tell, if any.
    fn bound(&self) -> Option<&Val> {
        self.lo.as_ref().or(self.hi.as_ref()).map(|(v, _)| v)
    }

    /// `x is ty` for every `x` in the bounds: `None` when unknown.
    pub fn is(&self, ty: &str) -> Option<bool> {
        if self.list {
            return Some(ty == "list");
        }
        let b = self.bound()?;
        match (b, ty) {
            (Val::Int(_) | Val::Float(_), "number") => Some(true),
            (Val::Int(_) | Val::Float(_), "int" | "float") => None,
            (Val::Str(_), "string") | (Val::Timestamp(_), "timestamp") => Some(true),
            _ => Some(false),
        }
    }

    /// `x op c` for every `x` in the bounds (`flipped`: `c op x`); `Ok(None)` when it
    /// depends on which.
    pub fn compare(&self, op: &str, c: &Val, flipped: bool) -> Result<Option<bool>, Error> {
        let op = match (op, flipped) {
            ("<", true) => ">",
            (">", true) => "<",
            ("<=", true) => ">=",
            (">=", true) => "<=",
            (op, _) => op,
        };
        match op {
            "==" | "!=" => {
                let eq = self.equals(c)?;
                Ok(eq.map(|e| e == (op == "==")))
            }
            // `c in x`, `x` a list known to hold some values.
            "in" if flipped => Ok(self.contains.iter().any(|x| equal(x, c)).then_some(true)),
            "<" | "<=" | ">" | ">=" => {
                // Every x in the bounds is of the bound's type: comparing it with another
                // type is an error, as it would be for any of them.
                let cmp = |b: &Val| order(b, c);
                let lo = self.lo.as_ref().map(|(v, inc)| cmp(v).map(|o| (o, *inc)));
                let hi = self.hi.as_ref().map(|(v, inc)| cmp(v).map(|o| (o, *inc)));
                let (lo, hi) = (lo.transpose()?, hi.transpose()?);
                use Ordering::*;
                // (all hold, none hold)
                let (all, none) = match op {
                    ">" => (
                        lo.is_some_and(|(o, inc)| o == Greater || (o == Equal && !inc)),
                        hi.is_some_and(|(o, _)| o != Greater),
                    ),
                    ">=" => (
                        lo.is_some_and(|(o, _)| o != Less),
                        hi.is_some_and(|(o, inc)| o == Less || (o == Equal && !inc)),
                    ),
                    "<" => (
                        hi.is_some_and(|(o, inc)| o == Less || (o == Equal && !inc)),
                        lo.is_some_and(|(o, _)| o != Less),
                    ),
                    _ => (
                        hi.is_some_and(|(o, _)| o != Greater),
                        lo.is_some_and(|(o, inc)| o == Greater || (o == Equal && !inc)),
                    ),
                };
                Ok(if all {
                    Some(true)
                } else if none {
                    Some(false)
                } else {
                    None
                })
            }
            _ => Ok(None),
        }
    }

    /// Whether every `x` equals `c` (`Some(false)`: none does).
    fn equals(&self, c: &Val) -> Result<Option<bool>, Error> {
        if self.not.iter().any(|n| equal(n, c)) {
            return Ok(Some(false));
        }
        if self.list && !matches!(c, Val::List(_)) {
            return Ok(Some(false));
        }
        if let Some(b) = self.bound() {
            if order(b, c).is_err() {
                // Another type: no value in the bounds equals it.
                return Ok(Some(false));
            }
            if self.compare(">", c, false)? == Some(true)
                || self.compare("<", c, false)? == Some(true)
            {
                return Ok(Some(false));
            }
        }
        Ok(None)
    }
}

/// Whether `v` is or holds a number (whose equality the engine and the rules see apart).
fn holds_number(v: &Val) -> bool {
    match v {
        Val::Int(_) | Val::Float(_) => true,
        Val::List(items) | Val::Set(items) => items.iter().any(holds_number),
        Val::Map(m) => m.values().any(holds_number),
        _ => false,
    }
}

/// Of two bounds on one side, the one that says more (`wanted`: Greater for a lower
/// bound); the first when they do not compare.
fn tighter(old: (Val, bool), new: (Val, bool), wanted: Ordering) -> (Val, bool) {
    match order(&new.0, &old.0) {
        Ok(o) if o == wanted => new,
        Ok(Ordering::Equal) => (old.0, old.1 && new.1),
        _ => old,
    }
}
