//! Unit tests of the parser: the grammar, path segments, `rules_version`, errors with their
//! positions, nesting limits.

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
