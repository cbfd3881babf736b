//! The evaluator: an expression's value under one request, with Firebase's error handling
//! (an error makes its `allow` false; `&&` and `||` absorb an error when their other side
//! decides), a step budget and a call depth limit. `Val::Unknown` stands for a value the
//! list proof does not know (a document's field no query constraint fixes): whatever
//! depends on it is unknown, and an unknown condition does not allow.

use std::collections::BTreeMap;

use hearth_core::document::Document;
use hearth_core::path::DocumentName;
use hearth_core::value::{Timestamp, Value};

use crate::ast::{Expr, Function, PathPart};
use crate::time;
use crate::Reader;

/// A map the list proof knows only in part (a document's data, or a map inside it that a
/// filter on one of its fields reaches): a key it lacks is unknown, not missing, and a key
/// it holds is known to be present. Its own variant, so no stored map can pass for one.
#[derive(Clone, Debug, PartialEq)]
pub struct Partial {
    /// The keys the query fixes or bounds, with what is known of their values.
    pub known: BTreeMap<String, Val>,
    /// The map's path in the document (empty: the document's data), for explanations.
    pub path: Vec<String>,
}

/// Most evaluation steps for one request.
const MAX_STEPS: u64 = 100_000;
/// Deepest chain of function calls (Firebase's limit).
const MAX_CALL_DEPTH: usize = 20;
/// Most nested evaluations (an expression inside an expression, or inside a call) at once.
const MAX_NESTING: usize = 128;
/// Longest string or list an expression may build.
const MAX_SIZE: usize = 100_000;

/// A rules value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// `null`.
    Null,
    /// A bool.
    Bool(bool),
    /// An int.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Val>),
    /// A map.
    Map(BTreeMap<String, Val>),
    /// A set (distinct elements, in insertion order).
    Set(Vec<Val>),
    /// A path, by segments.
    Path(Vec<String>),
    /// A timestamp.
    Timestamp(Timestamp),
    /// A lat/lng.
    LatLng(f64, f64),
    /// A duration, in nanoseconds.
    Duration(i128),
    /// Not known to the list proof.
    Unknown,
    /// A field the list proof knows a range of (a query's range or `!=` filter).
    Range(Box<crate::proof::Bounds>),
    /// A map the list proof knows in part.
    Partial(Box<Partial>),
}

impl Val {
    /// Whether the list proof does not know this value exactly.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Val::Unknown | Val::Range(_))
    }

    /// Whether the list proof does not know all of this value: it is unknown, or a map
    /// known in part, or a list, set or map holding such a value at any depth. Anything
    /// computed from an uncertain value is unknown, but for the few operations that look
    /// only at what is known (a present key of a partial map).
    pub fn is_uncertain(&self) -> bool {
        match self {
            Val::Unknown | Val::Range(_) | Val::Partial(_) => true,
            Val::List(items) | Val::Set(items) => items.iter().any(Val::is_uncertain),
            Val::Map(m) => m.values().any(Val::is_uncertain),
            _ => false,
        }
    }
}

/// Why an expression has no value; it makes its `allow` false.
pub type Error = String;

type R = Result<Val, Error>;

/// A stored value as a rules value.
pub fn from_value(v: &Value) -> Val {
    match v {
        Value::Null => Val::Null,
        Value::Boolean(b) => Val::Bool(*b),
        Value::Integer(i) => Val::Int(*i),
        Value::Double(d) => Val::Float(*d),
        Value::Timestamp(t) => Val::Timestamp(*t),
        Value::String(s) => Val::Str(s.clone()),
        Value::Bytes(b) => Val::Bytes(b.clone()),
        Value::Reference(n) => Val::Path(n.segments().to_vec()),
        Value::GeoPoint(g) => Val::LatLng(g.latitude(), g.longitude()),
        Value::Array(a) => Val::List(a.iter().map(from_value).collect()),
        Value::Map(m) => Val::Map(m.iter().map(|(k, v)| (k.clone(), from_value(v))).collect()),
    }
}

