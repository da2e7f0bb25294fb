//! The conformance suite: the behaviour every [`Store`] backend must have, written once.
//!
//! A backend's test binary runs it with [`conformance_suite!`](crate::conformance_suite), giving
//! an async factory that returns a fresh, empty store in a [`Harness`]:
//!
//! ```ignore
//! async fn fresh() -> penchant_store::conformance::Harness { ... }
//! penchant_store::conformance_suite!(fresh);
//! ```
//!
//! Each case is a public async function that panics on a failed expectation.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::validate::{self, now_micros};
use crate::{
    FamilyChange, GcRule, Mutation, ReadModifyWriteRule, ReadRows, Row, RowFilter, RowMutation,
    RowRange, RowSet, Store, StoreError, TimeRange, split_ranges,
};

/// A store under test, with whatever must live as long as it (a temporary folder, a server).
pub struct Harness {
    pub store: Arc<dyn Store>,
    _guard: Box<dyn Any + Send>,
}

impl Harness {
    pub fn new(store: impl Store, guard: impl Any + Send) -> Self {
        Self {
            store: Arc::new(store),
            _guard: Box::new(guard),
        }
    }
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("store", &self.store)
            .finish()
    }
}

/// Generate one `#[tokio::test]` per conformance case, each on a fresh store from `$factory`.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:path) => {
        $crate::conformance_suite!(@cases $factory;
            admin_tables, admin_rejects_bad_names, admin_families,
            set_and_read_cells, server_timestamps, versions_and_order,
            delete_from_column, delete_from_family_and_row, mutation_is_atomic,
            atomic_writes_across_tables,
            bad_input_is_rejected, mutate_rows_statuses, row_sets_and_order,
            prefix_scans_with_special_bytes, read_limits, filters_family_and_qualifier,
            filters_time_value_and_limits, filters_chain_interleave_condition,
            check_and_mutate, read_modify_write, increments_under_concurrency,
            gc_max_age, gc_max_versions_and_combinations, drop_row_range_and_tables,
            sample_row_keys_cover_table, streams_many_rows_in_order,
        );
    };
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $factory().await;
                $crate::conformance::$case(harness.store.as_ref()).await;
            }
        )*
    };
}

const T: &str = "t";
const MS: i64 = 1000;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn table(store: &dyn Store, families: &[(&str, GcRule)]) {
    let families: BTreeMap<String, GcRule> = families
        .iter()
        .map(|(f, r)| (f.to_string(), r.clone()))
        .collect();
    store.create_table(T, families).await.expect("create table");
}

async fn simple_table(store: &dyn Store) {
    table(store, &[("a", GcRule::None), ("b", GcRule::None)]).await;
}

async fn put(store: &dyn Store, row: &str, family: &str, qualifier: &str, ts: i64, value: &str) {
    store
        .mutate_row(
            T,
            b(row),
            vec![Mutation::set(family, b(qualifier), ts, b(value))],
        )
        .await
        .expect("mutate_row");
}

async fn read(store: &dyn Store, request: ReadRows) -> Vec<Row> {
    store.read_all(T, request).await.expect("read_rows")
}

async fn read_filtered(store: &dyn Store, filter: RowFilter) -> Vec<Row> {
    read(store, ReadRows::new(RowSet::all()).filter(filter)).await
}

/// Row keys of rows.
fn keys(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        .collect()
}

/// `family:qualifier@ts=value` for every cell of every row.
fn cells(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .flat_map(|r| {
            r.cells.iter().map(move |c| {
                format!(
                    "{}/{}:{}@{}={}",
                    String::from_utf8_lossy(&r.key),
                    c.family,
                    String::from_utf8_lossy(&c.qualifier),
                    c.timestamp / MS,
                    String::from_utf8_lossy(&c.value)
                )
            })
        })
        .collect()
}

fn invalid<T: std::fmt::Debug>(r: crate::Result<T>) {
    assert!(
        matches!(r, Err(StoreError::InvalidArgument(_))),
        "expected an invalid-argument error, got {r:?}"
    );
}

pub async fn admin_tables(store: &dyn Store) {
    assert!(store.list_tables().await.unwrap().is_empty());
    simple_table(store).await;
    store
        .create_table(
            "other",
            BTreeMap::from([("x".into(), GcRule::MaxVersions(1))]),
        )
        .await
        .unwrap();
    let names: Vec<String> = store
        .list_tables()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, vec!["other", "t"]);
    let schema = store.get_table("other").await.unwrap();
    assert_eq!(schema.families["x"], GcRule::MaxVersions(1));
    assert!(matches!(
        store.create_table(T, BTreeMap::new()).await,
        Err(StoreError::TableExists(_))
    ));
    assert!(matches!(
        store.get_table("missing").await,
        Err(StoreError::TableNotFound(_))
    ));
    assert!(matches!(
        store.read_all("missing", ReadRows::default()).await,
        Err(StoreError::TableNotFound(_))
    ));
    assert!(matches!(
        store
            .mutate_row("missing", b("r"), vec![Mutation::DeleteFromRow])
            .await,
        Err(StoreError::TableNotFound(_))
    ));
    store.delete_table("other").await.unwrap();
    assert!(matches!(
        store.delete_table("other").await,
        Err(StoreError::TableNotFound(_))
    ));
    assert_eq!(store.list_tables().await.unwrap().len(), 1);
}

