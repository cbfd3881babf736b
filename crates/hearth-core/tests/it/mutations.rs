//! Mutations applied to documents: Firestore's set/merge/update/delete, preconditions and
//! field transforms, with exact expected documents, the seed-002 distributed counter, and
//! property tests against naive models.

use hearth_core::document::{Document, DocumentError};
use hearth_core::error::ErrorCode;
use hearth_core::mutation::{
    ApplyContext, FieldTransform, Mutation, MutationError, Precondition, SetMerge, UnknownBase,
};
use hearth_core::path::{DocumentName, FieldPath};
use hearth_core::value::{Map, Timestamp, Value};
use proptest::prelude::*;

use FieldTransform::{ArrayRemove, ArrayUnion, Increment, Maximum, Minimum, ServerTimestamp};
use Value::{Double as D, Integer as I};

fn fp(s: &str) -> FieldPath {
    FieldPath::parse(s).unwrap()
}

fn name() -> DocumentName {
    DocumentName::parse("users/alice").unwrap()
}

fn map(pairs: &[(&str, Value)]) -> Map {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn mv(pairs: &[(&str, Value)]) -> Value {
    Value::Map(map(pairs))
}

fn s(x: &str) -> Value {
    Value::from(x)
}

fn time() -> Timestamp {
    Timestamp::new(1_700_000_000, 500_000_000).unwrap()
}

fn ctx(commit_version: u64) -> ApplyContext {
    ApplyContext {
        commit_version,
        commit_time: time(),
    }
}

/// A stored document created at version 2 and last updated at version 5.
fn stored(fields: Map) -> Document {
    Document {
        name: name(),
        fields: fields.into(),
        create_version: 2,
        update_version: 5,
    }
}

fn expect(fields: Map, create_version: u64, update_version: u64) -> Option<Document> {
    Some(Document {
        name: name(),
        fields: fields.into(),
        create_version,
        update_version,
    })
}

/// The base used by most cases: `{ name: "alice", profile: { age: 30, city: "paris" }, n: 5 }`.
fn base() -> Document {
    stored(map(&[
        ("name", s("alice")),
        ("profile", mv(&[("age", I(30)), ("city", s("paris"))])),
        ("n", I(5)),
    ]))
}

fn apply(m: &Mutation, base: Option<&Document>) -> Result<Option<Document>, MutationError> {
    m.apply(base, &ctx(9))
}

#[test]
fn set_overwrites_and_creates() {
    let data = map(&[("a", I(1)), ("profile", mv(&[("age", I(31))]))]);
    let m = Mutation::set(name(), data.clone());
    // Existing: every old field is gone; the creation version is kept.
    assert_eq!(apply(&m, Some(&base())), Ok(expect(data.clone(), 2, 9)));
    // Absent: created at the commit version.
    assert_eq!(apply(&m, None), Ok(expect(data, 9, 9)));
}

#[test]
fn set_merge_all_deep_merges_maps_and_replaces_leaves() {
    let data = map(&[
        (
            "profile",
            mv(&[("age", I(31)), ("tags", mv(&[("x", I(1))]))]),
        ),
        ("name", mv(&[("first", s("al"))])),
        ("n", mv(&[])),
        ("new", s("v")),
    ]);
    let m = Mutation::set_merge(name(), data, SetMerge::MergeAll);
    let want = map(&[
        // A non-map leaf (`name`) is replaced by the map; nested maps merge key by key.
        ("name", mv(&[("first", s("al"))])),
        (
            "profile",
            mv(&[
                ("age", I(31)),
                ("city", s("paris")),
                ("tags", mv(&[("x", I(1))])),
            ]),
        ),
        // An empty map is a leaf: it replaces the field (Firestore's documented behaviour).
        ("n", mv(&[])),
        ("new", s("v")),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
    // Merging into an absent document creates it.
    let m = Mutation::set_merge(name(), map(&[("a", I(1))]), SetMerge::MergeAll);
    assert_eq!(apply(&m, None), Ok(expect(map(&[("a", I(1))]), 9, 9)));
}

#[test]
fn set_merge_all_with_field_deletes() {
    // set({ profile: { city: delete(), zip: "75" }, name: delete() }, { merge: true })
    let data = map(&[("profile", mv(&[("zip", s("75"))]))]);
    let m = Mutation::set_merge(name(), data, SetMerge::MergeAll)
        .with_field_delete(fp("profile.city"))
        .with_field_delete(fp("name"))
        .with_field_delete(fp("missing.deep"));
    let want = map(&[
        ("n", I(5)),
        ("profile", mv(&[("age", I(30)), ("zip", s("75"))])),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
    // A map that only held a delete sentinel (`{ profile: { city: delete() } }`) writes nothing.
    let m = Mutation::set_merge(name(), map(&[("profile", mv(&[]))]), SetMerge::MergeAll)
        .with_field_delete(fp("profile.city"));
    let want = map(&[
        ("name", s("alice")),
        ("n", I(5)),
        ("profile", mv(&[("age", I(30))])),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
}

#[test]
fn set_merge_fields_copies_only_listed_paths() {
    let data = map(&[
        ("profile", mv(&[("age", I(40)), ("city", s("rome"))])),
        ("name", s("ignored")),
        ("extra", mv(&[("k", I(1))])),
    ]);
    let merge = SetMerge::MergeFields(vec![fp("profile.age"), fp("extra"), fp("n")]);
    // `n` is listed and absent from the data: FieldValue.delete() in the data.
    let m = Mutation::set_merge(name(), data, merge).with_field_delete(fp("n"));
    let want = map(&[
        ("name", s("alice")),
        ("profile", mv(&[("age", I(40)), ("city", s("paris"))])),
        ("extra", mv(&[("k", I(1))])),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
    // A listed path that is neither in the data nor a sentinel is refused.
    let m = Mutation::set_merge(name(), Map::new(), SetMerge::MergeFields(vec![fp("n")]));
    let err = apply(&m, Some(&base())).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert_eq!(
        err.to_string(),
        "invalid write to document `users/alice`: field `n` is listed in merge fields but missing from the data"
    );
}

#[test]
fn update_sets_paths_creates_and_replaces_intermediates_and_deletes() {
    let m = Mutation::update(
        name(),
        vec![
            (fp("profile.city"), Some(s("rome"))),
            (fp("profile.address.zip"), Some(s("00100"))),
            (fp("name.first"), Some(s("al"))),
            (fp("n"), None),
            (fp("nothing.here"), None),
            (fp("`a.b`"), Some(I(1))),
        ],
    );
    let want = map(&[
        // A non-map intermediate (`name`) is replaced by a map.
        ("name", mv(&[("first", s("al"))])),
        (
            "profile",
            mv(&[
                ("address", mv(&[("zip", s("00100"))])),
                ("age", I(30)),
                ("city", s("rome")),
            ]),
        ),
        ("a.b", I(1)),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
}

#[test]
fn update_of_a_map_replaces_it_whole() {
    let m = Mutation::update(name(), vec![(fp("profile"), Some(mv(&[("age", I(1))])))]);
    let want = map(&[
        ("name", s("alice")),
        ("profile", mv(&[("age", I(1))])),
        ("n", I(5)),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
}

#[test]
fn update_requires_the_document() {
    let m = Mutation::update(name(), vec![(fp("a"), Some(I(1)))]);
    let err = apply(&m, None).unwrap_err();
    assert_eq!(err, MutationError::NotFound { name: name() });
    assert_eq!(err.to_string(), "document `users/alice` not found");
}

#[test]
fn delete_removes_and_tolerates_absence() {
    let m = Mutation::delete(name());
    assert_eq!(apply(&m, Some(&base())), Ok(None));
    assert_eq!(apply(&m, None), Ok(None));
    let m = m.with_precondition(Precondition::Exists(true));
    assert_eq!(
        apply(&m, None),
        Err(MutationError::NotFound { name: name() })
    );
}

#[test]
fn preconditions_are_checked_first() {
    let set = Mutation::set(name(), map(&[("a", I(1))]));
    let create = set.clone().with_precondition(Precondition::Exists(false));
    let err = apply(&create, Some(&base())).unwrap_err();
    assert_eq!(err, MutationError::AlreadyExists { name: name() });
    assert_eq!(err.to_string(), "document `users/alice` already exists");
    assert_eq!(apply(&create, None), Ok(expect(map(&[("a", I(1))]), 9, 9)));

    let must_exist = set.clone().with_precondition(Precondition::Exists(true));
    assert_eq!(
        apply(&must_exist, None),
        Err(MutationError::NotFound { name: name() })
    );
    assert_eq!(
        apply(&must_exist, Some(&base())),
        Ok(expect(map(&[("a", I(1))]), 2, 9))
    );

    let at = |v| {
        set.clone()
            .with_precondition(Precondition::UpdateVersion(v))
    };
    assert_eq!(
        apply(&at(5), Some(&base())),
        Ok(expect(map(&[("a", I(1))]), 2, 9))
    );
    let err = apply(&at(4), Some(&base())).unwrap_err();
    assert_eq!(err.code(), ErrorCode::FailedPrecondition);
    assert_eq!(
        err.to_string(),
        "document `users/alice` has update version 5, but the write requires update version 4"
    );
    let err = apply(&at(4), None).unwrap_err();
    assert_eq!(
        err,
        MutationError::FailedPrecondition {
            name: name(),
            expected: 4,
            actual: None
        }
    );
    // A failing precondition on a delete leaves the document alone (the caller keeps `base`).
    let del = Mutation::delete(name()).with_precondition(Precondition::UpdateVersion(1));
    assert!(matches!(
        apply(&del, Some(&base())),
        Err(MutationError::FailedPrecondition { .. })
    ));
}

#[test]
fn transforms_apply_after_the_write() {
    // update({ profile: { age: 1, visits: increment(1) }, n: increment(2), ... }): the
    // transforms see `profile` as the update replaced it, and the stored `n`.
    let m = Mutation::update(name(), vec![(fp("profile"), Some(mv(&[("age", I(1))])))])
        .with_transform(fp("n"), Increment(I(2)))
        .with_transform(fp("profile.visits"), Increment(I(1)))
        .with_transform(fp("seen"), ServerTimestamp)
        .with_transform(fp("name.len"), Maximum(I(3)));
    let want = map(&[
        ("name", mv(&[("len", I(3))])),
        ("profile", mv(&[("age", I(1)), ("visits", I(1))])),
        ("n", I(7)),
        ("seen", Value::Timestamp(time())),
    ]);
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));

    // An overwrite discards the old `n`, so the increment starts from nothing.
    let m = Mutation::set(name(), Map::new()).with_transform(fp("n"), Increment(I(1)));
    assert_eq!(
        apply(&m, Some(&base())),
        Ok(expect(map(&[("n", I(1))]), 2, 9))
    );
    // A merge keeps it: set({ n: increment(1) }, { merge: true }).
    let m = Mutation::set_merge(name(), Map::new(), SetMerge::MergeAll)
        .with_transform(fp("n"), Increment(I(1)))
        .with_transform(fp("profile.age"), Minimum(D(18.5)));
    let mut want = (*base().fields).clone();
    want.insert("n".into(), I(6));
    want.insert(
        "profile".into(),
        mv(&[("age", D(18.5)), ("city", s("paris"))]),
    );
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
    // And mergeFields listing the transformed field reads the stored value too.
    let m = Mutation::set_merge(name(), Map::new(), SetMerge::MergeFields(vec![fp("n")]))
        .with_transform(fp("n"), Increment(I(1)));
    let mut want = (*base().fields).clone();
    want.insert("n".into(), I(6));
    assert_eq!(apply(&m, Some(&base())), Ok(expect(want, 2, 9)));
}

#[test]
fn increments_saturate_and_widen() {
    let doc = stored(map(&[
        ("hi", I(i64::MAX - 1)),
        ("lo", I(i64::MIN + 1)),
        ("d", D(1.25)),
        ("text", s("x")),
    ]));
    let m = Mutation::update(name(), vec![])
        .with_transform(fp("hi"), Increment(I(10)))
        .with_transform(fp("lo"), Increment(I(-10)))
        .with_transform(fp("d"), Increment(I(1)))
        .with_transform(fp("text"), Increment(D(2.0)))
        .with_transform(fp("fresh"), Increment(I(-3)));
    let want = map(&[
        ("hi", I(i64::MAX)),
        ("lo", I(i64::MIN)),
        ("d", D(2.25)),
        ("text", D(2.0)),
        ("fresh", I(-3)),
    ]);
    assert_eq!(apply(&m, Some(&doc)), Ok(expect(want, 2, 9)));
}

#[test]
fn array_union_and_remove() {
    let doc = stored(map(&[
        ("tags", Value::Array(vec![I(1), s("a"), I(1)])),
        ("scalar", s("x")),
        ("word", s("w")),
    ]));
    let m = Mutation::update(name(), vec![])
        .with_transform(fp("tags"), ArrayUnion(vec![D(1.0), s("a"), s("b"), s("b")]))
        .with_transform(fp("scalar"), ArrayUnion(vec![I(2)]))
        .with_transform(fp("none"), ArrayRemove(vec![I(2)]));
    let want = map(&[
        (
            "tags",
            Value::Array(vec![I(1), s("a"), I(1), D(1.0), s("b")]),
        ),
        ("scalar", Value::Array(vec![I(2)])),
        ("none", Value::Array(vec![])),
        ("word", s("w")),
    ]);
    let after = apply(&m, Some(&doc)).unwrap();
    assert_eq!(after, expect(want, 2, 9));
    let m = Mutation::update(name(), vec![])
        .with_transform(fp("tags"), ArrayRemove(vec![I(1), s("zzz")]))
        .with_transform(fp("scalar"), ArrayRemove(vec![I(2)]))
        .with_transform(fp("word"), ArrayRemove(vec![]));
    let want = map(&[
        ("tags", Value::Array(vec![s("a"), D(1.0), s("b")])),
        ("scalar", Value::Array(vec![])),
        ("none", Value::Array(vec![])),
        // A non-array field becomes [] even when nothing is removed.
        ("word", Value::Array(vec![])),
    ]);
    assert_eq!(m.apply(after.as_ref(), &ctx(10)), Ok(expect(want, 2, 10)));
}

#[test]
fn results_are_checked_against_document_limits() {
    let deep = (0..21).map(|i| format!("f{i}")).collect::<Vec<_>>();
    let path = FieldPath::from_segments(deep).unwrap();
    let m = Mutation::update(name(), vec![(path, Some(I(1)))]);
    let err = apply(&m, Some(&base())).unwrap_err();
    assert!(matches!(
        &err,
        MutationError::Document { name: n, source: DocumentError::TooDeep { .. } } if *n == name()
    ));
    assert!(
        err.to_string()
            .starts_with("document `users/alice` would be invalid after the write: field `f0.f1"),
        "{err}"
    );
    let m = Mutation::set(
        name(),
        map(&[("a", Value::Array(vec![Value::Array(vec![])]))]),
    );
    let err = apply(&m, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "document `users/alice` would be invalid after the write: field `a` holds an array directly inside an array, which is not allowed"
    );
    let m = Mutation::set(name(), map(&[("", I(1))]));
    assert_eq!(
        apply(&m, None).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
}

#[test]
fn invalid_mutations_are_refused_before_any_check_of_the_document() {
    let m = Mutation::update(name(), vec![(fp("a"), Some(I(1))), (fp("a.b"), None)]);
    // Even on an absent document the shape error wins over NotFound.
    let err = apply(&m, None).unwrap_err();
    assert_eq!(
        err,
        MutationError::InvalidArgument(
            "invalid write to document `users/alice`: field paths `a` and `a.b` overlap: one contains the other".into()
        )
    );
    let m =
        Mutation::update(name(), vec![(fp("n"), None)]).with_transform(fp("n"), Increment(I(1)));
    assert!(matches!(
        apply(&m, Some(&base())),
        Err(MutationError::InvalidArgument(_))
    ));
    let m =
        Mutation::update(name(), vec![]).with_transform(FieldPath::document_id(), Increment(I(1)));
    assert!(apply(&m, Some(&base()))
        .unwrap_err()
        .to_string()
        .contains("`__name__`"));
}

// --- Seed 002: distributed counters -------------------------------------------------------

/// A tiny deterministic generator (xorshift64*), so the test needs no randomness crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// A counter of `shards` shard documents; the relay side of seed 002, one commit per write.
struct Counter {
    shards: Vec<Option<Document>>,
    version: u64,
}

impl Counter {
    fn shard_name(i: usize) -> DocumentName {
        DocumentName::parse(&format!("counters/c/shards/{i}")).unwrap()
    }

    /// `createCounter`: every shard set to `{ count: 0 }`.
    fn create(shards: usize) -> Counter {
        let mut c = Counter {
            shards: vec![None; shards],
            version: 0,
        };
        for i in 0..shards {
            let m = Mutation::set(Counter::shard_name(i), map(&[("count", I(0))]));
            c.commit(i, &m);
        }
        c
    }

    fn commit(&mut self, shard: usize, m: &Mutation) {
        self.version += 1;
        let ctx = ApplyContext {
            commit_version: self.version,
            commit_time: time(),
        };
        self.shards[shard] = m.apply(self.shards[shard].as_ref(), &ctx).unwrap();
    }

    /// `incrementCounter`: `shard_ref.update("count", FieldValue.increment(1))`.
    fn increment(&mut self, shard: usize) {
        let m = Mutation::update(Counter::shard_name(shard), vec![])
            .with_transform(fp("count"), Increment(I(1)));
        self.commit(shard, &m);
    }

    /// `getCount`: the sum of every shard's `count`.
    fn total(&self) -> i64 {
        self.shards
            .iter()
            .map(
                |d| match d.as_ref().unwrap().field(&fp("count")).as_deref() {
                    Some(Value::Integer(n)) => *n,
                    other => panic!("count is {other:?}"),
                },
            )
            .sum()
    }
}

#[test]
fn distributed_counter_sums_to_the_number_of_increments() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut counter = Counter::create(10);
    for _ in 0..5000 {
        let shard = rng.below(10) as usize;
        counter.increment(shard);
    }
    assert_eq!(counter.total(), 5000);
    // Each shard was created once and updated at its last increment's commit.
    for d in counter.shards.iter().flatten() {
        assert!(d.create_version <= 10 && d.update_version >= d.create_version);
    }
    // Incrementing a shard that was never created fails like Firestore's update().
    let m = Mutation::update(Counter::shard_name(99), vec![])
        .with_transform(fp("count"), Increment(I(1)));
    assert_eq!(
        m.apply(None, &ctx(1)),
        Err(MutationError::NotFound {
            name: Counter::shard_name(99)
        })
    );
}

// --- Property tests ---------------------------------------------------------------------

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Boolean),
        (-3i64..3).prop_map(I),
        prop::sample::select(vec![0.0, -0.0, 1.0, 2.5, f64::NAN]).prop_map(D),
        "[xy]{0,2}".prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(str::to_owned)
}

/// Values without nested arrays and at most four levels deep: always valid documents.
fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(leaf(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..4).prop_map(Value::Map),
        ]
    })
}

fn fields() -> impl Strategy<Value = Map> {
    prop::collection::btree_map(key(), value(), 0..5)
}

/// The naive model of `merge: true`: maps merge key by key, anything else (including an
/// empty map, which Firestore treats as a leaf) replaces.
fn reference_merge(base: &mut Map, data: &Map) {
    for (k, v) in data {
        match (v, base.get_mut(k)) {
            (Value::Map(dm), Some(Value::Map(bm))) if !dm.is_empty() => reference_merge(bm, dm),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

fn update_with(transform: FieldTransform) -> Mutation {
    Mutation::update(name(), vec![]).with_transform(fp("f"), transform)
}

fn fields_of(d: Option<Document>) -> Map {
    (*d.expect("the document exists").fields).clone()
}

proptest! {
    #[test]
    fn set_overwrite_then_read_gives_the_data(base in proptest::option::of(fields()), data in fields()) {
        let base = base.map(stored);
        let doc = Mutation::set(name(), data.clone()).apply(base.as_ref(), &ctx(9)).unwrap().unwrap();
        for (k, v) in &data {
            let read = doc.field(&FieldPath::from_segments(vec![k.clone()]).unwrap());
            prop_assert_eq!(read.as_deref(), Some(v));
        }
        prop_assert_eq!(&*doc.fields, &data);
        prop_assert_eq!(doc.create_version, if base.is_some() { 2 } else { 9 });
    }

    #[test]
    fn merge_all_equals_the_reference_merge(base in fields(), data in fields()) {
        let m = Mutation::set_merge(name(), data.clone(), SetMerge::MergeAll);
        let got = fields_of(m.apply(Some(&stored(base.clone())), &ctx(9)).unwrap());
        let mut want = base;
        reference_merge(&mut want, &data);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn integer_increments_commute(
        start in proptest::option::of(-1_000_000i64..1_000_000),
        (ops, shuffled) in prop::collection::vec(-1_000_000i64..1_000_000, 0..30)
            .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
    ) {
        let base = stored(start.map(|n| map(&[("f", I(n))])).unwrap_or_default());
        let run = |ops: &[i64]| {
            let mut doc = base.clone();
            for (i, n) in ops.iter().enumerate() {
                doc = update_with(Increment(I(*n))).apply(Some(&doc), &ctx(10 + i as u64)).unwrap().unwrap();
            }
            doc.fields.get("f").cloned()
        };
        let total = start.unwrap_or(0) + ops.iter().sum::<i64>();
        let want = if ops.is_empty() { start.map(I) } else { Some(I(total)) };
        prop_assert_eq!(run(&ops), want.clone());
        prop_assert_eq!(run(&shuffled), want);
    }

    #[test]
    fn array_union_is_idempotent(current in proptest::option::of(value()), elements in prop::collection::vec(leaf(), 0..6)) {
        let base = stored(current.map(|v| map(&[("f", v)])).unwrap_or_default());
        let m = update_with(ArrayUnion(elements));
        let once = m.apply(Some(&base), &ctx(9)).unwrap();
        let twice = m.apply(once.as_ref(), &ctx(9)).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn array_remove_undoes_array_union(current in prop::collection::vec(leaf(), 0..6), elements in prop::collection::vec(leaf(), 0..6)) {
        let base = stored(map(&[("f", Value::Array(current.clone()))]));
        let unioned = update_with(ArrayUnion(elements.clone())).apply(Some(&base), &ctx(9)).unwrap();
        let removed = fields_of(update_with(ArrayRemove(elements.clone())).apply(unioned.as_ref(), &ctx(10)).unwrap());
        let kept: Vec<Value> = current.into_iter().filter(|v| !elements.contains(v)).collect();
        prop_assert_eq!(removed, map(&[("f", Value::Array(kept))]));
    }

    #[test]
    fn distributed_counter_in_any_order(
        shards in 1usize..8,
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..200),
    ) {
        let mut counter = Counter::create(shards);
        for pick in &picks {
            counter.increment(pick.index(shards));
        }
        prop_assert_eq!(counter.total(), picks.len() as i64);
    }
}

#[test]
fn over_an_unknown_base_writes_needing_the_document_stay_unknown() {
    let c = ctx(7);
    let update = Mutation::update(name(), vec![(fp("count"), Some(I(1)))]);
    assert_eq!(update.apply_to_unknown(&c), Ok(UnknownBase::Stays));
    let increment = Mutation::update(name(), vec![]).with_transform(fp("count"), Increment(I(1)));
    assert_eq!(increment.apply_to_unknown(&c), Ok(UnknownBase::Stays));
    for p in [Precondition::Exists(true), Precondition::UpdateVersion(3)] {
        let set = Mutation::set(name(), map(&[("a", I(1))])).with_precondition(p);
        assert_eq!(set.apply_to_unknown(&c), Ok(UnknownBase::Stays));
    }
    // A known-absent base still refuses them at once.
    assert!(matches!(
        apply(&update, None),
        Err(MutationError::NotFound { .. })
    ));
}

#[test]
fn over_an_unknown_base_writes_that_replace_it_apply_as_over_an_absent_one() {
    let c = ctx(7);
    let set = Mutation::set(name(), map(&[("a", I(1))])).with_transform(fp("n"), Increment(I(2)));
    let create =
        Mutation::set(name(), map(&[("a", I(1))])).with_precondition(Precondition::Exists(false));
    let merge = Mutation::set_merge(name(), map(&[("a", I(1))]), SetMerge::MergeAll);
    for m in [set, create, merge, Mutation::delete(name())] {
        assert_eq!(
            m.apply_to_unknown(&c),
            Ok(UnknownBase::Becomes(m.apply(None, &c).expect("applies")))
        );
    }
    // The mutation's own shape is still checked.
    let bad = Mutation::update(name(), vec![]).with_transform(fp("n"), Increment(s("x")));
    assert!(bad.apply_to_unknown(&c).is_err());
}