/// `resource` for document `doc` of database `db`.
pub fn resource(db: &str, doc: &Document) -> Val {
    let data = Val::Map(
        doc.fields
            .iter()
            .map(|(k, v)| (k.clone(), from_value(v)))
            .collect(),
    );
    let mut m = BTreeMap::new();
    m.insert("data".to_owned(), data);
    m.insert("id".to_owned(), Val::Str(doc.name.id().to_owned()));
    m.insert("__name__".to_owned(), Val::Path(full_path(db, &doc.name)));
    Val::Map(m)
}

/// `/databases/{db}/documents/...` of a document, by segments.
pub fn full_path(db: &str, name: &DocumentName) -> Vec<String> {
    let mut p = vec![
        "databases".to_owned(),
        db.to_owned(),
        "documents".to_owned(),
    ];
    p.extend(name.segments().iter().cloned());
    p
}

/// One evaluation: the variables in scope, the functions visible, the reader and budgets.
pub struct Env<'a> {
    /// Variables: `request`, `resource`, path variables, function parameters, lets.
    pub vars: Vec<(String, Val)>,
    /// Functions visible, innermost last.
    pub functions: Vec<&'a Function>,
    /// Reads documents for `get()` and friends.
    pub reader: &'a dyn Reader,
    /// The database, for paths.
    pub database: &'a str,
    /// Documents the rules may still read.
    pub reads_left: usize,
    /// Documents read so far: reading one again does not count against the limit.
    pub read: Vec<DocumentName>,
    /// Steps left.
    pub steps: u64,
    /// Current call depth.
    pub depth: usize,
    /// Current depth of nested evaluations (expressions within calls).
    pub nesting: usize,
    /// Comparisons the list proof could not decide, each a filter that would decide it.
    pub hints: Vec<crate::proof::Hint>,
}