pub async fn admin_rejects_bad_names(store: &dyn Store) {
    invalid(store.create_table("", BTreeMap::new()).await);
    invalid(store.create_table("has space", BTreeMap::new()).await);
    invalid(store.create_table(&"x".repeat(51), BTreeMap::new()).await);
    invalid(
        store
            .create_table("ok", BTreeMap::from([("bad:family".into(), GcRule::None)]))
            .await,
    );
    assert!(store.list_tables().await.unwrap().is_empty());
}

pub async fn admin_families(store: &dyn Store) {
    simple_table(store).await;
    put(store, "r", "a", "q", 1000 * MS, "va").await;
    put(store, "r", "b", "q", 1000 * MS, "vb").await;
    let schema = store
        .modify_families(
            T,
            vec![
                FamilyChange::Create {
                    family: "c".into(),
                    gc_rule: GcRule::MaxVersions(2),
                },
                FamilyChange::Update {
                    family: "a".into(),
                    gc_rule: GcRule::MaxVersions(1),
                },
                FamilyChange::Drop { family: "b".into() },
            ],
        )
        .await
        .unwrap();
    assert_eq!(schema.families.keys().collect::<Vec<_>>(), vec!["a", "c"]);
    assert_eq!(store.get_table(T).await.unwrap(), schema);
    // The dropped family's cells are gone, and stay gone when it is created again.
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r/a:q@1000=va"]
    );
    store
        .modify_families(
            T,
            vec![FamilyChange::Create {
                family: "b".into(),
                gc_rule: GcRule::None,
            }],
        )
        .await
        .unwrap();
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r/a:q@1000=va"]
    );
    // A failing change list changes nothing.
    let r = store
        .modify_families(
            T,
            vec![
                FamilyChange::Drop { family: "a".into() },
                FamilyChange::Drop {
                    family: "zz".into(),
                },
            ],
        )
        .await;
    assert!(matches!(r, Err(StoreError::FamilyNotFound { .. })), "{r:?}");
    let r = store
        .modify_families(
            T,
            vec![FamilyChange::Create {
                family: "a".into(),
                gc_rule: GcRule::None,
            }],
        )
        .await;
    assert!(matches!(r, Err(StoreError::FamilyExists { .. })), "{r:?}");
    assert!(store.get_table(T).await.unwrap().families.contains_key("a"));
}

pub async fn set_and_read_cells(store: &dyn Store) {
    simple_table(store).await;
    assert!(store.read_row(T, b("r1"), None).await.unwrap().is_none());
    store
        .mutate_row(
            T,
            b("r1"),
            vec![
                Mutation::set("b", b("y"), 5 * MS, b("3")),
                Mutation::set("a", b("x"), 5 * MS, b("1")),
                Mutation::set("a", b("w"), 7 * MS, Bytes::new()),
            ],
        )
        .await
        .unwrap();
    let row = store.read_row(T, b("r1"), None).await.unwrap().unwrap();
    assert_eq!(row.key, b("r1"));
    assert_eq!(
        cells(std::slice::from_ref(&row)),
        vec!["r1/a:w@7=", "r1/a:x@5=1", "r1/b:y@5=3"]
    );
    assert_eq!(row.latest("a", b"x").unwrap().value, b("1"));
    // Binary qualifiers and values round-trip.
    let q = Bytes::from_static(b"\x00\xff\x00\x01");
    let v = Bytes::from_static(b"\x00\x00\xfe");
    store
        .mutate_row(
            T,
            b("r2"),
            vec![Mutation::set("a", q.clone(), 0, v.clone())],
        )
        .await
        .unwrap();
    let row = store.read_row(T, b("r2"), None).await.unwrap().unwrap();
    assert_eq!(
        (row.cells[0].qualifier.clone(), row.cells[0].value.clone()),
        (q, v)
    );
    assert_eq!(row.cells[0].timestamp, 0);
}

pub async fn server_timestamps(store: &dyn Store) {
    simple_table(store).await;
    let before = now_micros();
    store
        .mutate_row(
            T,
            b("r"),
            vec![
                Mutation::set_now("a", b("x"), b("1")),
                Mutation::set_now("a", b("y"), b("2")),
            ],
        )
        .await
        .unwrap();
    let after = now_micros();
    let row = store.read_row(T, b("r"), None).await.unwrap().unwrap();
    let ts: BTreeSet<i64> = row.cells.iter().map(|c| c.timestamp).collect();
    assert_eq!(ts.len(), 1, "one clock reading per row mutation: {row:?}");
    let t = *ts.iter().next().unwrap();
    assert!(t >= before && t <= after, "{before} <= {t} <= {after}");
    assert_eq!(t % 1000, 0, "server time is millisecond-granular");
}

pub async fn versions_and_order(store: &dyn Store) {
    simple_table(store).await;
    for (ts, v) in [(2, "two"), (9, "nine"), (5, "five")] {
        put(store, "r", "a", "q", ts * MS, v).await;
    }
    // Writing the same column and timestamp replaces the cell.
    put(store, "r", "a", "q", 5 * MS, "FIVE").await;
    put(store, "r", "b", "a", MS, "b").await;
    put(store, "r", "a", "q\x00", MS, "nul").await;
    put(store, "r", "a", "p", MS, "p").await;
    let rows = read(store, ReadRows::default()).await;
    assert_eq!(
        cells(&rows),
        vec![
            "r/a:p@1=p",
            "r/a:q@9=nine",
            "r/a:q@5=FIVE",
            "r/a:q@2=two",
            "r/a:q\u{0}@1=nul",
            "r/b:a@1=b"
        ]
    );
}

