//! Read streams left unread: a caller that holds a scan open while it waits on another call
//! (a job that reads each row's neighbours, a fold inside a scan) must not stall the store.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use penchant_store::{GcRule, Mutation, ReadRows, RowMutation, Store};
use penchant_store_bigtable::emulator::Emulator;
use penchant_store_bigtable::{BigtableConfig, BigtableStore};

const T: &str = "t";

/// Scans whose readers stopped after their first row, holding more than HTTP/2's connection
/// window between them, and point reads and writes on the same store still answer. Before
/// scans were read in pages, the rows the server had sent them sat unread in the connection's
/// buffers, and once those filled its window, no other call on the connection got its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_held_open_do_not_stall_other_calls() {
    let emulator = Emulator::start();
    let store = BigtableStore::connect(BigtableConfig {
        endpoint: Some(format!("http://{}", emulator.addr())),
        call_timeout_ms: 5_000,
        ..BigtableConfig::default()
    })
    .await
    .unwrap();
    store
        .create_table(T, [("f".to_owned(), GcRule::None)].into())
        .await
        .unwrap();
    // 2,000 rows of 8 KiB: 16 MiB per scan, beyond the 2 MiB a stream's window holds.
    let value = Bytes::from(vec![b'v'; 8 * 1024]);
    let rows: Vec<RowMutation> = (0..2000)
        .map(|i| {
            RowMutation::new(
                Bytes::from(format!("row{i:05}")),
                vec![Mutation::set(
                    "f",
                    Bytes::from_static(b"q"),
                    0,
                    value.clone(),
                )],
            )
        })
        .collect();
    store.mutate_all(T, rows).await.unwrap();

    let calls = async {
        let mut held = Vec::new();
        for _ in 0..6 {
            let mut scan = store.read_rows(T, ReadRows::default()).await.unwrap();
            let first = scan.next().await.unwrap().unwrap();
            assert_eq!(first.key, Bytes::from_static(b"row00000"));
            held.push(scan);
        }
        // Let the server send what the connection allows into the streams nobody reads.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let read = store
            .read_row(T, Bytes::from_static(b"row01999"), None)
            .await
            .unwrap();
        assert_eq!(read.expect("the row exists").cells[0].value, value);
        store
            .mutate_row(
                T,
                Bytes::from_static(b"new"),
                vec![Mutation::set_now(
                    "f",
                    Bytes::from_static(b"q"),
                    Bytes::from_static(b"x"),
                )],
            )
            .await
            .unwrap();
        held
    };
    // Before pages, the fourth scan got no first row for two minutes.
    let held = tokio::time::timeout(Duration::from_secs(20), calls)
        .await
        .expect("scans open and calls answer while other scans are held open");

    // Every held scan still delivers all its rows, once and in order, when read on.
    for mut scan in held {
        let mut n = 1;
        let mut last = Bytes::from_static(b"row00000");
        while let Some(row) = scan.next().await {
            let row = row.unwrap();
            assert!(row.key > last, "in order, once");
            last = row.key;
            n += 1;
        }
        assert!(n == 2000 || n == 2001, "every row: {n}");
    }
}
