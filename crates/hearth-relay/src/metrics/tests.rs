//! Unit tests of the metrics: the Prometheus text each series renders.

use super::*;

/// One parsed sample line.
#[derive(Debug)]
struct Sample {
    /// The metric name.
    name: String,
    /// Its labels, in the order written.
    labels: Vec<(String, String)>,
    /// The sample's value.
    value: f64,
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    !s.contains(':') && is_metric_name(s)
}

/// Parses `{a="x",b="y"}` at the start of `s`, returning the labels and the rest.
fn parse_labels(s: &str) -> (Vec<(String, String)>, &str) {
    let Some(mut rest) = s.strip_prefix('{') else {
        return (Vec::new(), s);
    };
    let mut labels = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return (labels, r);
        }
        let (name, r) = rest.split_once("=\"").expect("label name then =\"");
        assert!(is_label_name(name), "label name {name:?}");
        let mut value = String::new();
        let mut chars = r.char_indices();
        let end = loop {
            match chars.next().expect("closing quote") {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect("escaped char").1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => panic!("bad escape \\{c}"),
                },
                (_, '\n') => panic!("raw newline in a label value"),
                (_, c) => value.push(c),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &r[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// A checker for the text exposition format: every line is HELP, TYPE or a sample, each
/// family is declared once before its samples, and its samples are contiguous.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "output ends with a newline");
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest.split_once(' ').expect("HELP name doc");
            assert!(is_metric_name(name), "{line}");
            assert!(!doc.replace("\\\\", "").replace("\\n", "").contains('\\'));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(is_metric_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                typed.insert(name.into(), kind.into()).is_none(),
                "{name} typed twice"
            );
            current = Some((name.into(), kind.into()));
        } else {
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let end = line.find(['{', ' ']).expect("name then labels or value");
            let name = &line[..end];
            assert!(is_metric_name(name), "{line}");
            let (labels, rest) = parse_labels(&line[end..]);
            let value = rest.strip_prefix(' ').expect("space before value");
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                "NaN" => f64::NAN,
                v => v.parse().unwrap_or_else(|_| panic!("value in {line:?}")),
            };
            let (family, kind) = current.as_ref().expect("sample after a TYPE line");
            let matches = if kind == "histogram" {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(family))
            } else {
                name == family
            };
            assert!(matches, "{name} is outside its family's block");
            if name.ends_with("_bucket") && kind == "histogram" {
                assert!(labels.iter().any(|(l, _)| l == "le"), "{line}");
            }
            samples.push(Sample {
                name: name.into(),
                labels,
                value,
            });
        }
    }
    samples
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(l, v)| s.labels.iter().any(|(sl, sv)| sl == l && sv == v))
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}");
    found[0].value
}

fn exercise(m: &Metrics) {
    m.connection_opened();
    m.listen_started("app");
    m.commits("app", 3);
    m.commit_latency(0.002);
    m.group_commit(3, 0.001);
    m.fanout_latency(0.0004);
    m.frames_sent(5);
    m.queue_depth("app", 2);
    m.outbound_bytes(1000);
    m.slow_consumer_dropped();
    m.backfill("other", 10, 40);
    m.protocol_error("bad_frame");
}

#[test]
fn render_is_valid_exposition() {
    let m = Metrics::new();
    let fresh = parse(&m.render());
    assert_eq!(value(&fresh, "hearth_connections_open", &[]), 0.0);
    exercise(&m);
    let text = m.render();
    let samples = parse(&text);
    assert!(samples.len() > fresh.len());
    assert!(text.contains("# TYPE hearth_commit_latency_seconds histogram\n"));
    assert!(text.contains("hearth_commits_total{database=\"app\"} 3\n"));
    // Every database appears in every per-database family.
    assert_eq!(
        value(&samples, "hearth_commits_total", &[("database", "other")]),
        0.0
    );
    assert_eq!(
        value(&samples, "hearth_backfill_total", &[("database", "other")]),
        40.0
    );
}

