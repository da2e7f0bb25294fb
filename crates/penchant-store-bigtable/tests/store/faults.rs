//! Transient failures, injected by a TCP proxy between the store and a real emulator: read
//! streams resume where they broke, idempotent writes are retried, increments are not.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::{
    GcRule, Mutation, ReadModifyWriteRule, ReadRows, RowMutation, Store, StoreError,
};
use penchant_store_bigtable::emulator::Emulator;
use penchant_store_bigtable::{BigtableConfig, BigtableStore, RetryPolicy};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A loopback TCP proxy that can cut every open connection and refuse new ones.
struct Proxy {
    addr: SocketAddr,
    refusing: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let refusing = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (r, c) = (refusing.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if r.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                c.lock().push(task.abort_handle());
            }
        })
        .abort_handle();
        Self {
            addr,
            refusing,
            connections,
            accept,
        }
    }

    /// Break every open connection.
    fn cut(&self) {
        for c in self.connections.lock().drain(..) {
            c.abort();
        }
    }

    fn refuse(&self, refuse: bool) {
        self.refusing.store(refuse, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

const T: &str = "t";

async fn setup() -> (Emulator, Proxy, BigtableStore) {
    let emulator = Emulator::start();
    let proxy = Proxy::start(emulator.addr().to_owned()).await;
    let config = BigtableConfig {
        endpoint: Some(format!("http://{}", proxy.addr)),
        call_timeout_ms: 2_000,
        retry: RetryPolicy {
            max_attempts: 10,
            initial_backoff_ms: 20,
            max_backoff_ms: 200,
        },
        ..BigtableConfig::default()
    };
    let store = BigtableStore::connect(config).await.unwrap();
    store
        .create_table(T, [("f".to_owned(), GcRule::None)].into())
        .await
        .unwrap();
    (emulator, proxy, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_stream_resumes_after_the_connection_breaks() {
    let (_emulator, proxy, store) = setup().await;
    let n = 2000;
    let value = Bytes::from(vec![b'v'; 8 * 1024]);
    let rows: Vec<RowMutation> = (0..n)
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
    for chunk in rows.chunks(250) {
        for s in store.mutate_rows(T, chunk.to_vec()).await.unwrap() {
            s.unwrap();
        }
    }
    let mut stream = store.read_rows(T, ReadRows::default()).await.unwrap();
    let mut keys = Vec::new();
    while let Some(row) = stream.next().await {
        let row = row.unwrap();
        assert_eq!(row.cells.len(), 1);
        keys.push(row.key);
        if keys.len() == 100 || keys.len() == 1500 {
            proxy.cut();
        }
    }
    let expected: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("row{i:05}"))).collect();
    assert_eq!(keys.len(), n, "every row once, none twice");
    assert_eq!(keys, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_writes_are_retried_through_an_outage() {
    let (_emulator, proxy, store) = setup().await;
    proxy.refuse(true);
    proxy.cut();
    // An outage well within the retries' budget: ten attempts with jittered backoffs of up to
    // 20, 40, ... 200 ms rarely add up to less than 100 ms (300 ms made this test flaky).
    let restore = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.refuse(false);
    };
    let write = store.mutate_row(
        T,
        Bytes::from_static(b"r"),
        vec![Mutation::set_now(
            "f",
            Bytes::from_static(b"q"),
            Bytes::from_static(b"v"),
        )],
    );
    let (written, ()) = tokio::join!(write, restore);
    written.unwrap();
    let row = store
        .read_row(T, Bytes::from_static(b"r"), None)
        .await
        .unwrap()
        .expect("the retried write landed");
    assert_eq!(row.cells.len(), 1, "written once: {row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn increments_are_not_retried() {
    let (_emulator, proxy, store) = setup().await;
    proxy.refuse(true);
    proxy.cut();
    let r = store
        .read_modify_write_row(
            T,
            Bytes::from_static(b"counter"),
            vec![ReadModifyWriteRule::increment(
                "f",
                Bytes::from_static(b"n"),
                1,
            )],
        )
        .await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    proxy.refuse(false);
    // The caller decides: here, nothing was applied, and an explicit second call counts once.
    assert!(
        store
            .read_row(T, Bytes::from_static(b"counter"), None)
            .await
            .unwrap()
            .is_none()
    );
    let row = store
        .read_modify_write_row(
            T,
            Bytes::from_static(b"counter"),
            vec![ReadModifyWriteRule::increment(
                "f",
                Bytes::from_static(b"n"),
                1,
            )],
        )
        .await
        .unwrap();
    assert_eq!(row.cells[0].value[..], 1i64.to_be_bytes());
}
