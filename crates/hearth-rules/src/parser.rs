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
mod tests;
