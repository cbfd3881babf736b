//! Methods of values (`s.size()`, `m.keys()`, `m.diff(n).affectedKeys()`, ...), namespace
//! functions (`math.abs`, `timestamp.value`, ...) and global functions (`int`, `string`).

use std::collections::BTreeMap;

use base64::prelude::{Engine, BASE64_STANDARD};
use hearth_core::value::Timestamp;
use md5::Md5;
use sha2::{Digest, Sha256};

use crate::eval::{equal, type_name, Error, Val};
use crate::time;

type R = Result<Val, Error>;

/// Longest regular expression source, and most compiled size.
const MAX_REGEX: usize = 1024;

fn regex(pattern: &str, whole: bool) -> Result<regex::Regex, Error> {
    if pattern.len() > MAX_REGEX {
        return Err("regular expression too long".into());
    }
    let source = if whole {
        format!("^(?:{pattern})$")
    } else {
        pattern.to_owned()
    };
    // Nesting bounded well under the crate's default: its parser and translator recurse
    // per level, and rules run on threads with small stacks.
    regex::RegexBuilder::new(&source)
        .nest_limit(32)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("bad regular expression: {e}"))
}

fn distinct(items: Vec<Val>) -> Vec<Val> {
    let mut out: Vec<Val> = Vec::new();
    for i in items {
        if !out.iter().any(|o| equal(o, &i)) {
            out.push(i);
        }
    }
    out
}

fn elements(v: Val) -> Result<Vec<Val>, Error> {
    match v {
        Val::List(l) | Val::Set(l) => Ok(l),
        v => Err(format!("a list or set is needed, not {}", type_name(&v))),
    }
}

fn keys_set(m: &BTreeMap<String, Val>) -> Val {
    Val::Set(m.keys().cloned().map(Val::Str).collect())
}

