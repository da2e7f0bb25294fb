//! Property test: random operations against RocksDB and against the in-memory reference model;
//! every result and every read must agree.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use bytes::Bytes;
use penchant_store::validate::now_micros;
use penchant_store::{
    GcRule, MemStore, Mutation, ReadModifyWriteRule, ReadRows, Row, RowFilter, RowMutation,
    RowRange, RowSet, Store, StoreError, TimeRange,
};
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use proptest::prelude::*;

const T: &str = "t";
const HOUR: i64 = 3_600_000_000;

/// Families: `a` keeps everything, `v` keeps 2 versions, `g` keeps an hour, `c` keeps 1 version
/// and takes the read-modify-writes (stamped with the store's clock).
const FAMILIES: [&str; 4] = ["a", "v", "g", "c"];

fn families() -> BTreeMap<String, GcRule> {
    BTreeMap::from([
        ("a".into(), GcRule::None),
        ("v".into(), GcRule::MaxVersions(2)),
        ("g".into(), GcRule::MaxAge(Duration::from_secs(3600))),
        ("c".into(), GcRule::MaxVersions(1)),
    ])
}

#[derive(Debug, Clone)]
enum Ts {
    /// A few milliseconds after the epoch.
    Small(i64),
    /// Two hours before the test started: expired in `g`.
    Old(i64),
    /// A minute before the test started.
    Recent(i64),
}

impl Ts {
    fn micros(&self, base: i64) -> i64 {
        match self {
            Ts::Small(i) => i * 1000,
            Ts::Old(i) => base - 2 * HOUR + i * 1000,
            Ts::Recent(i) => base - 60_000_000 + i * 1000,
        }
    }
}

#[derive(Debug, Clone)]
enum MutOp {
    Set(usize, Vec<u8>, Ts, Vec<u8>),
    DeleteColumnRange(usize, Vec<u8>, Option<i64>, Option<i64>),
    DeleteColumn(usize, Vec<u8>),
    DeleteFamily(usize),
    DeleteRow,
}

#[derive(Debug, Clone)]
enum FilterOp {
    Family(usize),
    FamilyRegex(&'static str),
    Qualifiers(Vec<Vec<u8>>),
    QualifierPrefix(Vec<u8>),
    ColumnRange(usize, Vec<u8>, Vec<u8>),
    Time(i64, i64),
    PerColumn(u32),
    PerRowLimit(u32),
    PerRowOffset(u32),
    Strip,
    RowKeyRegex(&'static str),
    Chain(Vec<FilterOp>),
    Interleave(Vec<FilterOp>),
    Condition(Box<FilterOp>, Box<FilterOp>, Box<FilterOp>),
}

#[derive(Debug, Clone)]
enum Op {
    Mutate(Vec<u8>, Vec<MutOp>),
    MutateRows(Vec<(Vec<u8>, Vec<MutOp>)>),
    CheckAndMutate(Vec<u8>, Option<FilterOp>, Vec<MutOp>, Vec<MutOp>),
    Increment(Vec<u8>, Vec<u8>, i64),
    Append(Vec<u8>, Vec<u8>, Vec<u8>),
    DropPrefix(Vec<u8>),
    Read(
        Vec<Vec<u8>>,
        Vec<(Vec<u8>, Vec<u8>)>,
        Option<FilterOp>,
        Option<u64>,
    ),
    Compact,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xffu8)],
        1..4,
    )
}

fn qualifier() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"".to_vec()),
        Just(b"x".to_vec()),
        Just(b"x\0".to_vec()),
        Just(b"y".to_vec())
    ]
}

fn ts() -> impl Strategy<Value = Ts> {
    prop_oneof![
        (0i64..6).prop_map(Ts::Small),
        (0i64..3).prop_map(Ts::Old),
        (0i64..3).prop_map(Ts::Recent)
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..4),
        any::<i64>().prop_map(|n| n.to_be_bytes().to_vec())
    ]
}

fn mut_op() -> impl Strategy<Value = MutOp> {
    prop_oneof![
        6 => (0..4usize, qualifier(), ts(), value()).prop_map(|(f, q, t, v)| MutOp::Set(f, q, t, v)),
        // Partial time-range deletes only where versions are not capped: a compaction may already
        // have reclaimed an older version that such a delete would otherwise bring back (as in
        // Bigtable, where garbage collection is lazy).
        1 => (prop_oneof![Just(0usize), Just(2usize)], qualifier(), prop::option::of(0i64..6), prop::option::of(0i64..7))
            .prop_map(|(f, q, s, e)| {
                let (s, e) = match (s, e) { (Some(s), Some(e)) if s > e => (Some(e), Some(s)), p => p };
                MutOp::DeleteColumnRange(f, q, s, e)
            }),
        1 => (0..4usize, qualifier()).prop_map(|(f, q)| MutOp::DeleteColumn(f, q)),
        1 => (0..4usize).prop_map(MutOp::DeleteFamily),
        1 => Just(MutOp::DeleteRow),
    ]
}