impl<'a> Env<'a> {
    /// A fresh evaluation with `vars` and `functions`.
    pub fn new(
        vars: Vec<(String, Val)>,
        functions: Vec<&'a Function>,
        reader: &'a dyn Reader,
        database: &'a str,
        reads: usize,
    ) -> Env<'a> {
        Env {
            vars,
            functions,
            reader,
            database,
            reads_left: reads,
            read: Vec::new(),
            steps: MAX_STEPS,
            depth: 0,
            nesting: 0,
            hints: Vec::new(),
        }
    }

    fn var(&self, name: &str) -> Option<&Val> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// The value of `e`.
    pub fn eval(&mut self, e: &Expr) -> R {
        // Expressions nest up to the parser's limit inside calls up to theirs: the product
        // is bounded too, so an evaluation fits a small thread stack.
        if self.nesting >= MAX_NESTING {
            return Err(format!(
                "expressions and calls nested more than {MAX_NESTING} deep"
            ));
        }
        self.nesting += 1;
        let value = self.eval_inner(e);
        self.nesting -= 1;
        value
    }

    fn eval_inner(&mut self, e: &Expr) -> R {
        self.steps = self
            .steps
            .checked_sub(1)
            .ok_or("the rules took too many steps")?;
        match e {
            Expr::Null(_) => Ok(Val::Null),
            Expr::Bool(b, _) => Ok(Val::Bool(*b)),
            Expr::Int(i, _) => Ok(Val::Int(*i)),
            Expr::Float(f, _) => Ok(Val::Float(*f)),
            Expr::Str(s, _) => Ok(Val::Str(s.clone())),
            Expr::Ident(..) | Expr::Member(..) if self.lookup(e).is_some() => {
                // A variable or a path of map keys into one: only the value reached is
                // cloned, not the maps on the way (`request` holds whole documents).
                Ok(self.lookup(e).cloned().unwrap_or(Val::Null))
            }
            Expr::Ident(n, _) => match self.var(n) {
                Some(v) => Ok(v.clone()),
                None => Err(format!("`{n}` is not defined")),
            },
            Expr::List(items, _) => Ok(Val::List(
                items
                    .iter()
                    .map(|i| self.eval(i))
                    .collect::<Result<_, _>>()?,
            )),
            Expr::Map(entries, _) => {
                let mut m = BTreeMap::new();
                for (k, v) in entries {
                    let Val::Str(k) = self.eval(k)? else {
                        return Err("a map key must be a string".into());
                    };
                    let v = self.eval(v)?;
                    m.insert(k, v);
                }
                Ok(Val::Map(m))
            }
            Expr::Path(parts, _) => {
                let mut segs = Vec::new();
                for p in parts {
                    match p {
                        PathPart::Literal(s) => segs.push(s.clone()),
                        PathPart::Interpolated(e) => match self.eval(e)? {
                            Val::Str(s) => segs.push(s),
                            Val::Path(p) => segs.extend(p),
                            Val::Int(i) => segs.push(i.to_string()),
                            Val::Unknown => return Ok(Val::Unknown),
                            _ => return Err("a path segment must be a string".into()),
                        },
                    }
                }
                Ok(Val::Path(segs))
            }
            Expr::Member(target, name, _) => {
                let t = self.eval(target)?;
                member(t, name)
            }
            Expr::Index(target, i, _) => {
                let t = self.eval(target)?;
                let i = self.eval(i)?;
                index(t, i)
            }
            Expr::Slice(target, i, j, _) => {
                let (t, i, j) = (self.eval(target)?, self.eval(i)?, self.eval(j)?);
                slice(t, i, j)
            }
            Expr::Call(f, args, _) => self.call(f, args),
            Expr::Unary(op, a, _) => match (*op, self.eval(a)?) {
                (_, v) if v.is_unknown() => Ok(Val::Unknown),
                ("!", Val::Bool(b)) => Ok(Val::Bool(!b)),
                ("-", Val::Int(i)) => i.checked_neg().map(Val::Int).ok_or("int overflow".into()),
                ("-", Val::Float(f)) => Ok(Val::Float(-f)),
                (op, v) => Err(format!("`{op}` does not apply to {}", type_name(&v))),
            },
            // `&&` stops at a false left side, `||` at a true one.
            Expr::Binary(op @ ("&&" | "||"), a, b, _) => {
                let or = *op == "||";
                let a = self.eval(a);
                if matches!(a, Ok(Val::Bool(v)) if v == or) {
                    return Ok(Val::Bool(or));
                }
                let b = self.eval(b);
                logic(a, b, or)
            }
            Expr::Binary(op, a, b, _) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                self.binary_noting(op, a, b)
            }
            Expr::Is(a, ty, _) => {
                let v = self.eval(a)?;
                if let Val::Range(b) = &v {
                    return Ok(b.is(ty).map_or(Val::Unknown, Val::Bool));
                }
                if v == Val::Unknown {
                    return Ok(Val::Unknown);
                }
                Ok(Val::Bool(is_type(&v, ty)))
            }
            Expr::Cond(c, a, b, _) => match self.eval(c)? {
                Val::Bool(true) => self.eval(a),
                Val::Bool(false) => self.eval(b),
                v if v.is_unknown() => Ok(Val::Unknown),
                v => Err(format!("a condition must be a bool, not {}", type_name(&v))),
            },
        }
    }

    /// `a op b`; a comparison the list proof could not decide is noted with the filter
    /// that would decide it. Kept out of `eval_inner`, whose frame every nesting level
    /// pays for.
    #[inline(never)]
    fn binary_noting(&mut self, op: &str, a: Val, b: Val) -> R {
        let hint = crate::proof::hint(op, &a, &b);
        let value = binary(op, a, b)?;
        if let (Some(h), true) = (hint, value.is_unknown()) {
            self.hints.push(h);
        }
        Ok(value)
    }

    /// The value `e` names when it is a variable or map keys into one, each present, by
    /// reference; `None` for anything else (evaluated the general way).
    fn lookup(&self, e: &Expr) -> Option<&Val> {
        match e {
            Expr::Ident(n, _) => self.var(n),
            Expr::Member(target, name, _) => match self.lookup(target)? {
                Val::Map(m) => m.get(name),
                Val::Partial(p) => p.known.get(name),
                _ => None,
            },
            _ => None,
        }
    }

    fn call(&mut self, f: &Expr, args: &[Expr]) -> R {
        if let Expr::Member(target, method, _) = f {
            // A namespace function (`math.abs`), else a method of a value.
            if let Expr::Ident(ns, _) = &**target {
                if self.var(ns).is_none() {
                    let args = self.args(args)?;
                    return crate::methods::namespace(ns, method, args);
                }
            }
            let t = self.eval(target)?;
            let args = self.args(args)?;
            return crate::methods::method(t, method, args);
        }
        let Expr::Ident(name, _) = f else {
            return Err("only functions and methods can be called".into());
        };
        match name.as_str() {
            "get" | "exists" | "getAfter" | "existsAfter" => {
                let args = self.args(args)?;
                return self.read(name, args);
            }
            _ => {}
        }
        let Some(function) = self
            .functions
            .iter()
            .rev()
            .find(|g| &g.name == name)
            .copied()
        else {
            let args = self.args(args)?;
            return crate::methods::global(name, args);
        };
        if function.params.len() != args.len() {
            return Err(format!(
                "`{name}` takes {} arguments, not {}",
                function.params.len(),
                args.len()
            ));
        }
        if self.depth >= MAX_CALL_DEPTH {
            return Err(format!("calls nested more than {MAX_CALL_DEPTH} deep"));
        }
        let args = self.args(args)?;
        let mark = self.vars.len();
        self.vars.extend(function.params.iter().cloned().zip(args));
        self.depth += 1;
        let mut result = Ok(Val::Null);
        for (n, e) in &function.lets {
            match self.eval(e) {
                Ok(v) => self.vars.push((n.clone(), v)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            result = self.eval(&function.body);
        }
        self.depth -= 1;
        self.vars.truncate(mark);
        result
    }

    fn args(&mut self, args: &[Expr]) -> Result<Vec<Val>, Error> {
        args.iter().map(|a| self.eval(a)).collect()
    }

    /// `get`, `exists`, `getAfter`, `existsAfter` of a path in this database.
    fn read(&mut self, which: &str, args: Vec<Val>) -> R {
        let [Val::Path(p)] = args.as_slice() else {
            if args.iter().any(Val::is_unknown) {
                return Ok(Val::Unknown);
            }
            return Err(format!("{which}() takes one path"));
        };
        let rest = match p.as_slice() {
            [d, db, docs, rest @ ..] if d == "databases" && docs == "documents" => {
                if db != self.database {
                    return Err(format!("{which}() of another database"));
                }
                rest
            }
            _ => return Err(format!("{which}() needs /databases/.../documents/...")),
        };
        let name =
            DocumentName::from_segments(rest.to_vec()).map_err(|e| format!("{which}(): {e}"))?;
        if !self.read.contains(&name) {
            self.reads_left = self
                .reads_left
                .checked_sub(1)
                .ok_or_else(|| format!("the rules read more documents than allowed ({which})"))?;
            self.read.push(name.clone());
        }
        let doc = if which.ends_with("After") {
            self.reader.get_after(&name)?
        } else {
            self.reader.get(&name)?
        };
        match (which, doc) {
            ("exists" | "existsAfter", d) => Ok(Val::Bool(d.is_some())),
            (_, Some(d)) => Ok(resource(self.database, &d)),
            (_, None) => Err(format!("{which}(): no document at {}", name)),
        }
    }
}

/// `&&` (`or` false) or `||` (`or` true) of two outcomes, `a` not deciding alone.
fn logic(a: R, b: R, or: bool) -> R {
    match (a, b) {
        (_, Ok(Val::Bool(v))) if v == or => Ok(Val::Bool(or)),
        (Ok(Val::Bool(_)), Ok(Val::Bool(v))) => Ok(Val::Bool(v)),
        (Err(e), _) | (_, Err(e)) => Err(e),
        (Ok(a), Ok(b))
            if (a.is_unknown() && (b.is_unknown() || matches!(b, Val::Bool(_))))
                || (matches!(a, Val::Bool(_)) && b.is_unknown()) =>
        {
            Ok(Val::Unknown)
        }
        _ => Err("`&&` and `||` need bools".into()),
    }
}

/// Field `name` of a partial map (the list proof's) that it does not hold: a value the
/// query does not fix, and may be missing, named by its path for the denial's explanation.
fn unfixed(p: &Partial, name: &str) -> Val {
    let mut field = p.path.clone();
    field.push(name.to_owned());
    Val::Range(Box::new(crate::proof::Bounds {
        field,
        ..Default::default()
    }))
}

/// Field `name` inside a field the query leaves open (unknown too).
fn deeper(r: crate::proof::Bounds, name: &str) -> Val {
    if r.field.is_empty()
        || r != (crate::proof::Bounds {
            field: r.field.clone(),
            ..Default::default()
        })
    {
        return Val::Unknown;
    }
    let mut field = r.field;
    field.push(name.to_owned());
    Val::Range(Box::new(crate::proof::Bounds {
        field,
        ..Default::default()
    }))
}

fn member(t: Val, name: &str) -> R {
    match t {
        Val::Partial(mut p) => Ok(p.known.remove(name).unwrap_or_else(|| unfixed(&p, name))),
        Val::Map(mut m) => m
            .remove(name)
            .ok_or_else(|| format!("the map has no key `{name}`")),
        Val::Unknown => Ok(Val::Unknown),
        // A field the query leaves open: so is any field inside it.
        Val::Range(r) => Ok(deeper(*r, name)),
        Val::Null => Err(format!("`.{name}` of null")),
        v => Err(format!("`.{name}` of {}", type_name(&v))),
    }
}

fn index(t: Val, i: Val) -> R {
    match (t, i) {
        (Val::Range(r), Val::Str(k)) => Ok(deeper(*r, &k)),
        (Val::Partial(mut p), Val::Str(k)) => {
            Ok(p.known.remove(&k).unwrap_or_else(|| unfixed(&p, &k)))
        }
        (t, i) if t.is_unknown() || i.is_uncertain() => Ok(Val::Unknown),
        (Val::Map(mut m), Val::Str(k)) => m.remove(&k).ok_or_else(|| format!("no key `{k}`")),
        (Val::List(l), Val::Int(i)) => usize::try_from(i)
            .ok()
            .and_then(|i| l.into_iter().nth(i))
            .ok_or_else(|| "index out of range".into()),
        (Val::Path(p), Val::Int(i)) => usize::try_from(i)
            .ok()
            .and_then(|i| p.into_iter().nth(i))
            .map(Val::Str)
            .ok_or_else(|| "index out of range".into()),
        (Val::Str(s), Val::Int(i)) => usize::try_from(i)
            .ok()
            .and_then(|i| s.chars().nth(i))
            .map(|c| Val::Str(c.to_string()))
            .ok_or_else(|| "index out of range".into()),
        (t, _) => Err(format!("{} cannot be indexed so", type_name(&t))),
    }
}

fn slice(t: Val, i: Val, j: Val) -> R {
    let (Val::Int(i), Val::Int(j)) = (i, j) else {
        return Err("slice bounds must be ints".into());
    };
    let (Ok(i), Ok(j)) = (usize::try_from(i), usize::try_from(j)) else {
        return Err("negative slice bound".into());
    };
    match t {
        Val::List(l) if i <= j && j <= l.len() => Ok(Val::List(l[i..j].to_vec())),
        Val::Str(s) if i <= j && j <= s.chars().count() => {
            Ok(Val::Str(s.chars().skip(i).take(j - i).collect()))
        }
        Val::Unknown => Ok(Val::Unknown),
        _ => Err("slice out of range".into()),
    }
}

/// The name of a value's type, as `is` knows it.
pub fn type_name(v: &Val) -> &'static str {
    match v {
        Val::Null => "null",
        Val::Bool(_) => "bool",
        Val::Int(_) => "int",
        Val::Float(_) => "float",
        Val::Str(_) => "string",
        Val::Bytes(_) => "bytes",
        Val::List(_) => "list",
        Val::Map(_) | Val::Partial(_) => "map",
        Val::Set(_) => "set",
        Val::Path(_) => "path",
        Val::Timestamp(_) => "timestamp",
        Val::LatLng(..) => "latlng",
        Val::Duration(_) => "duration",
        Val::Unknown | Val::Range(_) => "unknown",
    }
}

