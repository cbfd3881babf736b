//! The syntax tree of a rules file.

/// Where something was written: line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

/// One segment of a `match` path.
#[derive(Clone, Debug, PartialEq)]
pub enum Segment {
    /// A literal segment as written (`users`, `user-profiles`, `007`).
    Literal(String),
    /// `{name}`: any one segment, bound to `name`.
    Var(String),
    /// `{name=**}`: the rest of the path, bound to `name` as a path: zero or more segments in
    /// rules version 2, one or more in version 1 (`parser::File::version`).
    Rest(String),
}

/// The operations an `allow` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodSet {
    /// `read`: get and list.
    Read,
    /// `get`.
    Get,
    /// `list`.
    List,
    /// `write`: create, update and delete.
    Write,
    /// `create`.
    Create,
    /// `update`.
    Update,
    /// `delete`.
    Delete,
}

/// `allow methods: if condition;`
#[derive(Clone, Debug, PartialEq)]
pub struct Allow {
    /// The operations it allows.
    pub methods: Vec<MethodSet>,
    /// Its condition; `None`: always.
    pub condition: Option<Expr>,
    /// Where it was written.
    pub pos: Pos,
}

/// `function name(params) { let ...; return ...; }`
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// Its parameters' names.
    pub params: Vec<String>,
    /// Its `let` bindings, in order.
    pub lets: Vec<(String, Expr)>,
    /// What it returns.
    pub body: Expr,
    /// Where it was written.
    pub pos: Pos,
}

/// `match /path { ... }`
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The path it matches, relative to the enclosing block.
    pub path: Vec<Segment>,
    /// Its functions.
    pub functions: Vec<Function>,
    /// Its allow statements.
    pub allows: Vec<Allow>,
    /// The blocks nested in it.
    pub matches: Vec<Match>,
    /// Where it was written.
    pub pos: Pos,
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `null`.
    Null(Pos),
    /// `true` or `false`.
    Bool(bool, Pos),
    /// An integer literal.
    Int(i64, Pos),
    /// A float literal.
    Float(f64, Pos),
    /// A string literal.
    Str(String, Pos),
    /// A name: a variable, a parameter, a path variable or a namespace (`math`, ...).
    Ident(String, Pos),
    /// `[a, b]`.
    List(Vec<Expr>, Pos),
    /// `{'k': v}`.
    Map(Vec<(Expr, Expr)>, Pos),
    /// A path literal: `/databases/$(database)/documents/users/$(uid)`, each segment
    /// literal text or an interpolated expression.
    Path(Vec<PathPart>, Pos),
    /// `a.b`.
    Member(Box<Expr>, String, Pos),
    /// `a[i]`.
    Index(Box<Expr>, Box<Expr>, Pos),
    /// `a[i:j]`.
    Slice(Box<Expr>, Box<Expr>, Box<Expr>, Pos),
    /// `f(args)` or `a.m(args)`.
    Call(Box<Expr>, Vec<Expr>, Pos),
    /// A unary operator (`!`, `-`).
    Unary(&'static str, Box<Expr>, Pos),
    /// A binary operator (`+`, `==`, `&&`, `in`, ...).
    Binary(&'static str, Box<Expr>, Box<Expr>, Pos),
    /// `a is type`.
    Is(Box<Expr>, String, Pos),
    /// `c ? a : b`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>, Pos),
}

/// One segment of a path literal.
#[derive(Clone, Debug, PartialEq)]
pub enum PathPart {
    /// Literal text.
    Literal(String),
    /// `$(expr)`.
    Interpolated(Expr),
}

impl Expr {
    /// Where the expression starts.
    pub fn pos(&self) -> Pos {
        match self {
            Expr::Null(p)
            | Expr::Bool(_, p)
            | Expr::Int(_, p)
            | Expr::Float(_, p)
            | Expr::Str(_, p)
            | Expr::Ident(_, p)
            | Expr::List(_, p)
            | Expr::Map(_, p)
            | Expr::Path(_, p)
            | Expr::Member(_, _, p)
            | Expr::Index(_, _, p)
            | Expr::Slice(_, _, _, p)
            | Expr::Call(_, _, p)
            | Expr::Unary(_, _, p)
            | Expr::Binary(_, _, _, p)
            | Expr::Is(_, _, p)
            | Expr::Cond(_, _, _, p) => *p,
        }
    }
}

impl Expr {
    /// Whether `f` holds for this expression or any inside it.
    pub fn any(&self, f: &dyn Fn(&Expr) -> bool) -> bool {
        if f(self) {
            return true;
        }
        match self {
            Expr::List(items, _) | Expr::Call(_, items, _) if items.iter().any(|e| e.any(f)) => {
                true
            }
            Expr::Call(callee, _, _) => callee.any(f),
            Expr::Map(entries, _) => entries.iter().any(|(k, v)| k.any(f) || v.any(f)),
            Expr::Path(parts, _) => parts
                .iter()
                .any(|p| matches!(p, PathPart::Interpolated(e) if e.any(f))),
            Expr::Member(e, _, _) | Expr::Unary(_, e, _) | Expr::Is(e, _, _) => e.any(f),
            Expr::Index(a, b, _) | Expr::Binary(_, a, b, _) => a.any(f) || b.any(f),
            Expr::Slice(a, b, c, _) | Expr::Cond(a, b, c, _) => a.any(f) || b.any(f) || c.any(f),
            _ => false,
        }
    }
}