async fn delete_versions(store: &dyn Store, start: Option<i64>, end: Option<i64>) {
    let range = TimeRange { start, end };
    let delete = Mutation::DeleteFromColumn {
        family: "a".into(),
        qualifier: b("q"),
        range,
    };
    store.mutate_row(T, b("r"), vec![delete]).await.unwrap();
}

pub async fn delete_from_column(store: &dyn Store) {
    simple_table(store).await;
    for ts in 1..=6 {
        put(store, "r", "a", "q", ts * MS, &ts.to_string()).await;
    }
    put(store, "r", "a", "other", MS, "o").await;
    delete_versions(store, Some(2 * MS), Some(4 * MS)).await;
    let only_q = RowFilter::column("a", b("q"));
    let ts = |rows: Vec<Row>| -> Vec<i64> {
        rows.iter()
            .flat_map(|r| r.cells.iter().map(|c| c.timestamp / MS))
            .collect()
    };
    assert_eq!(
        ts(read_filtered(store, only_q.clone()).await),
        vec![6, 5, 4, 1]
    );
    // Open-ended ranges.
    delete_versions(store, Some(5 * MS), None).await;
    assert_eq!(ts(read_filtered(store, only_q.clone()).await), vec![4, 1]);
    delete_versions(store, None, Some(2 * MS)).await;
    assert_eq!(ts(read_filtered(store, only_q.clone()).await), vec![4]);
    store
        .mutate_row(T, b("r"), vec![Mutation::delete_column("a", b("q"))])
        .await
        .unwrap();
    assert!(read_filtered(store, only_q).await.is_empty());
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r/a:other@1=o"]
    );
}

pub async fn delete_from_family_and_row(store: &dyn Store) {
    simple_table(store).await;
    for row in ["r1", "r2"] {
        put(store, row, "a", "x", MS, "1").await;
        put(store, row, "b", "y", MS, "2").await;
    }
    store
        .mutate_row(
            T,
            b("r1"),
            vec![Mutation::DeleteFromFamily { family: "a".into() }],
        )
        .await
        .unwrap();
    store
        .mutate_row(T, b("r2"), vec![Mutation::DeleteFromRow])
        .await
        .unwrap();
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r1/b:y@1=2"]
    );
    // Deletes and writes in one mutation apply in order.
    store
        .mutate_row(
            T,
            b("r1"),
            vec![
                Mutation::DeleteFromRow,
                Mutation::set("a", b("n"), 2 * MS, b("new")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r1/a:n@2=new"]
    );
    // Deleting what does not exist is not an error.
    store
        .mutate_row(T, b("nothing"), vec![Mutation::DeleteFromRow])
        .await
        .unwrap();
}

pub async fn mutation_is_atomic(store: &dyn Store) {
    simple_table(store).await;
    put(store, "r", "a", "keep", MS, "k").await;
    let r = store
        .mutate_row(
            T,
            b("r"),
            vec![
                Mutation::DeleteFromRow,
                Mutation::set("a", b("x"), MS, b("1")),
                Mutation::set("nope", b("y"), MS, b("2")),
            ],
        )
        .await;
    assert!(matches!(r, Err(StoreError::FamilyNotFound { .. })), "{r:?}");
    let r = store
        .mutate_row(
            T,
            b("r"),
            vec![
                Mutation::DeleteFromRow,
                Mutation::set("a", b("x"), 1, b("not at ms granularity")),
            ],
        )
        .await;
    invalid(r);
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r/a:keep@1=k"]
    );
}

/// `mutate_atomically`: rows of two tables written together, a row named twice gets both its
/// entries in order, and one bad entry leaves every row as it was. A store without atomic
/// writes refuses them.
pub async fn atomic_writes_across_tables(store: &dyn Store) {
    use crate::TableMutation;
    simple_table(store).await;
    const U: &str = "u";
    let families = BTreeMap::from([("a".to_owned(), GcRule::None)]);
    store.create_table(U, families).await.expect("create table");
    let set = |table: &'static str, row: &str, q: &str, v: &str| {
        TableMutation::new(
            table,
            RowMutation::new(b(row), vec![Mutation::set("a", b(q), MS, b(v))]),
        )
    };
    let writes = vec![set(T, "r1", "x", "1"), set(U, "r1", "y", "2")];
    if !store.atomic_writes() {
        let r = store.mutate_atomically(writes).await;
        assert!(matches!(r, Err(StoreError::FailedPrecondition(_))), "{r:?}");
        return;
    }
    store.mutate_atomically(writes).await.expect("atomic write");
    let named_twice = vec![
        set(T, "r2", "x", "1"),
        TableMutation::new(T, RowMutation::new(b("r2"), vec![Mutation::DeleteFromRow])),
        set(T, "r2", "z", "3"),
    ];
    store
        .mutate_atomically(named_twice)
        .await
        .expect("atomic write");
    let bad = vec![
        set(T, "r1", "x", "changed"),
        set(T, "r3", "x", "new"),
        TableMutation::new(
            U,
            RowMutation::new(b("r1"), vec![Mutation::set("nope", b("y"), MS, b("2"))]),
        ),
    ];
    let r = store.mutate_atomically(bad.clone()).await;
    assert!(matches!(r, Err(StoreError::FamilyNotFound { .. })), "{r:?}");
    let r = store.mutate_atomically_deferred(bad).await;
    assert!(matches!(r, Err(StoreError::FamilyNotFound { .. })), "{r:?}");
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r1/a:x@1=1", "r2/a:z@1=3"]
    );
    let other = store.read_all(U, ReadRows::default()).await.expect("read");
    assert_eq!(cells(&other), vec!["r1/a:y@1=2"]);
    // A deferred write is read at once, before the sync that makes it durable; syncs at once
    // (with nothing deferred, or several together) all return.
    store
        .mutate_atomically_deferred(vec![set(T, "r4", "x", "4"), set(U, "r4", "y", "5")])
        .await
        .expect("deferred atomic write");
    let row = store.read_row(U, b("r4"), None).await.expect("read");
    assert_eq!(
        cells(&row.into_iter().collect::<Vec<_>>()),
        vec!["r4/a:y@1=5"]
    );
    let (a, b2, c) = futures::join!(store.sync(), store.sync(), store.sync());
    a.and(b2).and(c).expect("sync");
    store.sync().await.expect("sync with nothing deferred");
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r1/a:x@1=1", "r2/a:z@1=3", "r4/a:x@1=4"]
    );
}

