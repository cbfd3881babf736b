//! The rules language's tokens, each with the line and column it starts at.

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
    let chars: Vec<char> = source.chars().collect();
    let (mut i, mut line, mut column) = (0usize, 1u32, 1u32);
    let mut out = Vec::new();
    // Moves past `n` characters, keeping the line and column.
    let advance = |i: &mut usize, line: &mut u32, column: &mut u32, n: usize| {
        for _ in 0..n {
            if chars.get(*i) == Some(&'\n') {
                *line += 1;
                *column = 1;
            } else {
                *column += 1;
            }
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            advance(&mut i, &mut line, &mut column, 1);
            continue;
        }
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                advance(&mut i, &mut line, &mut column, 1);
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let (l, col) = (line, column);
            advance(&mut i, &mut line, &mut column, 2);
            loop {
                if i >= chars.len() {
                    return Err(RulesError::at(file, l, col, "a comment is not closed"));
                }
                if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    advance(&mut i, &mut line, &mut column, 2);
                    break;
                }
                advance(&mut i, &mut line, &mut column, 1);
            }
            continue;
        }
        let (l, col) = (line, column);
        let push = |out: &mut Vec<Token>, tok| {
            out.push(Token {
                tok,
                line: l,
                column: col,
            })
        };
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                advance(&mut i, &mut line, &mut column, 1);
            }
            push(&mut out, Tok::Ident(chars[start..i].iter().collect()));
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            let mut float = false;
            while i < chars.len() {
                let d = chars[i];
                let digit_after = chars.get(i + 1).is_some_and(|n| n.is_ascii_digit());
                if d.is_ascii_digit() {
                    advance(&mut i, &mut line, &mut column, 1);
                } else if d == '.' && !float && digit_after {
                    float = true;
                    advance(&mut i, &mut line, &mut column, 1);
                } else if (d == 'e' || d == 'E') && i > start {
                    float = true;
                    advance(&mut i, &mut line, &mut column, 1);
                    if matches!(chars.get(i), Some('+') | Some('-')) {
                        advance(&mut i, &mut line, &mut column, 1);
                    }
                } else {
                    break;
                }
            }
            let text: String = chars[start..i].iter().collect();
            let tok = if float {
                text.parse::<f64>().map(Tok::Float).ok()
            } else {
                text.parse::<i64>().map(Tok::Int).ok()
            };
            let Some(tok) = tok else {
                return Err(RulesError::at(file, l, col, format!("bad number `{text}`")));
            };
            push(&mut out, tok);
            continue;
        }
        if c == '\'' || c == '"' {
            advance(&mut i, &mut line, &mut column, 1);
            let mut text = String::new();
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err(RulesError::at(file, l, col, "a string is not closed"));
                };
                if d == '\n' {
                    return Err(RulesError::at(file, l, col, "a string is not closed"));
                }
                advance(&mut i, &mut line, &mut column, 1);
                if d == c {
                    break;
                }
                if d != '\\' {
                    text.push(d);
                    continue;
                }
                let Some(&e) = chars.get(i) else {
                    return Err(RulesError::at(file, l, col, "a string is not closed"));
                };
                advance(&mut i, &mut line, &mut column, 1);
                text.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '0' => '\0',
                    '\\' | '\'' | '"' | '/' => e,
                    other => {
                        return Err(RulesError::at(
                            file,
                            line,
                            column.saturating_sub(2),
                            format!("unknown escape `\\{other}` in a string"),
                        ))
                    }
                });
            }
            push(&mut out, Tok::Str(text));
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) else {
            return Err(RulesError::at(file, l, col, format!("unexpected `{c}`")));
        };
        advance(&mut i, &mut line, &mut column, p.chars().count());
        push(&mut out, Tok::Punct(p));
    }
    Ok(out)
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
