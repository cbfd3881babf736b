//! The rules language's tokens, each with the line and column it starts at.
//!
//! Paths are read in context, as Firebase reads them: a `/` right after `match`, or where an
//! operand starts (after an operator, an opening bracket, `,`, `:`, `if`, `return` or `in`),
//! begins a path whose literal segments are [`Tok::Segment`]s of any characters a Firestore
//! id may hold (`user-profiles`, `a.b~c`, `007`, `naïve`, `%20`). A `/` after an operand (a
//! name, a literal, a closing bracket) is division.

use crate::RulesError;

/// Most bytes of a rules file.
pub const MAX_SOURCE_BYTES: usize = 256 << 10;

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// A name: an identifier or a keyword (`match`, `allow`, `if`, `function`, ...).
    Ident(String),
    /// An integer literal.
    Int(i64),
    /// A floating-point literal.
    Float(f64),
    /// A string literal, its escapes resolved.
    Str(String),
    /// Punctuation and operators, as written (`{`, `==`, `&&`, `**`, `$`, ...).
    Punct(&'static str),
    /// A literal segment of a `match` path or a path literal, as written.
    Segment(String),
}

/// A token and where it starts (1-based line and column, in characters).
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Its line.
    pub line: u32,
    /// Its column.
    pub column: u32,
}

/// Operators and punctuation, longest first so `==` is not read as `=` `=`.
const PUNCT: [&str; 30] = [
    "**", "==", "!=", "<=", ">=", "&&", "||", "{", "}", "(", ")", "[", "]", ",", ";", ":", ".",
    "?", "!", "=", "<", ">", "+", "-", "*", "/", "%", "$", "@", "~",
];

/// Splits `source` into tokens; `file` names it in errors.
pub fn lex(file: &str, source: &str) -> Result<Vec<Token>, RulesError> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(RulesError::at(
            file,
            1,
            1,
            format!("the rules file is over {MAX_SOURCE_BYTES} bytes"),
        ));
    }
    let mut lexer = Lexer {
        file,
        chars: source.chars().collect(),
        i: 0,
        line: 1,
        column: 1,
        out: Vec::new(),
        paths: Vec::new(),
    };
    while let Some(c) = lexer.skip_space()? {
        lexer.token(c)?;
    }
    Ok(lexer.out)
}

/// Which kind of path is being read.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PathKind {
    /// A `match` path: segments, `{name}` and `{name=**}`.
    Match,
    /// A path literal in an expression: segments and `$(expr)`.
    Literal,
}

/// Where in a path the lexer is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PathAt {
    /// Just after a `/`: a segment comes next.
    Slash,
    /// After a segment: a `/` continues the path, anything else ends it.
    Segment,
    /// Inside a `{wildcard}` or a `$(...)`, read as ordinary tokens: the brackets open.
    Inside(u32),
}

struct Lexer<'a> {
    file: &'a str,
    chars: Vec<char>,
    i: usize,
    line: u32,
    column: u32,
    out: Vec<Token>,
    /// The paths being read, innermost last (a path literal inside `$(...)` nests).
    paths: Vec<(PathKind, PathAt)>,
}

