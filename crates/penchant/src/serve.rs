//! `penchant serve`: open the store, start the server, shut down gracefully.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use penchant_engine::Engine;
use penchant_server::AppState;
use penchant_store::Store;
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use tokio::sync::watch;

use crate::config::{Backend, Config};

/// Open the configured store.
pub fn open_store(config: &Config) -> anyhow::Result<(Arc<dyn Store>, &'static str)> {
    match config.store.backend {
        Backend::Embedded => {
            let dir = &config.store.data_dir;
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create data folder {}", dir.display()))?;
            let options = RocksOptions {
                sync_writes: config.store.sync_writes,
                block_cache_bytes: config.store.block_cache_mib << 20,
                ..RocksOptions::default()
            };
            let store = RocksStore::open(dir, options)
                .with_context(|| format!("cannot open the embedded store in {}", dir.display()))?;
            Ok((Arc::new(store), "embedded"))
        }
    }
}

pub fn run(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let (store, backend) = open_store(&config)?;
    let engine = Engine::new(store);
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, backend, data_dir = %config.store.data_dir.display(), "penchant listening");
    // A line for scripts and tests that start the server on port 0.
    println!("penchant listening on http://{addr}");

    let (stop_tx, mut stop_rx) = watch::channel(false);
    tokio::spawn(watch_signals(stop_tx));
    let shutdown = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let server = tokio::spawn(penchant_server::serve(
        listener,
        penchant_server::router(AppState::new(engine.clone(), backend)),
        shutdown,
    ));
    let _ = stop_rx.wait_for(|stop| *stop).await;
    tracing::info!("shutting down: finishing in-flight requests");
    let grace = Duration::from_secs(config.server.shutdown_timeout_secs);
    match tokio::time::timeout(grace, server).await {
        Ok(joined) => joined
            .context("server task failed")?
            .context("server failed")?,
        Err(_) => tracing::warn!(?grace, "in-flight requests did not finish in time"),
    }
    engine.flush().await.context("cannot flush the store")?;
    tracing::info!("store flushed, bye");
    Ok(())
}

/// First SIGTERM or Ctrl-C: graceful shutdown. A second Ctrl-C: exit at once.
async fn watch_signals(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = stop.send(true);
    int.recv().await;
    tracing::warn!("second interrupt: exiting without draining");
    std::process::exit(130);
}