fn is_type(v: &Val, ty: &str) -> bool {
    let name = type_name(v);
    name == ty || (ty == "number" && matches!(v, Val::Int(_) | Val::Float(_)))
}

/// Equality as the rules see it: ints and floats compare by value, and NaN equals NaN, as
/// in the query engine (`SEMANTICS.md`), so that a proof from a query's filters and a rule's
/// comparison agree on every document.
pub fn equal(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Int(x), Val::Float(y)) | (Val::Float(y), Val::Int(x)) => number_eq(*x, *y),
        (Val::Float(x), Val::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Val::List(x), Val::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Val::Set(x), Val::Set(y)) => {
            x.len() == y.len() && x.iter().all(|a| y.iter().any(|b| equal(a, b)))
        }
        (Val::Map(x), Val::Map(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// Whether int `x` and float `y` are the same number, exactly (no rounding of large ints).
fn number_eq(x: i64, y: f64) -> bool {
    number_cmp(x, y) == std::cmp::Ordering::Equal
}

/// How int `x` orders against float `y`, exactly; NaN sorts before every number.
fn number_cmp(x: i64, y: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    if y.is_nan() {
        return Ordering::Greater;
    }
    // Every int64 is within (-2^63 - 1, 2^63): compare with the float's range first, then
    // as ints, then the fraction.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if y >= TWO_63 {
        return Ordering::Less;
    }
    if y < -TWO_63 {
        return Ordering::Greater;
    }
    let whole = y.trunc() as i64;
    x.cmp(&whole).then_with(|| {
        let frac = y - y.trunc();
        if frac > 0.0 {
            Ordering::Less
        } else if frac < 0.0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    })
}

/// How two floats order, NaN first and equal to itself (the query engine's order).
fn float_cmp(x: f64, y: f64) -> std::cmp::Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
    }
}