pub async fn bad_input_is_rejected(store: &dyn Store) {
    simple_table(store).await;
    let set = |q: Bytes, v: Bytes| vec![Mutation::set("a", q, MS, v)];
    invalid(store.mutate_row(T, Bytes::new(), set(b("q"), b("v"))).await);
    let long_key = Bytes::from(vec![b'k'; validate::MAX_ROW_KEY_BYTES + 1]);
    invalid(store.mutate_row(T, long_key, set(b("q"), b("v"))).await);
    let ok_key = Bytes::from(vec![b'k'; validate::MAX_ROW_KEY_BYTES]);
    store
        .mutate_row(T, ok_key, set(b("q"), b("v")))
        .await
        .unwrap();
    let long_q = Bytes::from(vec![b'q'; validate::MAX_QUALIFIER_BYTES + 1]);
    invalid(store.mutate_row(T, b("r"), set(long_q, b("v"))).await);
    let big = Bytes::from(vec![0u8; validate::MAX_VALUE_BYTES + 1]);
    invalid(store.mutate_row(T, b("r"), set(b("q"), big)).await);
    invalid(store.mutate_row(T, b("r"), vec![]).await);
    invalid(
        store
            .mutate_row(T, b("r"), vec![Mutation::set("a", b("q"), -1000, b("v"))])
            .await,
    );
    invalid(
        store
            .mutate_row(
                T,
                b("r"),
                vec![Mutation::DeleteFromColumn {
                    family: "a".into(),
                    qualifier: b("q"),
                    range: TimeRange::new(5 * MS, 2 * MS),
                }],
            )
            .await,
    );
    invalid(
        store
            .read_all(
                T,
                ReadRows::default().filter(RowFilter::QualifierRegex("(".into())),
            )
            .await,
    );
    let rows = read(store, ReadRows::default()).await;
    assert_eq!(rows.len(), 1, "only the valid row was written");
}

pub async fn mutate_rows_statuses(store: &dyn Store) {
    simple_table(store).await;
    let statuses = store
        .mutate_rows(
            T,
            vec![
                RowMutation::new(b("r1"), vec![Mutation::set("a", b("q"), MS, b("1"))]),
                RowMutation::new(
                    b("r2"),
                    vec![
                        Mutation::set("a", b("q"), MS, b("2")),
                        Mutation::set("zz", b("q"), MS, b("2")),
                    ],
                ),
                RowMutation::new(Bytes::new(), vec![Mutation::set("a", b("q"), MS, b("3"))]),
                RowMutation::new(b("r4"), vec![Mutation::set("b", b("q"), MS, b("4"))]),
            ],
        )
        .await
        .unwrap();
    assert_eq!(statuses.len(), 4);
    assert!(statuses[0].is_ok());
    assert!(matches!(
        statuses[1],
        Err(StoreError::FamilyNotFound { .. })
    ));
    assert!(matches!(statuses[2], Err(StoreError::InvalidArgument(_))));
    assert!(statuses[3].is_ok());
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r1/a:q@1=1", "r4/b:q@1=4"]
    );
    invalid(store.mutate_rows(T, vec![]).await);
}

pub async fn row_sets_and_order(store: &dyn Store) {
    simple_table(store).await;
    let names = ["a", "b", "b1", "b2", "c", "d", "e"];
    // Written out of order; read back in key order.
    for name in names.iter().rev() {
        put(store, name, "a", "q", MS, name).await;
    }
    let k = |set: RowSet| ReadRows::new(set);
    assert_eq!(keys(&read(store, k(RowSet::all())).await), names);
    assert_eq!(
        keys(&read(store, k(RowSet::keys([b("e"), b("a"), b("zz"), b("a")]))).await),
        vec!["a", "e"]
    );
    assert_eq!(
        keys(
            &read(
                store,
                k(RowSet::range(RowRange::closed_open(b("b"), b("c"))))
            )
            .await
        ),
        vec!["b", "b1", "b2"]
    );
    assert_eq!(
        keys(&read(store, k(RowSet::range(RowRange::closed(b("b1"), b("c"))))).await),
        vec!["b1", "b2", "c"]
    );
    let open = RowRange {
        start: Bound::Excluded(b("b")),
        end: Bound::Unbounded,
    };
    assert_eq!(
        keys(&read(store, k(RowSet::range(open))).await),
        vec!["b1", "b2", "c", "d", "e"]
    );
    assert_eq!(
        keys(&read(store, k(RowSet::prefix(b("b")))).await),
        vec!["b", "b1", "b2"]
    );
    // A union of overlapping ranges and keys yields each row once, in order.
    let set = RowSet {
        keys: vec![b("d"), b("b1")],
        ranges: vec![
            RowRange::closed(b("b"), b("b2")),
            RowRange::prefix(b("b")),
            RowRange::closed_open(b("e"), b("f")),
        ],
    };
    assert_eq!(
        keys(&read(store, k(set)).await),
        vec!["b", "b1", "b2", "d", "e"]
    );
    // An empty range.
    assert!(
        read(
            store,
            k(RowSet::range(RowRange::closed_open(b("c"), b("c"))))
        )
        .await
        .is_empty()
    );
}