#[test]
fn counters_increase_and_gauges_follow() {
    let m = Metrics::new();
    exercise(&m);
    exercise(&m);
    m.connection_closed();
    m.listen_stopped("app");
    m.outbound_bytes(-1500);
    m.queue_depth("app", 7);
    let s = parse(&m.render());
    assert_eq!(value(&s, "hearth_connections_total", &[]), 2.0);
    assert_eq!(value(&s, "hearth_connections_open", &[]), 1.0);
    assert_eq!(
        value(&s, "hearth_active_listens", &[("database", "app")]),
        1.0
    );
    assert_eq!(
        value(&s, "hearth_commits_total", &[("database", "app")]),
        6.0
    );
    assert_eq!(value(&s, "hearth_group_commits_total", &[]), 2.0);
    assert_eq!(value(&s, "hearth_frames_sent_total", &[]), 10.0);
    assert_eq!(
        value(&s, "hearth_write_queue_depth", &[("database", "app")]),
        7.0
    );
    assert_eq!(value(&s, "hearth_outbound_queued_bytes", &[]), 500.0);
    assert_eq!(value(&s, "hearth_slow_consumers_dropped_total", &[]), 2.0);
    assert_eq!(
        value(&s, "hearth_protocol_errors_total", &[("kind", "bad_frame")]),
        2.0
    );
    assert_eq!(value(&s, "hearth_group_commit_batches_sum", &[]), 6.0);
}

#[test]
fn histogram_buckets_are_cumulative_and_consistent() {
    let m = Metrics::new();
    let observations = [0.00001, 0.00005, 0.003, 0.003, 1.0, 20.0, -1.0, f64::NAN];
    for v in observations {
        m.commit_latency(v);
    }
    let s = parse(&m.render());
    let name = "hearth_commit_latency_seconds";
    let buckets: Vec<(f64, f64)> = s
        .iter()
        .filter(|x| x.name == format!("{name}_bucket"))
        .map(|x| {
            let le = &x.labels.iter().find(|(l, _)| l == "le").unwrap().1;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, x.value)
        })
        .collect();
    assert_eq!(buckets.len(), SECONDS_BUCKETS.len() + 1);
    assert!(buckets
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    let at = |le: f64| buckets.iter().find(|b| b.0 == le).unwrap().1;
    // Bounds are inclusive; the negative observation counts as zero; NaN is dropped.
    assert_eq!(at(0.00005), 3.0);
    assert_eq!(at(0.0025), 3.0);
    assert_eq!(at(0.005), 5.0);
    assert_eq!(at(1.0), 6.0);
    assert_eq!(at(10.0), 6.0);
    assert_eq!(at(f64::INFINITY), 7.0);
    assert_eq!(value(&s, &format!("{name}_count"), &[]), 7.0);
    let sum = value(&s, &format!("{name}_sum"), &[]);
    assert!((sum - 21.00606).abs() < 1e-9, "{sum}");
}

#[test]
fn histogram_counts_every_concurrent_observation() {
    let m = Metrics::new();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for i in 0..1000 {
                    m.fanout_latency(f64::from(i) * 1e-5);
                }
            });
        }
    });
    let s = parse(&m.render());
    assert_eq!(
        value(&s, "hearth_fanout_latency_seconds_count", &[]),
        4000.0
    );
    let sum = value(&s, "hearth_fanout_latency_seconds_sum", &[]);
    assert!((sum - 4.0 * 4.995).abs() < 1e-6, "{sum}");
}

#[test]
fn label_values_are_escaped() {
    let m = Metrics::new();
    let db = "a\"b\\c\nd";
    m.commits(db, 1);
    let text = m.render();
    assert!(text.contains(r#"hearth_commits_total{database="a\"b\\c\nd"} 1"#));
    let s = parse(&text);
    assert_eq!(value(&s, "hearth_commits_total", &[("database", db)]), 1.0);
}