/// Whether `a` and `b` are known to be of types that never compare equal (ints and floats
/// are one kind here); `false` when either type is unknown.
fn different_types(a: &Val, b: &Val) -> bool {
    let kind = |v: &Val| match v {
        Val::Unknown | Val::Range(_) => None,
        Val::Int(_) | Val::Float(_) => Some("number"),
        v => Some(type_name(v)),
    };
    matches!((kind(a), kind(b)), (Some(x), Some(y)) if x != y)
}

/// How two values order, or why they do not. Numbers order as the query engine orders them
/// (exactly across ints and floats, NaN first), so a proof from a range filter holds for
/// every document the filter matches.
pub fn order(a: &Val, b: &Val) -> Result<std::cmp::Ordering, Error> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Ok(x.cmp(y)),
        (Val::Int(x), Val::Float(y)) => Ok(number_cmp(*x, *y)),
        (Val::Float(x), Val::Int(y)) => Ok(number_cmp(*y, *x).reverse()),
        (Val::Float(x), Val::Float(y)) => Ok(float_cmp(*x, *y)),
        (Val::Str(x), Val::Str(y)) => Ok(x.cmp(y)),
        (Val::Timestamp(x), Val::Timestamp(y)) => Ok(x.cmp(y)),
        (Val::Duration(x), Val::Duration(y)) => Ok(x.cmp(y)),
        _ => Err(format!(
            "{} and {} do not compare",
            type_name(a),
            type_name(b)
        )),
    }
}

