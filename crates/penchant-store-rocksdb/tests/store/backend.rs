//! Behaviour specific to the RocksDB backend: persistence across reopen, space reclaimed by
//! garbage collection, split points from SST files.

use std::time::Duration;

use bytes::Bytes;
use penchant_store::validate::now_micros;
use penchant_store::{
    FamilyChange, GcRule, Mutation, ReadRows, Row, RowMutation, RowSet, Store, split_ranges,
};
use penchant_store_rocksdb::{RocksOptions, RocksStore};

fn open(dir: &std::path::Path) -> RocksStore {
    RocksStore::open(
        dir,
        RocksOptions {
            sync_writes: false,
            ..RocksOptions::default()
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_data_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store
            .create_table("gone", [("f".into(), GcRule::None)].into())
            .await
            .unwrap();
        store
            .mutate_row(
                "gone",
                Bytes::from("r"),
                vec![Mutation::set("f", "q", 1000, "old")],
            )
            .await
            .unwrap();
        store.delete_table("gone").await.unwrap();
        store
            .create_table("t", [("f".into(), GcRule::MaxVersions(3))].into())
            .await
            .unwrap();
        store
            .mutate_row(
                "t",
                Bytes::from("r"),
                vec![Mutation::set("f", "q", 1000, "v")],
            )
            .await
            .unwrap();
        store.flush().await.unwrap();
    }
    // Reopened, the block cache is cold: the point read below finds no block in memory and
    // reads again from the files.
    let store = open(dir.path());
    let schema = store.get_table("t").await.unwrap();
    assert_eq!(schema.families["f"], GcRule::MaxVersions(3));
    let row = store
        .read_row("t", Bytes::from("r"), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.cells[0].value, Bytes::from("v"));
    // A table created after reopening gets a fresh id: the deleted table's data stays gone.
    store
        .create_table("gone", [("f".into(), GcRule::None)].into())
        .await
        .unwrap();
    assert!(
        store
            .read_all("gone", ReadRows::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.list_tables().await.unwrap().len(), 2);
}

/// Reads first tried from memory and read again from the files when a block is not there: a
/// few keys, a range within one chunk, one of more rows than a chunk, and one with a limit,
/// each right after a reopen (a cold block cache) and again once the blocks are cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_every_shape_give_the_same_rows_from_files_and_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let key = |i: usize| format!("r{i:03}");
    {
        let store = open(dir.path());
        store
            .create_table("t", [("f".into(), GcRule::None)].into())
            .await
            .unwrap();
        let entries: Vec<RowMutation> = (0..300)
            .map(|i| {
                RowMutation::new(
                    Bytes::from(key(i)),
                    vec![Mutation::set("f", "q", 1000, format!("v{i}"))],
                )
            })
            .collect();
        store.mutate_rows("t", entries).await.unwrap();
        store.flush().await.unwrap();
    }
    let keys_of = |rows: &[Row]| -> Vec<String> {
        rows.iter()
            .map(|r| {
                let k = String::from_utf8(r.key.to_vec()).unwrap();
                let i: usize = k[1..].parse().unwrap();
                assert_eq!(r.cells[0].value, Bytes::from(format!("v{i}")));
                k
            })
            .collect()
    };
    let reads = [
        (
            ReadRows::new(RowSet::keys([key(250), key(7), key(299)])),
            vec![7, 250, 299],
        ),
        (
            ReadRows::new(RowSet::range(penchant_store::RowRange::closed_open(
                key(100),
                key(150),
            ))),
            (100..150).collect(),
        ),
        (ReadRows::new(RowSet::all()), (0..300).collect()),
        (
            ReadRows {
                limit: Some(200),
                ..ReadRows::new(RowSet::all())
            },
            (0..200).collect::<Vec<usize>>(),
        ),
    ];
    for (n, (read, expected)) in reads.iter().enumerate() {
        let expected: Vec<String> = expected.iter().map(|&i| key(i)).collect();
        // Cold: a fresh store over the same files.
        let store = open(dir.path());
        let cold = store.read_all("t", read.clone()).await.unwrap();
        assert_eq!(keys_of(&cold), expected, "read {n} from the files");
        let warm = store.read_all("t", read.clone()).await.unwrap();
        assert_eq!(keys_of(&warm), expected, "read {n} from memory");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_reclaims_expired_and_dropped_cells() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_table(
            "t",
            [
                ("age".into(), GcRule::MaxAge(Duration::from_secs(3600))),
                ("drop".into(), GcRule::None),
            ]
            .into(),
        )
        .await
        .unwrap();
    let now = now_micros();
    let old = now - 2 * 3_600_000_000;
    let entries: Vec<RowMutation> = (0..100)
        .map(|i| {
            RowMutation::new(
                Bytes::from(format!("r{i:03}")),
                vec![
                    Mutation::set("age", "old", old, "x"),
                    Mutation::set("age", "new", now, "y"),
                    Mutation::set("drop", "q", now, "z"),
                ],
            )
        })
        .collect();
    store.mutate_rows("t", entries).await.unwrap();
    assert_eq!(store.physical_cell_count("t").unwrap(), 300);
    store
        .modify_families(
            "t",
            vec![FamilyChange::Drop {
                family: "drop".into(),
            }],
        )
        .await
        .unwrap();
    // Hidden at once...
    let rows = store.read_all("t", ReadRows::default()).await.unwrap();
    assert!(
        rows.iter()
            .all(|r| r.cells.len() == 1 && r.cells[0].qualifier == "new")
    );
    // ...and gone from disk after a compaction.
    store.compact().unwrap();
    assert_eq!(store.physical_cell_count("t").unwrap(), 100);
}

fn values(rows: &[Row]) -> Vec<(String, i64)> {
    rows.iter()
        .flat_map(|r| &r.cells)
        .map(|c| (String::from_utf8_lossy(&c.value).into_owned(), c.timestamp))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_limits_hide_old_versions_at_once_and_compactions_drop_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_table("t", [("p".into(), GcRule::MaxVersions(1))].into())
        .await
        .unwrap();
    let read = |row: &'static str| {
        let store = store.clone();
        async move {
            let rows = store
                .read_all("t", ReadRows::new(RowSet::keys([Bytes::from(row)])))
                .await
                .unwrap();
            values(&rows)
        }
    };
    for ts in 1..=50 {
        store
            .mutate_row(
                "t",
                Bytes::from("u"),
                vec![Mutation::set("p", "profile", ts * 1000, ts.to_string())],
            )
            .await
            .unwrap();
        if ts == 25 {
            store.flush().await.unwrap();
        }
    }
    // Written blind (no look-up of the stored versions): hidden at once, dropped by compactions.
    assert_eq!(read("u").await, [("50".to_owned(), 50_000)]);
    assert_eq!(store.physical_cell_count("t").unwrap(), 50);
    // An older version written after a newer one stays hidden, as in Bigtable.
    store
        .mutate_row(
            "t",
            "u".into(),
            vec![Mutation::set("p", "profile", 7000, "old")],
        )
        .await
        .unwrap();
    assert_eq!(read("u").await, [("50".to_owned(), 50_000)]);
    // Deleting the newest version brings back none of those it hid.
    let newest = penchant_store::TimeRange::new(50_000, 51_000);
    store
        .mutate_row(
            "t",
            "u".into(),
            vec![Mutation::DeleteFromColumn {
                family: "p".into(),
                qualifier: "profile".into(),
                range: newest,
            }],
        )
        .await
        .unwrap();
    assert_eq!(read("u").await, []);
    // A batch naming a row twice: the newest entry answers.
    let entry = |ts: i64| RowMutation::new("v", vec![Mutation::set("p", "profile", ts, "v")]);
    let statuses = store
        .mutate_rows("t", vec![entry(5000), entry(7000), entry(6000)])
        .await
        .unwrap();
    assert!(statuses.iter().all(Result::is_ok));
    assert_eq!(read("v").await, [("v".to_owned(), 7000)]);
    store.compact().unwrap();
    assert_eq!(read("u").await, []);
    assert_eq!(read("v").await, [("v".to_owned(), 7000)]);
    assert_eq!(store.physical_cell_count("t").unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_written_under_a_deleted_newer_one_survives_compactions() {
    // A compaction ranks a column's versions among those it sees; a newer version deleted
    // before an older one was written is dead, and must not rank the older one out — whether
    // a drop of rows, a row's many cells (range tombstones) or a column's versions (point
    // deletes) deleted it, and across a reopen.
    let dir = tempfile::tempdir().unwrap();
    let set = |ts: i64, value: &str| Mutation::set("p", "q", ts, value.to_owned());
    {
        let store = open(dir.path());
        store
            .create_table("t", [("p".into(), GcRule::MaxVersions(1))].into())
            .await
            .unwrap();
        let mut wide = vec![set(50_000, "newer")];
        wide.extend((0..1100).map(|i| Mutation::set("p", format!("c{i}"), 50_000, "x")));
        for row in ["dropped", "wide", "column"] {
            store
                .mutate_row("t", Bytes::from(row), wide.clone())
                .await
                .unwrap();
        }
        store.compact().unwrap();
        store.drop_row_range("t", b"dropped").await.unwrap();
        store
            .mutate_row("t", "wide".into(), vec![Mutation::DeleteFromRow])
            .await
            .unwrap();
        store
            .mutate_row(
                "t",
                "column".into(),
                vec![Mutation::DeleteFromColumn {
                    family: "p".into(),
                    qualifier: "q".into(),
                    range: penchant_store::TimeRange::new(50_000, 51_000),
                }],
            )
            .await
            .unwrap();
        for row in ["dropped", "wide", "column"] {
            store
                .mutate_row("t", Bytes::from(row), vec![set(7000, "older")])
                .await
                .unwrap();
        }
        store.compact().unwrap();
    }
    let store = open(dir.path());
    // Whatever the first run left recorded, the compactor takes at once.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while recorded_range_tombstones(&store) > 0.0 {
        assert!(std::time::Instant::now() < deadline, "records left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.compact().unwrap();
    let read = |row: &'static str| {
        let store = store.clone();
        async move {
            let request = ReadRows::new(RowSet::keys([Bytes::from(row)]))
                .filter(penchant_store::RowFilter::qualifiers(["q"]));
            values(&store.read_all("t", request).await.unwrap())
        }
    };
    for row in ["dropped", "wide", "column"] {
        assert_eq!(read(row).await, [("older".to_owned(), 7000)], "row {row}");
    }
    // Once the tombstones are compacted away, versions past the limit go again.
    store
        .mutate_row("t", "dropped".into(), vec![set(8000, "newest")])
        .await
        .unwrap();
    store.compact().unwrap();
    assert_eq!(read("dropped").await, [("newest".to_owned(), 8000)]);
    assert_eq!(store.physical_cell_count("t").unwrap(), 3 + 1100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_limits_hold_for_many_columns_written_in_any_order() {
    // A write finds a column's versions by stepping from the column before it where it can:
    // columns in shuffled orders, in families with different limits, rows beside each other in
    // one batch, and stored versions interleaved with versions not yet flushed.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let families = [
        ("a".into(), GcRule::MaxVersions(1)),
        ("b".into(), GcRule::MaxVersions(2)),
    ];
    store.create_table("t", families.into()).await.unwrap();
    let columns: Vec<(&str, String)> = (0..12)
        .flat_map(|i| [("a", format!("q{i:02}")), ("b", format!("q{i:02}"))])
        .collect();
    let rows = ["r1", "r2", "r3"];
    for round in 0..10i64 {
        // A different order each round: rotated, and every other round reversed.
        let mut order = columns.clone();
        let shift = (round as usize * 5) % order.len();
        order.rotate_left(shift);
        if round % 2 == 1 {
            order.reverse();
        }
        let entries = rows
            .iter()
            .map(|row| {
                // A column in the middle of the row, written first then deleted first: the
                // deletion leaves the iterator past the columns before it.
                let middle = match round {
                    0 => Mutation::set("a", "q05d", 1000, "gone"),
                    _ => Mutation::delete_column("a", Bytes::from_static(b"q05d")),
                };
                let cells = std::iter::once(middle)
                    .chain(order.iter().map(|(f, q)| {
                        Mutation::set(*f, q.clone(), (round + 1) * 1000, round.to_string())
                    }))
                    .collect();
                RowMutation::new(*row, cells)
            })
            .collect();
        let statuses = store.mutate_rows("t", entries).await.unwrap();
        assert!(statuses.iter().all(Result::is_ok));
        if round == 4 {
            store.flush().await.unwrap();
        }
    }
    // Per row: 12 columns of `a` at one version, 12 of `b` at two, once compacted.
    store.compact().unwrap();
    assert_eq!(store.physical_cell_count("t").unwrap(), 3 * (12 + 2 * 12));
    let read = store
        .read_all("t", ReadRows::new(RowSet::keys(rows.map(Bytes::from))))
        .await
        .unwrap();
    assert_eq!(read.len(), 3);
    for row in &read {
        assert_eq!(row.cells.len(), 12 + 2 * 12, "{row:?}");
        let newest: Vec<&[u8]> = row.family("a").map(|c| &c.value[..]).collect();
        assert_eq!(newest, vec![&b"9"[..]; 12]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_points_come_from_sst_files() {
    let dir = tempfile::tempdir().unwrap();
    let options = RocksOptions {
        sync_writes: false,
        target_file_size_bytes: 256 << 10,
        ..RocksOptions::default()
    };
    let store = RocksStore::open(dir.path(), options).unwrap();
    store
        .create_table("t", [("f".into(), GcRule::None)].into())
        .await
        .unwrap();
    let rows = 8000;
    // Incompressible values, so the table really spans many files.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut value = || {
        let bytes: Vec<u8> = (0..1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Bytes::from(bytes)
    };
    for chunk in (0..rows).collect::<Vec<_>>().chunks(1000) {
        let entries = chunk
            .iter()
            .map(|i| {
                RowMutation::new(
                    Bytes::from(format!("row{i:06}")),
                    vec![Mutation::set("f", "q", 1000, value())],
                )
            })
            .collect();
        store.mutate_rows("t", entries).await.unwrap();
    }
    store.compact().unwrap();
    let samples = store.sample_row_keys("t").await.unwrap();
    assert!(
        samples.len() >= 5,
        "expected several split points, got {samples:?}"
    );
    assert!(samples.last().unwrap().offset_bytes > 4 << 20);
    let ranges = split_ranges(&samples, 4);
    assert_eq!(ranges.len(), 4);
    let mut total = 0;
    for r in ranges {
        let n = store
            .read_all("t", ReadRows::new(RowSet::range(r)))
            .await
            .unwrap()
            .len();
        assert!(n > 0, "every range holds rows");
        total += n;
    }
    assert_eq!(total, rows);
}

/// The range tombstones the store has recorded and not yet compacted away.
fn recorded_range_tombstones(store: &RocksStore) -> f64 {
    let gauges = store.gauges();
    let gauge = gauges
        .iter()
        .find(|g| g.name == "rocksdb_range_tombstones_recorded");
    gauge.expect("the gauge").value
}

/// The active memtable's tombstones, as the store reports them.
fn memtable_deletes(store: &RocksStore) -> f64 {
    let gauges = store.gauges();
    let gauge = gauges.iter().find(|g| g.name == "rocksdb_memtable_deletes");
    gauge.expect("the gauge").value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_leaves_much_garbage_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // One version kept: every write of the cell hides the previous one.
    store
        .create_table("t", [("f".into(), GcRule::MaxVersions(1))].into())
        .await
        .unwrap();
    let write = |row: String, mutations: Vec<Mutation>| {
        let store = store.clone();
        async move {
            store
                .mutate_row("t", Bytes::from(row), mutations)
                .await
                .unwrap();
        }
    };
    let cell = |ts: i64| Mutation::set("f", "q", ts * 1000, "v");
    // Many rows deleting a little each: their tombstones stay in the memtable.
    for i in 0..4000 {
        let delete = || Mutation::delete_column("f", Bytes::from_static(b"q"));
        write(format!("light-{i}"), vec![delete(), cell(1)]).await;
        write(format!("light-{i}"), vec![delete(), cell(2)]).await;
    }
    assert_eq!(memtable_deletes(&store), 4000.0);
    // One row hiding a version at each write (written blind): past 8192, its range is
    // compacted (the memtable flushed first), so that its reads stop stepping over them.
    for ts in 1..=9000 {
        write("heavy".into(), vec![cell(ts)]).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while memtable_deletes(&store) >= 4000.0 {
        assert!(std::time::Instant::now() < deadline, "never compacted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let row = store
        .read_row("t", Bytes::from("heavy"), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.cells[0].timestamp, 9_000_000);
}

/// A checkpoint opens as the store was when it was taken: what was written before is there,
/// what was written after is not, and the store goes on unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_is_the_store_as_of_one_moment() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("live"));
    store
        .create_table("t", [("f".into(), GcRule::None)].into())
        .await
        .unwrap();
    let set = |row: &'static str, value: &'static str| {
        RowMutation::new(Bytes::from(row), vec![Mutation::set("f", "q", 1000, value)])
    };
    store
        .mutate_all("t", vec![set("a", "1"), set("b", "1")])
        .await
        .unwrap();
    let copy = dir.path().join("backups").join("one");
    store.checkpoint(&copy).await.unwrap();
    store
        .mutate_all("t", vec![set("a", "2"), set("c", "2")])
        .await
        .unwrap();
    // A second checkpoint into the same folder is refused, the first one left as it was.
    let again = store.checkpoint(&copy).await.unwrap_err();
    assert!(again.to_string().contains("exists already"), "{again}");

    let values = |rows: Vec<penchant_store::Row>| -> Vec<(String, String)> {
        rows.iter()
            .map(|r| {
                let key = String::from_utf8(r.key.to_vec()).unwrap();
                let value = String::from_utf8(r.cells[0].value.to_vec()).unwrap();
                (key, value)
            })
            .collect()
    };
    let all = || ReadRows::new(RowSet::all());
    let live = values(store.read_all("t", all()).await.unwrap());
    assert_eq!(
        live,
        [("a", "2"), ("b", "1"), ("c", "2")].map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    let restored = open(&copy);
    let then = values(restored.read_all("t", all()).await.unwrap());
    assert_eq!(
        then,
        [("a", "1"), ("b", "1")].map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
}