impl Lexer<'_> {
    fn peek(&self, n: usize) -> Option<char> {
        self.chars.get(self.i + n).copied()
    }

    /// Moves past `n` characters, keeping the line and column.
    fn bump(&mut self, n: usize) {
        for _ in 0..n {
            if self.peek(0) == Some('\n') {
                self.line += 1;
                self.column = 1;
            } else {
                self.column += 1;
            }
            self.i += 1;
        }
    }

    fn error(&self, line: u32, column: u32, message: impl Into<String>) -> RulesError {
        RulesError::at(self.file, line, column, message)
    }

    fn push(&mut self, tok: Tok, line: u32, column: u32) {
        self.out.push(Token { tok, line, column });
    }

    /// Skips whitespace and comments; the character after them, if any.
    fn skip_space(&mut self) -> Result<Option<char>, RulesError> {
        loop {
            let Some(c) = self.peek(0) else {
                return Ok(None);
            };
            match (c, self.peek(1)) {
                (c, _) if c.is_whitespace() => self.bump(1),
                ('/', Some('/')) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump(1);
                    }
                }
                ('/', Some('*')) => self.block_comment()?,
                _ => return Ok(Some(c)),
            }
        }
    }

    fn block_comment(&mut self) -> Result<(), RulesError> {
        let (line, column) = (self.line, self.column);
        self.bump(2);
        loop {
            match (self.peek(0), self.peek(1)) {
                (None, _) => return Err(self.error(line, column, "a comment is not closed")),
                (Some('*'), Some('/')) => break,
                _ => self.bump(1),
            }
        }
        self.bump(2);
        Ok(())
    }

    /// Reads the token starting with `c`, or moves on in the path being read.
    fn token(&mut self, c: char) -> Result<(), RulesError> {
        match self.paths.last().copied() {
            Some((kind, PathAt::Slash)) => {
                self.after_slash(kind, c);
                Ok(())
            }
            Some((_, PathAt::Segment)) if c == '/' => {
                self.punct("/");
                self.set_path(PathAt::Slash);
                Ok(())
            }
            Some((_, PathAt::Segment)) => {
                self.paths.pop();
                Ok(())
            }
            _ => self.ordinary(c),
        }
    }

    fn set_path(&mut self, at: PathAt) {
        if let Some(top) = self.paths.last_mut() {
            top.1 = at;
        }
    }

    /// After a path's `/`: a literal segment, a `{wildcard}` in a `match` path, a `$(...)` in
    /// a path literal. Anything else ends the path and is read as ordinary tokens, for the
    /// parser to report.
    fn after_slash(&mut self, kind: PathKind, c: char) {
        let opens = match kind {
            PathKind::Match => c == '{',
            PathKind::Literal => c == '$' && self.peek(1) == Some('('),
        };
        if opens {
            self.set_path(PathAt::Inside(0));
        } else if in_segment(kind, c) {
            self.segment(kind);
            self.set_path(PathAt::Segment);
        } else {
            self.paths.pop();
        }
    }

    fn segment(&mut self, kind: PathKind) {
        let (line, column, start) = (self.line, self.column, self.i);
        while self.peek(0).is_some_and(|c| in_segment(kind, c)) {
            self.bump(1);
        }
        let text = self.chars[start..self.i].iter().collect();
        self.push(Tok::Segment(text), line, column);
    }

    /// A name, a number, a string or punctuation.
    fn ordinary(&mut self, c: char) -> Result<(), RulesError> {
        if c.is_ascii_alphabetic() || c == '_' {
            let (line, column, start) = (self.line, self.column, self.i);
            while self
                .peek(0)
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                self.bump(1);
            }
            let name = self.chars[start..self.i].iter().collect();
            self.push(Tok::Ident(name), line, column);
            return Ok(());
        }
        if c.is_ascii_digit() {
            return self.number();
        }
        if c == '\'' || c == '"' {
            return self.string(c);
        }
        let rest: String = self.chars[self.i..self.chars.len().min(self.i + 2)]
            .iter()
            .collect();
        let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
            return Err(self.error(self.line, self.column, format!("unexpected `{c}`")));
        };
        let starts_path = if *p == "/" { self.path_starts() } else { None };
        self.punct(p);
        if let Some(kind) = starts_path {
            self.paths.push((kind, PathAt::Slash));
        }
        Ok(())
    }

    /// Emits the punctuation `p` at the cursor, counting the brackets of a `{wildcard}` or
    /// `$(...)` being read.
    fn punct(&mut self, p: &'static str) {
        let (line, column) = (self.line, self.column);
        self.bump(p.chars().count());
        self.push(Tok::Punct(p), line, column);
        let Some((_, PathAt::Inside(open))) = self.paths.last().copied() else {
            return;
        };
        match p {
            "(" | "[" | "{" => self.set_path(PathAt::Inside(open + 1)),
            ")" | "]" | "}" if open <= 1 => self.set_path(PathAt::Segment),
            ")" | "]" | "}" => self.set_path(PathAt::Inside(open - 1)),
            _ => {}
        }
    }

    /// Whether a `/` read now starts a path, and which kind: after `match`, or where an
    /// operand starts rather than after one (where it is division).
    fn path_starts(&self) -> Option<PathKind> {
        let n = self.out.len();
        let member = n >= 2 && self.out[n - 2].tok == Tok::Punct(".");
        let ends_operand = match self.out.last().map(|t| &t.tok) {
            None => false,
            Some(Tok::Ident(w)) if w == "match" && !member => return Some(PathKind::Match),
            Some(Tok::Ident(w)) => member || !matches!(w.as_str(), "if" | "return" | "in"),
            Some(Tok::Punct(p)) => matches!(*p, ")" | "]" | "}"),
            Some(Tok::Int(_) | Tok::Float(_) | Tok::Str(_) | Tok::Segment(_)) => true,
        };
        (!ends_operand).then_some(PathKind::Literal)
    }

    fn number(&mut self) -> Result<(), RulesError> {
        let (line, column, start) = (self.line, self.column, self.i);
        let mut float = false;
        while let Some(d) = self.peek(0) {
            let digit_after = self.peek(1).is_some_and(|n| n.is_ascii_digit());
            if d.is_ascii_digit() {
                self.bump(1);
            } else if d == '.' && !float && digit_after {
                float = true;
                self.bump(1);
            } else if (d == 'e' || d == 'E') && self.i > start {
                float = true;
                self.bump(1);
                if matches!(self.peek(0), Some('+') | Some('-')) {
                    self.bump(1);
                }
            } else {
                break;
            }
        }
        let text: String = self.chars[start..self.i].iter().collect();
        let tok = if float {
            text.parse::<f64>().map(Tok::Float).ok()
        } else {
            text.parse::<i64>().map(Tok::Int).ok()
        };
        let Some(tok) = tok else {
            return Err(self.error(line, column, format!("bad number `{text}`")));
        };
        self.push(tok, line, column);
        Ok(())
    }

    /// A string quoted with `quote`, its escapes resolved.
    fn string(&mut self, quote: char) -> Result<(), RulesError> {
        let (line, column) = (self.line, self.column);
        let not_closed = |lexer: &Self| lexer.error(line, column, "a string is not closed");
        self.bump(1);
        let mut text = String::new();
        loop {
            let Some(d) = self.peek(0).filter(|d| *d != '\n') else {
                return Err(not_closed(self));
            };
            self.bump(1);
            if d == quote {
                break;
            }
            if d != '\\' {
                text.push(d);
                continue;
            }
            let Some(e) = self.peek(0) else {
                return Err(not_closed(self));
            };
            self.bump(1);
            text.push(self.escape(e)?);
        }
        self.push(Tok::Str(text), line, column);
        Ok(())
    }

    /// The character the escape `\e` stands for; the cursor is just past `e`.
    fn escape(&self, e: char) -> Result<char, RulesError> {
        Ok(match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '0' => '\0',
            '\\' | '\'' | '"' | '/' => e,
            other => {
                return Err(self.error(
                    self.line,
                    self.column.saturating_sub(2),
                    format!("unknown escape `\\{other}` in a string"),
                ))
            }
        })
    }
}