fn binary(op: &str, a: Val, b: Val) -> R {
    match (&a, &b) {
        (Val::Range(r), c) if !c.is_uncertain() => {
            return Ok(r.compare(op, c, false)?.map_or(Val::Unknown, Val::Bool))
        }
        (c, Val::Range(r)) if !c.is_uncertain() => {
            return Ok(r.compare(op, c, true)?.map_or(Val::Unknown, Val::Bool))
        }
        // A key the partial map holds is present; one it lacks may or may not be.
        (Val::Str(k), Val::Partial(p)) if op == "in" => {
            return Ok(if p.known.contains_key(k) {
                Val::Bool(true)
            } else {
                Val::Unknown
            })
        }
        // Values of different types are never equal, whatever their unknown contents (a
        // document's data is a map: `resource.data != null` holds in a list proof).
        _ if matches!(op, "==" | "!=") && different_types(&a, &b) => {
            return Ok(Val::Bool(op == "!="))
        }
        _ if a.is_uncertain() || b.is_uncertain() => return Ok(Val::Unknown),
        _ => {}
    }
    let size = |n: usize| {
        if n > MAX_SIZE {
            Err(format!("a value over {MAX_SIZE} elements"))
        } else {
            Ok(())
        }
    };
    match (op, a, b) {
        ("==", a, b) => Ok(Val::Bool(equal(&a, &b))),
        ("!=", a, b) => Ok(Val::Bool(!equal(&a, &b))),
        ("<", a, b) => Ok(Val::Bool(order(&a, &b)?.is_lt())),
        ("<=", a, b) => Ok(Val::Bool(order(&a, &b)?.is_le())),
        (">", a, b) => Ok(Val::Bool(order(&a, &b)?.is_gt())),
        (">=", a, b) => Ok(Val::Bool(order(&a, &b)?.is_ge())),
        ("in", x, Val::List(l)) | ("in", x, Val::Set(l)) => {
            Ok(Val::Bool(l.iter().any(|y| equal(&x, y))))
        }
        ("in", Val::Str(k), Val::Map(m)) => Ok(Val::Bool(m.contains_key(&k))),
        ("+", Val::Str(x), Val::Str(y)) => {
            size(x.len() + y.len())?;
            Ok(Val::Str(x + &y))
        }
        ("+", Val::Timestamp(t), Val::Duration(d)) | ("+", Val::Duration(d), Val::Timestamp(t)) => {
            time::shift(t, Some(d)).map(Val::Timestamp)
        }
        ("-", Val::Timestamp(t), Val::Duration(d)) => {
            time::shift(t, d.checked_neg()).map(Val::Timestamp)
        }
        ("-", Val::Timestamp(a), Val::Timestamp(b)) => {
            Ok(Val::Duration(time::nanos_of(a) - time::nanos_of(b)))
        }
        ("+", Val::Duration(a), Val::Duration(b)) => a
            .checked_add(b)
            .map(Val::Duration)
            .ok_or_else(|| "duration overflow".into()),
        ("-", Val::Duration(a), Val::Duration(b)) => a
            .checked_sub(b)
            .map(Val::Duration)
            .ok_or_else(|| "duration overflow".into()),
        ("+", Val::List(mut x), Val::List(y)) => {
            size(x.len() + y.len())?;
            x.extend(y);
            Ok(Val::List(x))
        }
        (op, Val::Int(x), Val::Int(y)) => {
            let r = match op {
                "+" => x.checked_add(y),
                "-" => x.checked_sub(y),
                "*" => x.checked_mul(y),
                "/" => x.checked_div(y),
                "%" => x.checked_rem(y),
                _ => return Err(format!("`{op}` does not apply to ints")),
            };
            r.map(Val::Int)
                .ok_or_else(|| format!("int overflow or division by zero in `{op}`"))
        }
        (op, a @ (Val::Int(_) | Val::Float(_)), b @ (Val::Int(_) | Val::Float(_))) => {
            let f = |v: &Val| match v {
                Val::Int(i) => *i as f64,
                Val::Float(f) => *f,
                _ => f64::NAN,
            };
            let (x, y) = (f(&a), f(&b));
            Ok(Val::Float(match op {
                "+" => x + y,
                "-" => x - y,
                "*" => x * y,
                "/" => x / y,
                "%" => x % y,
                _ => return Err(format!("`{op}` does not apply to numbers")),
            }))
        }
        (op, a, b) => Err(format!(
            "`{op}` does not apply to {} and {}",
            type_name(&a),
            type_name(&b)
        )),
    }
}

#[cfg(test)]
mod tests;