fn filter() -> impl Strategy<Value = FilterOp> {
    let leaf = prop_oneof![
        (0..4usize).prop_map(FilterOp::Family),
        prop_oneof![Just("a|v"), Just("[cg]"), Just(".*")].prop_map(FilterOp::FamilyRegex),
        prop::collection::vec(qualifier(), 1..3).prop_map(FilterOp::Qualifiers),
        prop_oneof![Just(b"x".to_vec()), Just(b"".to_vec())].prop_map(FilterOp::QualifierPrefix),
        (0..4usize, qualifier(), qualifier()).prop_map(|(f, a, b)| FilterOp::ColumnRange(f, a, b)),
        (0i64..6, 0i64..8).prop_map(|(a, b)| FilterOp::Time(a.min(b), a.max(b))),
        (1u32..3).prop_map(FilterOp::PerColumn),
        (1u32..4).prop_map(FilterOp::PerRowLimit),
        (0u32..3).prop_map(FilterOp::PerRowOffset),
        Just(FilterOp::Strip),
        prop_oneof![Just("a.*"), Just("(?s).*\\x00.*")].prop_map(FilterOp::RowKeyRegex),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(FilterOp::Chain),
            prop::collection::vec(inner.clone(), 0..3).prop_map(FilterOp::Interleave),
            (inner.clone(), inner.clone(), inner).prop_map(|(p, t, f)| FilterOp::Condition(
                Box::new(p),
                Box::new(t),
                Box::new(f)
            )),
        ]
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (key(), prop::collection::vec(mut_op(), 1..4)).prop_map(|(k, m)| Op::Mutate(k, m)),
        2 => prop::collection::vec((key(), prop::collection::vec(mut_op(), 1..3)), 1..4).prop_map(Op::MutateRows),
        2 => (key(), prop::option::of(filter()), prop::collection::vec(mut_op(), 0..2), prop::collection::vec(mut_op(), 0..2))
            .prop_map(|(k, p, t, f)| Op::CheckAndMutate(k, p, t, f)),
        2 => (key(), qualifier(), -3i64..4).prop_map(|(k, q, d)| Op::Increment(k, q, d)),
        1 => (key(), qualifier(), value()).prop_map(|(k, q, v)| Op::Append(k, q, v)),
        1 => prop::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(0xffu8)], 0..2).prop_map(Op::DropPrefix),
        4 => (prop::collection::vec(key(), 0..3), prop::collection::vec((key(), key()), 0..2), prop::option::of(filter()), prop::option::of(0u64..4))
            .prop_map(|(k, r, f, l)| Op::Read(k, r, f, l)),
        1 => Just(Op::Compact),
    ]
}

fn mutations(ops: &[MutOp], base: i64) -> Vec<Mutation> {
    ops.iter()
        .map(|m| match m {
            MutOp::Set(f, q, t, v) => {
                Mutation::set(FAMILIES[*f], q.clone(), t.micros(base), v.clone())
            }
            MutOp::DeleteColumnRange(f, q, s, e) => Mutation::DeleteFromColumn {
                family: FAMILIES[*f].into(),
                qualifier: Bytes::from(q.clone()),
                range: TimeRange {
                    start: s.map(|s| s * 1000),
                    end: e.map(|e| e * 1000),
                },
            },
            MutOp::DeleteColumn(f, q) => Mutation::delete_column(FAMILIES[*f], q.clone()),
            MutOp::DeleteFamily(f) => Mutation::DeleteFromFamily {
                family: FAMILIES[*f].into(),
            },
            MutOp::DeleteRow => Mutation::DeleteFromRow,
        })
        .collect()
}

fn to_filter(f: &FilterOp) -> RowFilter {
    match f {
        FilterOp::Family(i) => RowFilter::Family(FAMILIES[*i].into()),
        FilterOp::FamilyRegex(r) => RowFilter::FamilyRegex((*r).into()),
        FilterOp::Qualifiers(qs) => RowFilter::qualifiers(qs.iter().cloned()),
        FilterOp::QualifierPrefix(p) => RowFilter::QualifierPrefix(Bytes::from(p.clone())),
        FilterOp::ColumnRange(i, a, b) => RowFilter::ColumnRange {
            family: FAMILIES[*i].into(),
            start: Bound::Included(Bytes::from(a.clone())),
            end: Bound::Excluded(Bytes::from(b.clone())),
        },
        FilterOp::Time(a, b) => RowFilter::TimestampRange(TimeRange::new(a * 1000, b * 1000)),
        FilterOp::PerColumn(n) => RowFilter::CellsPerColumnLimit(*n),
        FilterOp::PerRowLimit(n) => RowFilter::CellsPerRowLimit(*n),
        FilterOp::PerRowOffset(n) => RowFilter::CellsPerRowOffset(*n),
        FilterOp::Strip => RowFilter::StripValue,
        FilterOp::RowKeyRegex(r) => RowFilter::RowKeyRegex((*r).into()),
        FilterOp::Chain(fs) => RowFilter::Chain(fs.iter().map(to_filter).collect()),
        FilterOp::Interleave(fs) => RowFilter::Interleave(fs.iter().map(to_filter).collect()),
        FilterOp::Condition(p, t, f) => RowFilter::Condition {
            predicate: Box::new(to_filter(p)),
            on_match: Box::new(to_filter(t)),
            on_no_match: Box::new(to_filter(f)),
        },
    }
}

