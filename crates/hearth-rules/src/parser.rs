//! The parser: tokens to the syntax tree, by recursive descent for statements and precedence
//! climbing for expressions, with a nesting limit so no input can exhaust the stack.

use crate::ast::{Allow, Expr, Function, Match, MethodSet, PathPart, Pos, Segment};
use crate::lexer::{lex, Tok, Token};
use crate::RulesError;

/// Deepest nesting of blocks and expressions.
const MAX_DEPTH: usize = 128;

/// A parsed rules file: its top-level `match` blocks (inside `service cloud.firestore`).
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    /// Its `rules_version`: 1 (Firebase's default, without the statement) or 2. Version 1
    /// reads `{name=**}` as one or more segments and allows no collection-group queries.
    pub version: u8,
    /// The blocks, in order.
    pub matches: Vec<Match>,
    /// Functions declared directly in the service block.
    pub functions: Vec<Function>,
}

/// Parses a rules file.
pub fn parse_file(file: &str, source: &str) -> Result<File, RulesError> {
    let tokens = lex(file, source)?;
    let mut p = Parser {
        file,
        tokens,
        at: 0,
        depth: 0,
    };
    p.file()
}

struct Parser<'a> {
    file: &'a str,
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn pos(&self) -> Pos {
        match self.tokens.get(self.at).or(self.tokens.last()) {
            Some(t) => Pos {
                line: t.line,
                column: t.column,
            },
            None => Pos { line: 1, column: 1 },
        }
    }

    fn error(&self, message: impl Into<String>) -> RulesError {
        let p = self.pos();
        let message = match self.tokens.get(self.at) {
            None => format!("{} (at the end of the file)", message.into()),
            Some(_) => message.into(),
        };
        RulesError::at(self.file, p.line, p.column, message)
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|t| &t.tok)
    }

    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.tokens.get(self.at + n).map(|t| &t.tok)
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(i)) if i == w)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let yes = self.is_punct(p);
        if yes {
            self.at += 1;
        }
        yes
    }

    fn expect_punct(&mut self, p: &str) -> Result<(), RulesError> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{p}`{}", self.found())))
        }
    }

    fn expect_word(&mut self, w: &str) -> Result<(), RulesError> {
        if self.is_word(w) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected `{w}`{}", self.found())))
        }
    }

    fn found(&self) -> String {
        match self.peek() {
            None => String::new(),
            Some(Tok::Ident(i)) => format!(", found `{i}`"),
            Some(Tok::Punct(p)) => format!(", found `{p}`"),
            Some(Tok::Int(i)) => format!(", found `{i}`"),
            Some(Tok::Float(f)) => format!(", found `{f}`"),
            Some(Tok::Str(s)) => format!(", found '{s}'"),
            Some(Tok::Segment(s)) => format!(", found `{s}`"),
        }
    }

    fn ident(&mut self) -> Result<String, RulesError> {
        match self.peek() {
            Some(Tok::Ident(i)) => {
                let i = i.clone();
                self.at += 1;
                Ok(i)
            }
            _ => Err(self.error(format!("expected a name{}", self.found()))),
        }
    }

    fn enter(&mut self) -> Result<(), RulesError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("nested more than {MAX_DEPTH} deep")));
        }
        Ok(())
    }

    fn file(&mut self) -> Result<File, RulesError> {
        let version = self.rules_version()?;
        self.expect_word("service")?;
        self.expect_word("cloud")?;
        self.expect_punct(".")?;
        self.expect_word("firestore")?;
        self.expect_punct("{")?;
        let mut out = File {
            version,
            matches: Vec::new(),
            functions: Vec::new(),
        };
        while !self.eat_punct("}") {
            if self.is_word("match") {
                out.matches.push(self.match_block()?);
            } else if self.is_word("function") {
                out.functions.push(self.function()?);
            } else {
                return Err(self.error(format!("expected `match` or `function`{}", self.found())));
            }
        }
        if self.peek().is_some() {
            return Err(self.error(format!("expected the end of the file{}", self.found())));
        }
        Ok(out)
    }

    /// `rules_version = '1';` or `'2'`; without one, version 1, as in Firebase.
    fn rules_version(&mut self) -> Result<u8, RulesError> {
        if !self.is_word("rules_version") {
            return Ok(1);
        }
        self.at += 1;
        self.expect_punct("=")?;
        let version = match self.peek() {
            Some(Tok::Str(v)) if v == "1" => 1,
            Some(Tok::Str(v)) if v == "2" => 2,
            _ => return Err(self.error(format!("expected '1' or '2'{}", self.found()))),
        };
        self.at += 1;
        self.expect_punct(";")?;
        Ok(version)
    }

    fn match_block(&mut self) -> Result<Match, RulesError> {
        self.enter()?;
        let pos = self.pos();
        self.expect_word("match")?;
        let mut path = Vec::new();
        while self.eat_punct("/") {
            if self.eat_punct("{") {
                let name = self.ident()?;
                if self.eat_punct("=") {
                    self.expect_punct("**")?;
                    path.push(Segment::Rest(name));
                } else {
                    path.push(Segment::Var(name));
                }
                self.expect_punct("}")?;
            } else {
                let Some(Tok::Segment(s)) = self.peek() else {
                    return Err(self.error(format!("expected a path segment{}", self.found())));
                };
                path.push(Segment::Literal(s.clone()));
                self.at += 1;
            }
        }
        if path.is_empty() {
            return Err(self.error("expected a path starting with `/`"));
        }
        self.expect_punct("{")?;
        let mut block = Match {
            path,
            functions: Vec::new(),
            allows: Vec::new(),
            matches: Vec::new(),
            pos,
        };
        while !self.eat_punct("}") {
            if self.is_word("match") {
                block.matches.push(self.match_block()?);
            } else if self.is_word("function") {
                block.functions.push(self.function()?);
            } else if self.is_word("allow") {
                block.allows.push(self.allow()?);
            } else {
                return Err(self.error(format!(
                    "expected `match`, `allow`, `function` or `}}`{}",
                    self.found()
                )));
            }
        }
        self.depth -= 1;
        Ok(block)
    }

    fn allow(&mut self) -> Result<Allow, RulesError> {
        let pos = self.pos();
        self.expect_word("allow")?;
        let mut methods = Vec::new();
        loop {
            let m = match self.peek() {
                Some(Tok::Ident(i)) => match i.as_str() {
                    "read" => MethodSet::Read,
                    "get" => MethodSet::Get,
                    "list" => MethodSet::List,
                    "write" => MethodSet::Write,
                    "create" => MethodSet::Create,
                    "update" => MethodSet::Update,
                    "delete" => MethodSet::Delete,
                    other => {
                        return Err(self.error(format!(
                            "unknown method `{other}`: read, get, list, write, create, update or delete"
                        )))
                    }
                },
                _ => return Err(self.error(format!("expected a method{}", self.found()))),
            };
            self.at += 1;
            methods.push(m);
            if !self.eat_punct(",") {
                break;
            }
        }
        let condition = if self.eat_punct(":") {
            self.expect_word("if")?;
            Some(self.expr()?)
        } else {
            None
        };
        self.expect_punct(";")?;
        Ok(Allow {
            methods,
            condition,
            pos,
        })
    }

    fn function(&mut self) -> Result<Function, RulesError> {
        let pos = self.pos();
        self.expect_word("function")?;
        let name = self.ident()?;
        self.expect_punct("(")?;
        let mut params = Vec::new();
        if !self.eat_punct(")") {
            loop {
                params.push(self.ident()?);
                if self.eat_punct(")") {
                    break;
                }
                self.expect_punct(",")?;
            }
        }
        self.expect_punct("{")?;
        let mut lets = Vec::new();
        while self.is_word("let") {
            self.at += 1;
            let n = self.ident()?;
            self.expect_punct("=")?;
            let e = self.expr()?;
            self.expect_punct(";")?;
            lets.push((n, e));
        }
        self.expect_word("return")?;
        let body = self.expr()?;
        self.eat_punct(";");
        self.expect_punct("}")?;
        Ok(Function {
            name,
            params,
            lets,
            body,
            pos,
        })
    }

    /// An expression: the conditional, the lowest precedence.
    fn expr(&mut self) -> Result<Expr, RulesError> {
        self.enter()?;
        let pos = self.pos();
        let c = self.binary(0)?;
        let out = if self.eat_punct("?") {
            let a = self.expr()?;
            self.expect_punct(":")?;
            let b = self.expr()?;
            Expr::Cond(Box::new(c), Box::new(a), Box::new(b), pos)
        } else {
            c
        };
        self.depth -= 1;
        Ok(out)
    }

    /// The binary operator at the cursor and its precedence (higher binds tighter).
    fn operator(&self) -> Option<(&'static str, u8)> {
        match self.peek()? {
            Tok::Punct(p) => Some(match *p {
                "||" => ("||", 1),
                "&&" => ("&&", 2),
                "==" => ("==", 3),
                "!=" => ("!=", 3),
                "<" => ("<", 4),
                "<=" => ("<=", 4),
                ">" => (">", 4),
                ">=" => (">=", 4),
                "+" => ("+", 5),
                "-" => ("-", 5),
                "*" => ("*", 6),
                "/" => ("/", 6),
                "%" => ("%", 6),
                _ => return None,
            }),
            Tok::Ident(i) if i == "in" => Some(("in", 4)),
            Tok::Ident(i) if i == "is" => Some(("is", 4)),
            _ => None,
        }
    }

    fn binary(&mut self, min: u8) -> Result<Expr, RulesError> {
        let mut left = self.unary()?;
        while let Some((op, prec)) = self.operator() {
            if prec <= min {
                break;
            }
            let pos = left.pos();
            self.at += 1;
            if op == "is" {
                let ty = self.ident()?;
                left = Expr::Is(Box::new(left), ty, pos);
                continue;
            }
            let right = self.binary(prec)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right), pos);
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, RulesError> {
        let pos = self.pos();
        for op in ["!", "-"] {
            if self.eat_punct(op) {
                self.enter()?;
                let inner = self.unary()?;
                self.depth -= 1;
                return Ok(Expr::Unary(op, Box::new(inner), pos));
            }
        }
        let mut e = self.primary()?;
        loop {
            let pos = self.pos();
            if self.eat_punct(".") {
                let name = self.ident()?;
                e = Expr::Member(Box::new(e), name, pos);
            } else if self.eat_punct("[") {
                let i = self.expr()?;
                if self.eat_punct(":") {
                    let j = self.expr()?;
                    self.expect_punct("]")?;
                    e = Expr::Slice(Box::new(e), Box::new(i), Box::new(j), pos);
                } else {
                    self.expect_punct("]")?;
                    e = Expr::Index(Box::new(e), Box::new(i), pos);
                }
            } else if self.eat_punct("(") {
                let args = self.list_items(")")?;
                e = Expr::Call(Box::new(e), args, pos);
            } else {
                return Ok(e);
            }
        }
    }

    /// Expressions separated by commas up to `close` (consumed); a trailing comma is
    /// allowed.
    fn list_items(&mut self, close: &str) -> Result<Vec<Expr>, RulesError> {
        let mut items = Vec::new();
        while !self.eat_punct(close) {
            items.push(self.expr()?);
            if !self.eat_punct(",") {
                self.expect_punct(close)?;
                break;
            }
        }
        Ok(items)
    }

    fn primary(&mut self) -> Result<Expr, RulesError> {
        let pos = self.pos();
        let Some(tok) = self.peek().cloned() else {
            return Err(self.error("expected an expression"));
        };
        self.at += 1;
        Ok(match tok {
            Tok::Int(i) => Expr::Int(i, pos),
            Tok::Float(f) => Expr::Float(f, pos),
            Tok::Str(s) => Expr::Str(s, pos),
            Tok::Ident(i) => match i.as_str() {
                "true" => Expr::Bool(true, pos),
                "false" => Expr::Bool(false, pos),
                "null" => Expr::Null(pos),
                _ => Expr::Ident(i, pos),
            },
            Tok::Punct("(") => {
                let e = self.expr()?;
                self.expect_punct(")")?;
                e
            }
            Tok::Punct("[") => {
                self.enter()?;
                let items = self.list_items("]")?;
                self.depth -= 1;
                Expr::List(items, pos)
            }
            Tok::Punct("{") => {
                self.enter()?;
                let mut entries = Vec::new();
                while !self.eat_punct("}") {
                    let k = self.expr()?;
                    self.expect_punct(":")?;
                    let v = self.expr()?;
                    entries.push((k, v));
                    if !self.eat_punct(",") {
                        self.expect_punct("}")?;
                        break;
                    }
                }
                self.depth -= 1;
                Expr::Map(entries, pos)
            }
            Tok::Punct("/") => {
                self.at -= 1;
                self.path_literal()?
            }
            _ => {
                self.at -= 1;
                return Err(self.error(format!("expected an expression{}", self.found())));
            }
        })
    }

    /// `/seg/$(expr)/...`: segments while a `/` is followed by a segment or `$(` (the lexer
    /// reads a path's segments).
    fn path_literal(&mut self) -> Result<Expr, RulesError> {
        let pos = self.pos();
        let mut parts = Vec::new();
        loop {
            let segment_follows = self.is_punct("/")
                && matches!(
                    self.peek_at(1),
                    Some(Tok::Segment(_)) | Some(Tok::Punct("$"))
                );
            if !segment_follows {
                break;
            }
            self.at += 1;
            if self.eat_punct("$") {
                self.expect_punct("(")?;
                let e = self.expr()?;
                self.expect_punct(")")?;
                parts.push(PathPart::Interpolated(e));
            } else {
                let Some(Tok::Segment(s)) = self.peek() else {
                    return Err(self.error("expected a path segment"));
                };
                parts.push(PathPart::Literal(s.clone()));
                self.at += 1;
            }
        }
        if parts.is_empty() {
            return Err(self.error(format!("expected an expression{}", self.found())));
        }
        Ok(Expr::Path(parts, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents {
    function signedIn() {
      return request.auth != null;
    }
    match /notes/{note} {
      allow read: if signedIn() && resource.data.owner == request.auth.uid;
      allow create, update: if request.resource.data.keys().hasOnly(['owner', 'text'])
        && request.resource.data.diff(resource.data).affectedKeys().hasOnly(['text']);
      allow delete;
    }
    match /{path=**}/posts/{id} {
      function admin(uid) {
        let doc = get(/databases/$(database)/documents/admins/$(uid));
        return doc.data.role == 'admin';
      }
      allow list: if admin(request.auth.uid) || request.query.limit <= 50;
    }
  }
}
"#;

    fn expr(s: &str) -> Expr {
        let src = format!("service cloud.firestore {{ match /x {{ allow read: if {s}; }} }}");
        let f = parse_file("t", &src).unwrap();
        f.matches[0].allows[0].condition.clone().unwrap()
    }

    /// The expression with every binary operator parenthesized, for precedence checks.
    fn shape(e: &Expr) -> String {
        match e {
            Expr::Int(i, _) => i.to_string(),
            Expr::Ident(i, _) => i.clone(),
            Expr::Bool(b, _) => b.to_string(),
            Expr::Binary(op, a, b, _) => format!("({} {op} {})", shape(a), shape(b)),
            Expr::Unary(op, a, _) => format!("{op}{}", shape(a)),
            Expr::Cond(c, a, b, _) => format!("({} ? {} : {})", shape(c), shape(a), shape(b)),
            Expr::Is(a, t, _) => format!("({} is {t})", shape(a)),
            Expr::Member(a, m, _) => format!("{}.{m}", shape(a)),
            Expr::Call(f, args, _) => {
                let args: Vec<String> = args.iter().map(shape).collect();
                format!("{}({})", shape(f), args.join(", "))
            }
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_whole_file_parses() {
        let f = parse_file("t", SAMPLE).unwrap();
        let db = &f.matches[0];
        assert_eq!(
            db.path,
            vec![
                Segment::Literal("databases".into()),
                Segment::Var("database".into()),
                Segment::Literal("documents".into())
            ]
        );
        assert_eq!(db.functions[0].name, "signedIn");
        let notes = &db.matches[0];
        assert_eq!(notes.allows.len(), 3);
        assert_eq!(
            notes.allows[1].methods,
            vec![MethodSet::Create, MethodSet::Update]
        );
        assert_eq!(notes.allows[2].condition, None);
        assert_eq!(notes.allows[0].pos, Pos { line: 9, column: 7 });
        let posts = &db.matches[1];
        assert_eq!(posts.path[0], Segment::Rest("path".into()));
        let admin = &posts.functions[0];
        assert_eq!(admin.params, vec!["uid".to_owned()]);
        assert_eq!(admin.lets[0].0, "doc");
        let Expr::Call(_, args, _) = &admin.lets[0].1 else {
            panic!("get(...)")
        };
        let Expr::Path(parts, _) = &args[0] else {
            panic!("a path literal")
        };
        assert_eq!(parts.len(), 5);
        assert!(matches!(parts[1], PathPart::Interpolated(_)));
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(shape(&expr("a || b && c == d")), "(a || (b && (c == d)))");
        assert_eq!(shape(&expr("1 + 2 * 3 - 4")), "((1 + (2 * 3)) - 4)");
        assert_eq!(shape(&expr("a < b == c in d")), "((a < b) == (c in d))");
        assert_eq!(shape(&expr("!a && -b < 3")), "(!a && (-b < 3))");
        assert_eq!(shape(&expr("a ? b : c ? d : e")), "(a ? b : (c ? d : e))");
        assert_eq!(shape(&expr("x is int && y")), "((x is int) && y)");
        assert_eq!(shape(&expr("a.b(c, d).e")), "a.b(c, d).e");
        assert_eq!(shape(&expr("8 / 4 / 2")), "((8 / 4) / 2)");
    }

    #[test]
    fn errors_name_line_and_column() {
        let cases = [
            (
                "service cloud.firestore {\n  match /x {\n    allow read: if (;\n  }\n}",
                3,
                21,
            ),
            (
                "service cloud.firestore {\n  match /x {\n    allow reed;\n  }\n}",
                3,
                11,
            ),
            ("service cloud.firestore {\n  match x {}\n}", 2, 9),
            ("rules_version = '3';\nservice cloud.firestore {}", 1, 17),
            (
                "service cloud.firestore {\n  match /x {\n    allow read: if a\n  }\n}",
                4,
                3,
            ),
            (
                "service cloud.firestore {\n  match /x {\n    allow read;",
                3,
                15,
            ),
        ];
        for (src, line, column) in cases {
            let e = parse_file("f", src).unwrap_err();
            assert_eq!((e.line, e.column), (line, column), "{src}: {e}");
        }
    }

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.into())
    }

    #[test]
    fn match_path_segments_take_any_character_but_slash() {
        let src = "service cloud.firestore {
  match /databases/{database}/documents {
    match /user-profiles/{id}/a.b~c/007/naïve/%20x/$v/{rest=**} { allow read; }
    match /x-y/{z}{ match /q.r{} }
  }
}";
        let f = parse_file("t", src).unwrap();
        let db = &f.matches[0];
        assert_eq!(
            db.matches[0].path,
            vec![
                lit("user-profiles"),
                Segment::Var("id".into()),
                lit("a.b~c"),
                lit("007"),
                lit("naïve"),
                lit("%20x"),
                lit("$v"),
                Segment::Rest("rest".into()),
            ]
        );
        assert_eq!(
            db.matches[1].path,
            vec![lit("x-y"), Segment::Var("z".into())]
        );
        assert_eq!(db.matches[1].matches[0].path, vec![lit("q.r")]);
    }

    /// The literal and interpolated parts of the path literal `s` (an expression).
    fn path_parts(s: &str) -> Vec<String> {
        let Expr::Call(_, args, _) = expr(&format!("get({s})")) else {
            panic!("a call")
        };
        let Expr::Path(parts, _) = &args[0] else {
            panic!("a path literal: {:?}", args[0])
        };
        let part = |p: &PathPart| match p {
            PathPart::Literal(l) => l.clone(),
            PathPart::Interpolated(e) => format!("$({})", shape(e)),
        };
        parts.iter().map(part).collect()
    }

    #[test]
    fn path_literal_segments_take_the_same_characters() {
        assert_eq!(
            path_parts("/databases/$(database)/documents/user-profiles/$(x)"),
            [
                "databases",
                "$(database)",
                "documents",
                "user-profiles",
                "$(x)"
            ]
        );
        assert_eq!(
            path_parts("/a.b~c/007/naïve/%20x/$(r.s)/t"),
            ["a.b~c", "007", "naïve", "%20x", "$(r.s)", "t"]
        );
        let nested = path_parts("/a/$(get(/p-q/$(f(r))/s.t).u)/v");
        assert_eq!(nested.len(), 3, "{nested:?}");
        // Division is still division, and a path ends where the expression around it does.
        assert_eq!(shape(&expr("a / b-c/2")), "((a / b) - (c / 2))");
        assert_eq!(
            shape(&expr("(a)/2 == f(x)/y.z")),
            "((a / 2) == (f(x) / y.z))"
        );
        let e = expr("[/a/b-c, exists(/x/y)] == {'k': /d/e}");
        let Expr::Binary("==", l, r, _) = e else {
            panic!("==")
        };
        assert!(matches!(&*l, Expr::List(items, _) if items.len() == 2));
        assert!(matches!(&*r, Expr::Map(entries, _) if entries.len() == 1));
    }

    #[test]
    fn rules_version_is_1_unless_the_file_says_2() {
        let body = "service cloud.firestore {}";
        assert_eq!(parse_file("f", body).unwrap().version, 1);
        for (v, want) in [("'1'", 1), ("'2'", 2), ("\"2\"", 2)] {
            let src = format!("rules_version = {v};\n{body}");
            assert_eq!(parse_file("f", &src).unwrap().version, want, "{v}");
        }
        for v in ["'3'", "'2.0'", "2", "''"] {
            let src = format!("rules_version = {v};\n{body}");
            let e = parse_file("f", &src).unwrap_err();
            assert_eq!((e.line, e.column), (1, 17), "{v}: {e}");
            assert!(e.message.starts_with("expected '1' or '2'"), "{v}: {e}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        for open in ["(", "[", "!", "-", "{'a': "] {
            let src = format!(
                "service cloud.firestore {{ match /x {{ allow read: if {}1; }} }}",
                open.repeat(20_000)
            );
            let e = parse_file("f", &src).unwrap_err();
            assert!(e.message.contains("nested more than"), "{open}: {e}");
        }
        let blocks = "match /x { ".repeat(10_000);
        let e = parse_file("f", &format!("service cloud.firestore {{ {blocks}")).unwrap_err();
        assert!(e.message.contains("nested more than"), "{e}");
    }

    #[test]
    fn random_inputs_never_panic() {
        // Fragments of the language, joined at random (xorshift, fixed seed).
        let pieces = [
            "service",
            "cloud",
            ".",
            "firestore",
            "{",
            "}",
            "match",
            "/",
            "x",
            "{y}",
            "{z=**}",
            "allow",
            "read",
            "write",
            ":",
            "if",
            ";",
            "(",
            ")",
            "[",
            "]",
            "a",
            "1",
            "2.5",
            "'s'",
            "&&",
            "||",
            "==",
            "!",
            "-",
            "?",
            "is",
            "in",
            "$",
            "function",
            "let",
            "return",
            ",",
            "=",
            "**",
            "/*",
            "*/",
            "\"",
            "\\",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut src = String::from("service cloud.firestore { match /x { allow read: if ");
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = (state % 24) as usize;
            for _ in 0..n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                src.push_str(pieces[(state % pieces.len() as u64) as usize]);
                src.push(' ');
            }
            let _ = parse_file("f", &src);
        }
    }
}