pub async fn prefix_scans_with_special_bytes(store: &dyn Store) {
    simple_table(store).await;
    let rows: Vec<Bytes> = [
        &b"u"[..],
        b"u\x00",
        b"u\x00\x00",
        b"u\x00\x01",
        b"u\x00\xff",
        b"u\x01",
        b"u\xff",
        b"u\xff\xff",
        b"v",
        b"t\xff",
    ]
    .iter()
    .map(|k| Bytes::copy_from_slice(k))
    .collect();
    for r in &rows {
        store
            .mutate_row(
                T,
                r.clone(),
                vec![Mutation::set("a", b("q"), MS, r.clone())],
            )
            .await
            .unwrap();
    }
    let mut sorted = rows.clone();
    sorted.sort();
    let got: Vec<Bytes> = read(store, ReadRows::default())
        .await
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(got, sorted, "rows come back in byte order");
    for prefix in [&b"u"[..], b"u\x00", b"u\xff", b"u\x00\x00", b"t", b"\xff"] {
        let expected: Vec<Bytes> = sorted
            .iter()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        let got: Vec<Bytes> = read(
            store,
            ReadRows::new(RowSet::prefix(Bytes::copy_from_slice(prefix))),
        )
        .await
        .into_iter()
        .map(|r| r.key)
        .collect();
        assert_eq!(got, expected, "prefix {prefix:?}");
    }
}

pub async fn read_limits(store: &dyn Store) {
    simple_table(store).await;
    for r in ["r1", "r2", "r3", "r4"] {
        put(store, r, "a", "q", MS, r).await;
    }
    put(store, "r2", "b", "only-b", MS, "x").await;
    assert_eq!(
        keys(&read(store, ReadRows::default().limit(2)).await),
        vec!["r1", "r2"]
    );
    // Rows the filter empties do not count against the limit.
    let only_b = ReadRows::default()
        .filter(RowFilter::Family("b".into()))
        .limit(5);
    assert_eq!(keys(&read(store, only_b).await), vec!["r2"]);
    let limit_after_filter = ReadRows::default()
        .filter(RowFilter::RowKeyRegex("r[34]".into()))
        .limit(1);
    assert_eq!(keys(&read(store, limit_after_filter).await), vec!["r3"]);
    assert!(read(store, ReadRows::default().limit(0)).await.is_empty());
}

pub async fn filters_family_and_qualifier(store: &dyn Store) {
    table(
        store,
        &[
            ("events", GcRule::None),
            ("e2", GcRule::None),
            ("x", GcRule::None),
        ],
    )
    .await;
    for (f, q) in [
        ("events", "view,home,brand"),
        ("events", "view,home,color"),
        ("events", "click,buy,brand"),
        ("e2", "view,home,brand"),
        ("x", "zzz"),
    ] {
        put(store, "r", f, q, MS, "v").await;
    }
    let got = |rows: Vec<Row>| -> Vec<String> {
        rows.iter()
            .flat_map(|r| {
                r.cells
                    .iter()
                    .map(|c| format!("{}:{}", c.family, String::from_utf8_lossy(&c.qualifier)))
            })
            .collect()
    };
    assert_eq!(
        got(read_filtered(store, RowFilter::Family("e2".into())).await),
        vec!["e2:view,home,brand"]
    );
    assert_eq!(
        got(read_filtered(store, RowFilter::FamilyRegex("e.*".into())).await).len(),
        4
    );
    assert_eq!(
        got(read_filtered(store, RowFilter::qualifiers(["view,home,brand", "zzz"])).await),
        vec!["e2:view,home,brand", "events:view,home,brand", "x:zzz"]
    );
    assert_eq!(
        got(read_filtered(store, RowFilter::QualifierPrefix(b("view,"))).await),
        vec![
            "e2:view,home,brand",
            "events:view,home,brand",
            "events:view,home,color"
        ]
    );
    assert_eq!(
        got(read_filtered(store, RowFilter::QualifierRegex(".*,brand".into())).await),
        vec![
            "e2:view,home,brand",
            "events:click,buy,brand",
            "events:view,home,brand"
        ]
    );
    let range = RowFilter::ColumnRange {
        family: "events".into(),
        start: Bound::Excluded(b("click,buy,brand")),
        end: Bound::Included(b("view,home,brand")),
    };
    assert_eq!(
        got(read_filtered(store, range).await),
        vec!["events:view,home,brand"]
    );
    assert!(
        read_filtered(store, RowFilter::Family("nope".into()))
            .await
            .is_empty()
    );
}