/// Whether `c` can be part of a literal path segment. Firestore ids hold anything but `/`;
/// a segment ends at `/`, whitespace or `{`, and in a path literal also at the brackets and
/// separators that can close the expression around it.
fn in_segment(kind: PathKind, c: char) -> bool {
    let ends_any = c == '/' || c == '{' || c.is_whitespace();
    let ends_literal = matches!(c, '(' | ')' | '[' | ']' | '}' | ',' | ';');
    !ends_any && (kind == PathKind::Match || !ends_literal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex("t", s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens_and_positions() {
        assert_eq!(
            toks("allow read: if a.b == 'x\\'y' && 1.5 >= 2 // c\n/* d */ !=3e2"),
            vec![
                Tok::Ident("allow".into()),
                Tok::Ident("read".into()),
                Tok::Punct(":"),
                Tok::Ident("if".into()),
                Tok::Ident("a".into()),
                Tok::Punct("."),
                Tok::Ident("b".into()),
                Tok::Punct("=="),
                Tok::Str("x'y".into()),
                Tok::Punct("&&"),
                Tok::Float(1.5),
                Tok::Punct(">="),
                Tok::Int(2),
                Tok::Punct("!="),
                Tok::Float(300.0),
            ]
        );
        let t = lex("t", "a\n  bb").unwrap();
        assert_eq!((t[1].line, t[1].column), (2, 3));
    }

    fn seg(s: &str) -> Tok {
        Tok::Segment(s.into())
    }

    #[test]
    fn match_paths_are_segments_and_wildcards() {
        assert_eq!(
            toks("match /user-profiles/{id}/ü.~%2F/007/{rest=**}{"),
            vec![
                Tok::Ident("match".into()),
                Tok::Punct("/"),
                seg("user-profiles"),
                Tok::Punct("/"),
                Tok::Punct("{"),
                Tok::Ident("id".into()),
                Tok::Punct("}"),
                Tok::Punct("/"),
                seg("ü.~%2F"),
                Tok::Punct("/"),
                seg("007"),
                Tok::Punct("/"),
                Tok::Punct("{"),
                Tok::Ident("rest".into()),
                Tok::Punct("="),
                Tok::Punct("**"),
                Tok::Punct("}"),
                Tok::Punct("{"),
            ]
        );
        let t = lex("t", "match /a\n  /b-c // d\n{").unwrap();
        assert_eq!(t[4].tok, seg("b-c"));
        assert_eq!((t[4].line, t[4].column), (2, 4));
        assert_eq!(t[5].tok, Tok::Punct("{"));
    }

    #[test]
    fn a_slash_starts_a_path_where_an_operand_starts() {
        assert_eq!(
            toks("x.match / a-b/2"),
            toks("x . match / a - b / 2"),
            "division, not paths"
        );
        assert_eq!(
            toks("f(/a-b/$(g(/c.d)[0])/e) / 2"),
            vec![
                Tok::Ident("f".into()),
                Tok::Punct("("),
                Tok::Punct("/"),
                seg("a-b"),
                Tok::Punct("/"),
                Tok::Punct("$"),
                Tok::Punct("("),
                Tok::Ident("g".into()),
                Tok::Punct("("),
                Tok::Punct("/"),
                seg("c.d"),
                Tok::Punct(")"),
                Tok::Punct("["),
                Tok::Int(0),
                Tok::Punct("]"),
                Tok::Punct(")"),
                Tok::Punct("/"),
                seg("e"),
                Tok::Punct(")"),
                Tok::Punct("/"),
                Tok::Int(2),
            ]
        );
        for before in [
            "if", "return", "in", "==", "&&", "!", "[", ",", ":", "?", "=",
        ] {
            let t = toks(&format!("{before} /x-y"));
            assert_eq!(t[t.len() - 1], seg("x-y"), "{before}");
        }
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = lex("f.rules", "a\n  'open").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
        assert_eq!(e.to_string(), "f.rules:2:3: a string is not closed");
        let e = lex("f", "x #").unwrap_err();
        assert_eq!((e.line, e.column), (1, 3));
        let e = lex("f", "/* never").unwrap_err();
        assert_eq!((e.line, e.column), (1, 1));
        let e = lex("f", "99999999999999999999").unwrap_err();
        assert!(e.message.contains("bad number"));
    }
}