/// Method `name` of value `t` with `args`.
pub fn method(t: Val, name: &str, args: Vec<Val>) -> R {
    if let (Val::Partial(p), "get", [Val::Str(key), default]) = (&t, name, args.as_slice()) {
        // A key the partial map holds is present: its value, whatever the default.
        if !default.is_uncertain() {
            if let Some(v) = p.known.get(key) {
                return Ok(v.clone());
            }
        }
    }
    if t.is_uncertain() || args.iter().any(Val::is_uncertain) {
        return Ok(Val::Unknown);
    }
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(format!("`{name}` takes {n} arguments"))
        }
    };
    match (t, name) {
        (Val::Str(s), "size") => Ok(Val::Int(s.chars().count() as i64)),
        (Val::Str(s), "lower") => Ok(Val::Str(s.to_lowercase())),
        (Val::Str(s), "upper") => Ok(Val::Str(s.to_uppercase())),
        (Val::Str(s), "trim") => Ok(Val::Str(s.trim().to_owned())),
        (Val::Str(s), "toUtf8") => Ok(Val::Bytes(s.into_bytes())),
        (Val::Str(s), "matches") => {
            arity(1)?;
            let [Val::Str(p)] = args.as_slice() else {
                return Err("matches() takes a string".into());
            };
            Ok(Val::Bool(regex(p, true)?.is_match(&s)))
        }
        (Val::Str(s), "split") => {
            arity(1)?;
            let [Val::Str(p)] = args.as_slice() else {
                return Err("split() takes a string".into());
            };
            let parts: Vec<Val> = regex(p, false)?
                .split(&s)
                .map(|x| Val::Str(x.to_owned()))
                .collect();
            Ok(Val::List(parts))
        }
        (Val::Str(s), "replace") => {
            arity(2)?;
            let [Val::Str(p), Val::Str(with)] = args.as_slice() else {
                return Err("replace() takes two strings".into());
            };
            Ok(Val::Str(
                regex(p, false)?.replace_all(&s, with.as_str()).into_owned(),
            ))
        }
        (Val::Bytes(b), "size") => Ok(Val::Int(b.len() as i64)),
        (Val::List(l), "size") | (Val::Set(l), "size") => Ok(Val::Int(l.len() as i64)),
        (Val::List(l), "join") => {
            arity(1)?;
            let [Val::Str(sep)] = args.as_slice() else {
                return Err("join() takes a string".into());
            };
            let parts: Result<Vec<String>, Error> = l
                .into_iter()
                .map(|v| match v {
                    Val::Str(s) => Ok(s),
                    v => Err(format!("join() of a list holding {}", type_name(&v))),
                })
                .collect();
            Ok(Val::Str(parts?.join(sep)))
        }
        (Val::List(mut l), "concat") => {
            arity(1)?;
            l.extend(elements(args.into_iter().next().unwrap_or(Val::Null))?);
            Ok(Val::List(l))
        }
        (Val::List(l), "toSet") => Ok(Val::Set(distinct(l))),
        (Val::List(l), "removeAll") => {
            arity(1)?;
            let gone = elements(args.into_iter().next().unwrap_or(Val::Null))?;
            Ok(Val::List(
                l.into_iter()
                    .filter(|x| !gone.iter().any(|g| equal(g, x)))
                    .collect(),
            ))
        }
        (t @ (Val::List(_) | Val::Set(_)), m @ ("hasAll" | "hasAny" | "hasOnly")) => {
            arity(1)?;
            let mine = elements(t)?;
            let other = elements(args.into_iter().next().unwrap_or(Val::Null))?;
            let has = |x: &Val, of: &[Val]| of.iter().any(|y| equal(x, y));
            Ok(Val::Bool(match m {
                "hasAll" => other.iter().all(|x| has(x, &mine)),
                "hasAny" => other.iter().any(|x| has(x, &mine)),
                _ => mine.iter().all(|x| has(x, &other)),
            }))
        }
        (Val::Set(s), m @ ("difference" | "intersection" | "union")) => {
            arity(1)?;
            let other = elements(args.into_iter().next().unwrap_or(Val::Null))?;
            let has = |x: &Val| other.iter().any(|y| equal(x, y));
            Ok(Val::Set(match m {
                "difference" => s.into_iter().filter(|x| !has(x)).collect(),
                "intersection" => s.into_iter().filter(has).collect(),
                _ => distinct(s.into_iter().chain(other).collect()),
            }))
        }
        (Val::Map(m), "keys") => Ok(Val::List(m.keys().cloned().map(Val::Str).collect())),
        (Val::Map(m), "values") => Ok(Val::List(m.into_values().collect())),
        (Val::Map(m), "size") => Ok(Val::Int(m.len() as i64)),
        (Val::Map(m), "get") => {
            arity(2)?;
            let mut args = args.into_iter();
            let (key, default) = (args.next(), args.next().unwrap_or(Val::Null));
            let path = match key {
                Some(Val::Str(k)) => vec![k],
                Some(Val::List(ks)) => ks
                    .into_iter()
                    .map(|k| match k {
                        Val::Str(s) => Ok(s),
                        _ => Err("get() keys must be strings".to_owned()),
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err("get() takes a key or a list of keys".into()),
            };
            let mut at = Val::Map(m);
            for k in path {
                match at {
                    Val::Map(mut inner) => match inner.remove(&k) {
                        Some(v) => at = v,
                        None => return Ok(default),
                    },
                    _ => return Ok(default),
                }
            }
            Ok(at)
        }
        (Val::Map(m), "diff") => {
            arity(1)?;
            let Some(Val::Map(other)) = args.into_iter().next() else {
                return Err("diff() takes a map".into());
            };
            // The diff is a map of the keys' five sets: its methods read them.
            let mut d = BTreeMap::new();
            let added: BTreeMap<String, Val> = m
                .iter()
                .filter(|(k, _)| !other.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let removed: BTreeMap<String, Val> = other
                .iter()
                .filter(|(k, _)| !m.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let changed: BTreeMap<String, Val> = m
                .iter()
                .filter(|(k, v)| other.get(*k).is_some_and(|w| !equal(v, w)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let unchanged: BTreeMap<String, Val> = m
                .iter()
                .filter(|(k, v)| other.get(*k).is_some_and(|w| equal(v, w)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut affected = added.clone();
            affected.extend(removed.clone());
            affected.extend(changed.clone());
            for (name, set) in [
                ("__added", added),
                ("__removed", removed),
                ("__changed", changed),
                ("__unchanged", unchanged),
                ("__affected", affected),
            ] {
                d.insert(name.to_owned(), keys_set(&set));
            }
            d.insert("__diff".to_owned(), Val::Bool(true));
            Ok(Val::Map(d))
        }
        (
            Val::Map(mut d),
            m @ ("addedKeys" | "removedKeys" | "changedKeys" | "unchangedKeys" | "affectedKeys"),
        ) if d.contains_key("__diff") => {
            let key = format!("__{}", m.trim_end_matches("Keys"));
            d.remove(&key).ok_or_else(|| "not a map diff".into())
        }
        (Val::Timestamp(t), m) => timestamp_method(t, m),
        (Val::Duration(d), "nanos") => Ok(Val::Int(
            i64::try_from(d.rem_euclid(time::NANOS_PER_SECOND)).unwrap_or(0),
        )),
        (Val::Duration(d), "seconds") => i64::try_from(d.div_euclid(time::NANOS_PER_SECOND))
            .map(Val::Int)
            .map_err(|_| "duration out of range".into()),
        (Val::Bytes(b), "toBase64") => Ok(Val::Str(BASE64_STANDARD.encode(b))),
        (Val::Bytes(b), "toHexString") => Ok(Val::Str(hex(&b))),
        (Val::LatLng(lat, lng), "distance") => match args.as_slice() {
            [Val::LatLng(lat2, lng2)] => Ok(Val::Float(distance((lat, lng), (*lat2, *lng2)))),
            _ => Err("distance() takes a latlng".into()),
        },
        (Val::LatLng(lat, _), "latitude") => Ok(Val::Float(lat)),
        (Val::LatLng(_, lng), "longitude") => Ok(Val::Float(lng)),
        (t, m) => Err(format!("{} has no method `{m}`", type_name(&t))),
    }
}

fn timestamp_method(t: Timestamp, m: &str) -> R {
    let secs = t.seconds();
    let days = time::days_of(t);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = time::civil_from_days(days);
    Ok(Val::Int(match m {
        "year" => year,
        "month" => month,
        "day" => day,
        "hour" => of_day / 3600,
        "minute" => of_day % 3600 / 60,
        "second" => of_day % 60,
        "nanos" => i64::from(t.nanos()),
        "toMillis" => t.to_micros().div_euclid(1000),
        "dayOfWeek" => (days + 3).rem_euclid(7) + 1,
        "dayOfYear" => time::day_of_year(days),
        "date" => return Ok(Val::Timestamp(time::split_day(t).0)),
        "time" => return Ok(Val::Duration(time::split_day(t).1)),
        _ => return Err(format!("timestamp has no method `{m}`")),
    }))
}

/// Great-circle distance in metres between two points (haversine, mean Earth radius).
fn distance(a: (f64, f64), b: (f64, f64)) -> f64 {
    const EARTH_RADIUS_M: f64 = 6_371_008.8;
    let (p1, p2) = (a.0.to_radians(), b.0.to_radians());
    let dp = p2 - p1;
    let dl = (b.1 - a.1).to_radians();
    let h = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// `ns.name(args)`: `math`, `timestamp`, `latlng`.
pub fn namespace(ns: &str, name: &str, args: Vec<Val>) -> R {
    if args.iter().any(Val::is_uncertain) {
        return Ok(Val::Unknown);
    }
    let num = |v: &Val| match v {
        Val::Int(i) => Some(*i as f64),
        Val::Float(f) => Some(*f),
        _ => None,
    };
    let first = args.first().and_then(num);
    match (ns, name, first) {
        ("math", "abs", _) => match args.first() {
            Some(Val::Int(i)) => i.checked_abs().map(Val::Int).ok_or("int overflow".into()),
            Some(Val::Float(f)) => Ok(Val::Float(f.abs())),
            _ => Err("math.abs() takes a number".into()),
        },
        ("math", "ceil", Some(x)) => Ok(Val::Int(x.ceil() as i64)),
        ("math", "floor", Some(x)) => Ok(Val::Int(x.floor() as i64)),
        ("math", "round", Some(x)) => Ok(Val::Int(x.round() as i64)),
        ("math", "sqrt", Some(x)) => Ok(Val::Float(x.sqrt())),
        ("math", "isNaN", Some(x)) => Ok(Val::Bool(x.is_nan())),
        ("math", "isInfinite", Some(x)) => Ok(Val::Bool(x.is_infinite())),
        ("math", "pow", Some(x)) => match args.get(1).and_then(num) {
            Some(y) => Ok(Val::Float(x.powf(y))),
            None => Err("math.pow() takes two numbers".into()),
        },
        ("timestamp", "value", _) => match args.first() {
            Some(Val::Int(ms)) => ms
                .checked_mul(1000)
                .and_then(|us| Timestamp::from_micros(us).ok())
                .map(Val::Timestamp)
                .ok_or_else(|| "timestamp out of range".into()),
            _ => Err("timestamp.value() takes milliseconds".into()),
        },
        ("timestamp", "date", _) => match args.as_slice() {
            [Val::Int(y), Val::Int(m), Val::Int(d)] => time::days_from_civil(*y, *m, *d)
                .and_then(|days| days.checked_mul(86_400))
                .and_then(|s| Timestamp::new(s, 0).ok())
                .map(Val::Timestamp)
                .ok_or_else(|| "timestamp.date(): no such date".into()),
            _ => Err("timestamp.date() takes year, month and day".into()),
        },
        ("duration", "value", _) => match args.as_slice() {
            [Val::Int(n), Val::Str(unit)] => time::duration_value(*n, unit).map(Val::Duration),
            _ => Err("duration.value() takes a magnitude and a unit".into()),
        },
        ("duration", "time", _) => match args.as_slice() {
            [Val::Int(h), Val::Int(m), Val::Int(s), Val::Int(ns)] => Ok(Val::Duration(
                i128::from(*h) * 3_600 * time::NANOS_PER_SECOND
                    + i128::from(*m) * 60 * time::NANOS_PER_SECOND
                    + i128::from(*s) * time::NANOS_PER_SECOND
                    + i128::from(*ns),
            )),
            _ => Err("duration.time() takes hours, minutes, seconds and nanoseconds".into()),
        },
        ("duration", "abs", _) => match args.as_slice() {
            [Val::Duration(d)] => d
                .checked_abs()
                .map(Val::Duration)
                .ok_or_else(|| "duration overflow".into()),
            _ => Err("duration.abs() takes a duration".into()),
        },
        ("hashing", algorithm @ ("sha256" | "md5" | "crc32" | "crc32c"), _) => {
            let data = match args.as_slice() {
                [Val::Bytes(b)] => b.clone(),
                [Val::Str(s)] => s.as_bytes().to_vec(),
                _ => return Err(format!("hashing.{algorithm}() takes bytes or a string")),
            };
            Ok(Val::Bytes(match algorithm {
                "sha256" => Sha256::digest(&data).to_vec(),
                "md5" => Md5::digest(&data).to_vec(),
                "crc32" => crc32fast::hash(&data).to_be_bytes().to_vec(),
                _ => crc32c::crc32c(&data).to_be_bytes().to_vec(),
            }))
        }
        ("latlng", "value", Some(lat)) => match args.get(1).and_then(num) {
            Some(lng) => Ok(Val::LatLng(lat, lng)),
            None => Err("latlng.value() takes two numbers".into()),
        },
        _ => Err(format!("unknown function `{ns}.{name}`")),
    }
}

/// A global function: `int`, `float`, `string`, `path`, `debug`.
pub fn global(name: &str, args: Vec<Val>) -> R {
    if args.iter().any(Val::is_uncertain) {
        return Ok(Val::Unknown);
    }
    match (name, args.as_slice()) {
        ("int", [Val::Int(i)]) => Ok(Val::Int(*i)),
        ("int", [Val::Float(f)]) if f.is_finite() => Ok(Val::Int(f.trunc() as i64)),
        ("int", [Val::Str(s)]) => s
            .trim()
            .parse()
            .map(Val::Int)
            .map_err(|_| "not an int".into()),
        ("float", [Val::Int(i)]) => Ok(Val::Float(*i as f64)),
        ("float", [Val::Float(f)]) => Ok(Val::Float(*f)),
        ("float", [Val::Str(s)]) => s
            .trim()
            .parse()
            .map(Val::Float)
            .map_err(|_| "not a float".into()),
        ("string", [v]) => Ok(Val::Str(match v {
            Val::Str(s) => s.clone(),
            Val::Int(i) => i.to_string(),
            Val::Float(f) => f.to_string(),
            Val::Bool(b) => b.to_string(),
            Val::Null => "null".into(),
            Val::Path(p) => format!("/{}", p.join("/")),
            v => return Err(format!("string() of {}", type_name(v))),
        })),
        ("path", [Val::Str(s)]) => Ok(Val::Path(
            s.split('/')
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect(),
        )),
        ("debug", [v]) => Ok(v.clone()),
        _ => Err(format!("unknown function `{name}` for these arguments")),
    }
}