pub async fn filters_time_value_and_limits(store: &dyn Store) {
    simple_table(store).await;
    for ts in 1..=4 {
        put(store, "r", "a", "x", ts * MS, &format!("x{ts}")).await;
        put(store, "r", "a", "y", ts * MS, &format!("y{ts}")).await;
    }
    put(store, "r", "b", "z", 9 * MS, "z9").await;
    let f = |filter| read_filtered(store, filter);
    assert_eq!(
        cells(&f(RowFilter::TimestampRange(TimeRange::new(2 * MS, 4 * MS))).await),
        vec!["r/a:x@3=x3", "r/a:x@2=x2", "r/a:y@3=y3", "r/a:y@2=y2"]
    );
    assert_eq!(
        cells(&f(RowFilter::CellsPerColumnLimit(1)).await),
        vec!["r/a:x@4=x4", "r/a:y@4=y4", "r/b:z@9=z9"]
    );
    assert_eq!(
        cells(&f(RowFilter::CellsPerRowLimit(2)).await),
        vec!["r/a:x@4=x4", "r/a:x@3=x3"]
    );
    assert_eq!(
        cells(&f(RowFilter::CellsPerRowOffset(7)).await),
        vec!["r/a:y@1=y1", "r/b:z@9=z9"]
    );
    assert_eq!(
        cells(&f(RowFilter::ValueRegex("y[12]".into())).await),
        vec!["r/a:y@2=y2", "r/a:y@1=y1"]
    );
    let stripped = f(RowFilter::StripValue).await;
    assert_eq!(stripped[0].cells.len(), 9);
    assert!(stripped[0].cells.iter().all(|c| c.value.is_empty()));
    assert!(f(RowFilter::BlockAll).await.is_empty());
    assert_eq!(f(RowFilter::PassAll).await[0].cells.len(), 9);
}

pub async fn filters_chain_interleave_condition(store: &dyn Store) {
    simple_table(store).await;
    for ts in 1..=3 {
        put(store, "r1", "a", "x", ts * MS, &format!("{ts}")).await;
    }
    put(store, "r1", "b", "x", MS, "bx").await;
    put(store, "r2", "b", "y", MS, "by").await;
    let chain = RowFilter::Family("a".into())
        .and(RowFilter::CellsPerColumnLimit(2))
        .and(RowFilter::StripValue);
    assert_eq!(
        cells(&read_filtered(store, chain).await),
        vec!["r1/a:x@3=", "r1/a:x@2="]
    );
    assert_eq!(
        read_filtered(store, RowFilter::Chain(vec![])).await.len(),
        2,
        "an empty chain passes everything"
    );
    let inter = RowFilter::Interleave(vec![
        RowFilter::Family("b".into()),
        RowFilter::CellsPerColumnLimit(1),
    ]);
    assert_eq!(
        cells(&read_filtered(store, inter).await),
        vec![
            "r1/a:x@3=3",
            "r1/b:x@1=bx",
            "r1/b:x@1=bx",
            "r2/b:y@1=by",
            "r2/b:y@1=by"
        ]
    );
    let cond = RowFilter::Condition {
        predicate: Box::new(RowFilter::Family("a".into())),
        on_match: Box::new(RowFilter::Family("b".into())),
        on_no_match: Box::new(RowFilter::StripValue),
    };
    assert_eq!(
        cells(&read_filtered(store, cond).await),
        vec!["r1/b:x@1=bx", "r2/b:y@1="]
    );
    let by_key = RowFilter::RowKeyRegex("r2".into());
    assert_eq!(keys(&read_filtered(store, by_key).await), vec!["r2"]);
}

pub async fn check_and_mutate(store: &dyn Store) {
    simple_table(store).await;
    let set = |v: &str| vec![Mutation::set("a", b("q"), MS, b(v))];
    // No predicate: "does the row exist".
    let matched = store
        .check_and_mutate_row(T, b("r"), None, set("exists"), set("created"))
        .await
        .unwrap();
    assert!(!matched);
    let matched = store
        .check_and_mutate_row(T, b("r"), None, set("exists"), set("created"))
        .await
        .unwrap();
    assert!(matched);
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r/a:q@1=exists"]
    );
    // With a predicate on the value.
    let is_exists = RowFilter::ValueRegex("exists".into());
    let matched = store
        .check_and_mutate_row(T, b("r"), Some(is_exists.clone()), vec![], set("other"))
        .await
        .unwrap();
    assert!(matched);
    assert_eq!(
        cells(&read(store, ReadRows::default()).await),
        vec!["r/a:q@1=exists"]
    );
    let matched = store
        .check_and_mutate_row(
            T,
            b("r"),
            Some(RowFilter::Family("b".into())),
            set("had b"),
            vec![Mutation::DeleteFromRow],
        )
        .await
        .unwrap();
    assert!(!matched);
    assert!(read(store, ReadRows::default()).await.is_empty());
    // Bad mutations in either branch are rejected before anything happens.
    let r = store
        .check_and_mutate_row(
            T,
            b("r"),
            None,
            set("x"),
            vec![Mutation::set("nope", b("q"), MS, b("v"))],
        )
        .await;
    assert!(matches!(r, Err(StoreError::FamilyNotFound { .. })), "{r:?}");
    invalid(
        store
            .check_and_mutate_row(T, b("r"), None, vec![], vec![])
            .await,
    );
    assert!(read(store, ReadRows::default()).await.is_empty());
}

