//! Durability: kill -9 a process while it writes, then check every acknowledged write.
//!
//! The test binary runs itself again as the writer (the ignored test `crash_writer`, enabled by
//! an environment variable). The writer prints `ack <row>` after each `mutate_row` returns; the
//! parent kills it mid-stream, reopens the store and checks each acknowledged row. Each row is
//! two cells written in one mutation, so a torn row (one cell without the other) would show too.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{GcRule, Mutation, ReadRows, Store};
use penchant_store_rocksdb::{RocksOptions, RocksStore};

const CHILD_ENV: &str = "PENCHANT_CRASH_WRITER_DIR";
const T: &str = "crash";

fn value(row: &str) -> Bytes {
    Bytes::from(format!("value-of-{row}-").repeat(8))
}

#[test]
#[ignore = "run by acknowledged_writes_survive_kill_9 as its child process"]
fn crash_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let store = Arc::new(RocksStore::open(&dir, RocksOptions::default()).unwrap());
        store
            .create_table(T, [("f".to_string(), GcRule::None)].into())
            .await
            .unwrap();
        // Several concurrent writers, so group commit is exercised too.
        let writers = (0..4).map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0u64.. {
                    let row = format!("w{w}-{i:08}");
                    store
                        .mutate_row(
                            T,
                            Bytes::from(row.clone()),
                            vec![
                                Mutation::set("f", Bytes::from_static(b"a"), 1000, value(&row)),
                                Mutation::set("f", Bytes::from_static(b"b"), 1000, value(&row)),
                            ],
                        )
                        .await
                        .unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ack {row}").unwrap();
                    out.flush().unwrap();
                }
            })
        });
        futures::future::join_all(writers).await;
    });
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash::crash_writer",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut acked = Vec::new();
    let mut lines = stdout.lines();
    for line in lines.by_ref() {
        if let Some(row) = line.unwrap().strip_prefix("ack ") {
            acked.push(row.to_owned());
            if acked.len() == 1500 {
                child.kill().unwrap(); // SIGKILL
                break;
            }
        }
    }
    // Acknowledgements already printed before the kill count too.
    for line in lines {
        if let Some(row) = line.unwrap().strip_prefix("ack ") {
            acked.push(row.to_owned());
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the writer was killed, not finished");
    assert!(acked.len() >= 1500);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
        let rows = store.read_all(T, ReadRows::default()).await.unwrap();
        let stored: std::collections::HashMap<Bytes, _> =
            rows.into_iter().map(|r| (r.key.clone(), r)).collect();
        for row in &acked {
            let r = stored
                .get(row.as_bytes())
                .unwrap_or_else(|| panic!("acknowledged row {row} was lost"));
            assert_eq!(r.cells.len(), 2, "row {row} is torn");
        }
        // Rows written but not yet acknowledged may be there, but never torn.
        for (key, r) in &stored {
            assert_eq!(r.cells.len(), 2, "row {key:?} is torn");
            assert!(
                r.cells
                    .iter()
                    .all(|c| c.value == value(std::str::from_utf8(key).unwrap()))
            );
        }
        assert!(stored.len() >= acked.len());
    });
}