/// Cells of `c` are stamped with each store's own clock: compare them without timestamps.
fn normalize(rows: Vec<Row>) -> Vec<Row> {
    rows.into_iter()
        .map(|mut r| {
            for c in &mut r.cells {
                if c.family == "c" {
                    c.timestamp = 0;
                }
            }
            r
        })
        .collect()
}

/// A result, with errors reduced to their kind (messages may differ in detail).
fn outcome<T: std::fmt::Debug>(r: Result<T, StoreError>) -> Result<T, String> {
    r.map_err(|e| format!("{:?}", std::mem::discriminant(&e)))
}

async fn apply(store: &dyn Store, op: &Op, base: i64) -> String {
    let rows = |r: Result<Vec<Row>, StoreError>| format!("{:?}", outcome(r.map(normalize)));
    match op {
        Op::Mutate(k, m) => format!(
            "{:?}",
            outcome(
                store
                    .mutate_row(T, Bytes::from(k.clone()), mutations(m, base))
                    .await
            )
        ),
        Op::MutateRows(entries) => {
            let entries = entries
                .iter()
                .map(|(k, m)| RowMutation::new(k.clone(), mutations(m, base)))
                .collect();
            let statuses = store
                .mutate_rows(T, entries)
                .await
                .map(|s| s.into_iter().map(outcome).collect::<Vec<_>>());
            format!("{:?}", outcome(statuses))
        }
        Op::CheckAndMutate(k, p, t, f) => format!(
            "{:?}",
            outcome(
                store
                    .check_and_mutate_row(
                        T,
                        Bytes::from(k.clone()),
                        p.as_ref().map(to_filter),
                        mutations(t, base),
                        mutations(f, base)
                    )
                    .await
            )
        ),
        Op::Increment(k, q, d) => {
            let r = store
                .read_modify_write_row(
                    T,
                    Bytes::from(k.clone()),
                    vec![ReadModifyWriteRule::increment("c", q.clone(), *d)],
                )
                .await;
            rows(r.map(|r| vec![r]))
        }
        Op::Append(k, q, v) => {
            let r = store
                .read_modify_write_row(
                    T,
                    Bytes::from(k.clone()),
                    vec![ReadModifyWriteRule::append("c", q.clone(), v.clone())],
                )
                .await;
            rows(r.map(|r| vec![r]))
        }
        Op::DropPrefix(p) => format!("{:?}", outcome(store.drop_row_range(T, p).await)),
        Op::Read(keys, ranges, f, limit) => {
            let request = ReadRows {
                rows: RowSet {
                    keys: keys.iter().cloned().map(Bytes::from).collect(),
                    ranges: ranges
                        .iter()
                        .map(|(a, b)| RowRange::closed_open(a.clone(), b.clone()))
                        .collect(),
                },
                filter: f.as_ref().map(to_filter),
                limit: *limit,
                ..ReadRows::default()
            };
            rows(store.read_all(T, request).await)
        }
        Op::Compact => String::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn rocksdb_matches_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let options = RocksOptions { sync_writes: false, ..RocksOptions::default() };
            let rocks = RocksStore::open(dir.path(), options).unwrap();
            let model = MemStore::new();
            rocks.create_table(T, families()).await.unwrap();
            model.create_table(T, families()).await.unwrap();
            let base = now_micros();
            for (i, op) in ops.iter().enumerate() {
                if matches!(op, Op::Compact) {
                    rocks.compact().unwrap();
                    continue;
                }
                let got = apply(&rocks, op, base).await;
                let want = apply(&model, op, base).await;
                prop_assert_eq!(got, want, "op {} of {:?}", i, ops);
            }
            let got = normalize(rocks.read_all(T, ReadRows::default()).await.unwrap());
            let want = normalize(model.read_all(T, ReadRows::default()).await.unwrap());
            prop_assert_eq!(got, want);
            Ok(())
        })?;
    }
}