pub async fn read_modify_write(store: &dyn Store) {
    simple_table(store).await;
    let row = store
        .read_modify_write_row(
            T,
            b("r"),
            vec![
                ReadModifyWriteRule::increment("a", b("n"), 5),
                ReadModifyWriteRule::increment("a", b("n"), -2),
                ReadModifyWriteRule::append("b", b("s"), b("he")),
                ReadModifyWriteRule::append("b", b("s"), b("llo")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(row.cells.len(), 2);
    assert_eq!(row.latest("a", b"n").unwrap().value[..], 3i64.to_be_bytes());
    assert_eq!(row.latest("b", b"s").unwrap().value, b("hello"));
    let row = store
        .read_modify_write_row(
            T,
            b("r"),
            vec![ReadModifyWriteRule::increment("a", b("n"), 10)],
        )
        .await
        .unwrap();
    assert_eq!(row.cells[0].value[..], 13i64.to_be_bytes());
    let stored = store.read_row(T, b("r"), None).await.unwrap().unwrap();
    assert_eq!(
        stored.latest("a", b"n").unwrap().value[..],
        13i64.to_be_bytes()
    );
    // The new cell is no older than the cell it replaces.
    put(store, "r", "a", "future", 4_000_000_000_000_000, "x").await;
    store
        .mutate_row(
            T,
            b("r"),
            vec![Mutation::set(
                "a",
                b("f"),
                4_000_000_000_000_000,
                Bytes::from_static(&[0; 8]),
            )],
        )
        .await
        .unwrap();
    let row = store
        .read_modify_write_row(
            T,
            b("r"),
            vec![ReadModifyWriteRule::increment("a", b("f"), 1)],
        )
        .await
        .unwrap();
    assert_eq!(row.cells[0].timestamp, 4_000_000_000_000_000);
    // Incrementing something that is not a 64-bit integer fails and changes nothing.
    let r = store
        .read_modify_write_row(
            T,
            b("r"),
            vec![
                ReadModifyWriteRule::increment("a", b("n"), 1),
                ReadModifyWriteRule::increment("b", b("s"), 1),
            ],
        )
        .await;
    assert!(matches!(r, Err(StoreError::FailedPrecondition(_))), "{r:?}");
    let stored = store.read_row(T, b("r"), None).await.unwrap().unwrap();
    assert_eq!(
        stored.latest("a", b"n").unwrap().value[..],
        13i64.to_be_bytes()
    );
    let r = store
        .read_modify_write_row(
            T,
            b("r"),
            vec![ReadModifyWriteRule::increment("zz", b("n"), 1)],
        )
        .await;
    assert!(matches!(r, Err(StoreError::FamilyNotFound { .. })), "{r:?}");
    invalid(store.read_modify_write_row(T, b("r"), vec![]).await);
}

pub async fn increments_under_concurrency(store: &dyn Store) {
    table(store, &[("c", GcRule::MaxVersions(1))]).await;
    let tasks = 8;
    let per_task = 50;
    // The store is shared through a reference; run the increments as concurrent futures.
    let work = (0..tasks).map(|_| async {
        for _ in 0..per_task {
            store
                .read_modify_write_row(
                    T,
                    b("counter"),
                    vec![ReadModifyWriteRule::increment("c", b("n"), 1)],
                )
                .await
                .unwrap();
        }
    });
    // And a writer to another column of the same row, which must not lose increments.
    let other = async {
        for i in 0..per_task {
            store
                .mutate_row(
                    T,
                    b("counter"),
                    vec![Mutation::set_now("c", b("other"), b(&i.to_string()))],
                )
                .await
                .unwrap();
        }
    };
    futures::future::join(futures::future::join_all(work), other).await;
    let row = store
        .read_row(T, b("counter"), None)
        .await
        .unwrap()
        .unwrap();
    let n = i64::from_be_bytes(row.latest("c", b"n").unwrap().value[..].try_into().unwrap());
    assert_eq!(n, (tasks * per_task) as i64);
}

pub async fn gc_max_age(store: &dyn Store) {
    table(
        store,
        &[
            ("short", GcRule::MaxAge(Duration::from_secs(3600))),
            ("long", GcRule::None),
        ],
    )
    .await;
    let now = now_micros();
    let two_hours_ago = now - 2 * 3_600_000_000;
    let recent = now - 60_000_000;
    store
        .mutate_row(
            T,
            b("r"),
            vec![
                Mutation::set("short", b("old"), two_hours_ago, b("expired")),
                Mutation::set("short", b("new"), recent, b("fresh")),
                Mutation::set("long", b("old"), two_hours_ago, b("kept")),
            ],
        )
        .await
        .unwrap();
    store
        .mutate_row(
            T,
            b("gone"),
            vec![Mutation::set("short", b("q"), two_hours_ago, b("x"))],
        )
        .await
        .unwrap();
    let rows = read(store, ReadRows::default()).await;
    assert_eq!(
        keys(&rows),
        vec!["r"],
        "a row with only expired cells is not returned"
    );
    let values: Vec<&[u8]> = rows[0].cells.iter().map(|c| &c.value[..]).collect();
    assert_eq!(values, vec![&b"kept"[..], b"fresh"]);
    assert!(store.read_row(T, b("gone"), None).await.unwrap().is_none());
    // Tightening the rule applies to reads at once; loosening it brings nothing back that was
    // reclaimed, but cells still stored may reappear, so only tightening is checked.
    store
        .modify_families(
            T,
            vec![FamilyChange::Update {
                family: "long".into(),
                gc_rule: GcRule::MaxAge(Duration::from_secs(60)),
            }],
        )
        .await
        .unwrap();
    let rows = read(store, ReadRows::default()).await;
    let values: Vec<&[u8]> = rows[0].cells.iter().map(|c| &c.value[..]).collect();
    assert_eq!(values, vec![&b"fresh"[..]]);
}

pub async fn gc_max_versions_and_combinations(store: &dyn Store) {
    let hour = Duration::from_secs(3600);
    table(
        store,
        &[
            ("one", GcRule::MaxVersions(1)),
            (
                "union",
                GcRule::Union(vec![GcRule::MaxVersions(2), GcRule::MaxAge(hour)]),
            ),
            (
                "inter",
                GcRule::Intersection(vec![GcRule::MaxVersions(1), GcRule::MaxAge(hour)]),
            ),
        ],
    )
    .await;
    let now = now_micros();
    let old = |i: i64| now - 2 * 3_600_000_000 - i * MS;
    let new = |i: i64| now - 60_000_000 - i * MS;
    let mut ms = Vec::new();
    for f in ["one", "union", "inter"] {
        for (ts, v) in [
            (new(0), "n0"),
            (new(1), "n1"),
            (new(2), "n2"),
            (old(0), "o0"),
            (old(1), "o1"),
        ] {
            ms.push(Mutation::set(f, b("q"), ts, b(v)));
        }
    }
    store.mutate_row(T, b("r"), ms).await.unwrap();
    let row = store.read_row(T, b("r"), None).await.unwrap().unwrap();
    let of = |f: &str| -> Vec<String> {
        row.family(f)
            .map(|c| String::from_utf8_lossy(&c.value).into_owned())
            .collect()
    };
    assert_eq!(of("one"), vec!["n0"]);
    // Union: expired if beyond 2 versions OR older than an hour.
    assert_eq!(of("union"), vec!["n0", "n1"]);
    // Intersection: expired only if beyond 1 version AND older than an hour.
    assert_eq!(of("inter"), vec!["n0", "n1", "n2"]);
}

pub async fn drop_row_range_and_tables(store: &dyn Store) {
    simple_table(store).await;
    for r in ["app1|u1", "app1|u2", "app10|u1", "app2|u1"] {
        put(store, r, "a", "q", MS, r).await;
    }
    store.drop_row_range(T, b"app1|").await.unwrap();
    assert_eq!(
        keys(&read(store, ReadRows::default()).await),
        vec!["app10|u1", "app2|u1"]
    );
    store.drop_row_range(T, b"").await.unwrap();
    assert!(read(store, ReadRows::default()).await.is_empty());
    // A table deleted and created again starts empty.
    put(store, "x", "a", "q", MS, "x").await;
    store.delete_table(T).await.unwrap();
    simple_table(store).await;
    assert!(read(store, ReadRows::default()).await.is_empty());
    assert!(matches!(
        store.drop_row_range("missing", b"x").await,
        Err(StoreError::TableNotFound(_))
    ));
}

pub async fn sample_row_keys_cover_table(store: &dyn Store) {
    simple_table(store).await;
    let n = 2000;
    let entries: Vec<RowMutation> = (0..n)
        .map(|i| {
            RowMutation::new(
                Bytes::from(format!("row{i:05}")),
                vec![Mutation::set("a", b("q"), MS, Bytes::from(vec![b'v'; 512]))],
            )
        })
        .collect();
    for chunk in entries.chunks(500) {
        let statuses = store.mutate_rows(T, chunk.to_vec()).await.unwrap();
        assert!(statuses.iter().all(Result::is_ok));
    }
    let samples = store.sample_row_keys(T).await.unwrap();
    let last = samples.last().expect("at least the end-of-table sample");
    assert!(
        last.row_key.is_empty(),
        "the last sample is the end of the table"
    );
    for w in samples.windows(2) {
        assert!(w[1].offset_bytes >= w[0].offset_bytes, "offsets grow");
        if !w[1].row_key.is_empty() {
            assert!(w[0].row_key < w[1].row_key, "keys are strictly increasing");
        }
    }
    // The ranges built from the samples cover every row exactly once.
    let mut seen = Vec::new();
    for range in split_ranges(&samples, 4) {
        seen.extend(keys(
            &read(store, ReadRows::new(RowSet::range(range))).await,
        ));
    }
    assert_eq!(seen.len(), n);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen);
}

pub async fn streams_many_rows_in_order(store: &dyn Store) {
    use futures::StreamExt;
    simple_table(store).await;
    let n = 5000u32;
    let mut entries = Vec::new();
    // Keys in a scrambled order, written in a few batches.
    for i in 0..n {
        let k = (i * 7919) % n;
        entries.push(RowMutation::new(
            Bytes::copy_from_slice(&k.to_be_bytes()),
            vec![Mutation::set(
                "a",
                b("q"),
                MS,
                Bytes::copy_from_slice(&k.to_le_bytes()),
            )],
        ));
    }
    for chunk in entries.chunks(1000) {
        store.mutate_rows(T, chunk.to_vec()).await.unwrap();
    }
    let mut stream = store.read_rows(T, ReadRows::default()).await.unwrap();
    let mut expected = 0u32;
    while let Some(row) = stream.next().await {
        let row = row.unwrap();
        assert_eq!(row.key[..], expected.to_be_bytes());
        assert_eq!(row.cells[0].value[..], expected.to_le_bytes());
        expected += 1;
    }
    assert_eq!(expected, n);
    // Dropping a stream early is fine, and the store keeps working.
    let mut stream = store.read_rows(T, ReadRows::default()).await.unwrap();
    assert!(stream.next().await.is_some());
    drop(stream);
    assert!(
        store
            .read_row(T, Bytes::copy_from_slice(&7u32.to_be_bytes()), None)
            .await
            .unwrap()
            .is_some()
    );
}
