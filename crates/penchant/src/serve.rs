//! `penchant serve`: open the store, start the server, shut down gracefully.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use penchant_engine::tenancy::TenancyConfig;
use penchant_engine::{Engine, EngineConfig};
use penchant_server::AppState;
use penchant_store::{PlacedStore, Store};
use penchant_store_bigtable::{BigtableConfig, BigtableStore};
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use tokio::sync::watch;

use crate::config::{Backend, Config, DEFAULT_TARGET};

/// The configured store: the main one, or, with placement targets, a [`PlacedStore`] over it
/// (the target `default`) and them.
pub struct Opened {
    pub store: Arc<dyn Store>,
    pub backend: &'static str,
    pub placed: Option<PlacedStore>,
}

/// Open one embedded store.
fn open_embedded(dir: &std::path::Path, config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data folder {}", dir.display()))?;
    let options = RocksOptions {
        sync_writes: config.store.sync_writes,
        block_cache_bytes: config.store.block_cache_mib << 20,
        ..RocksOptions::default()
    };
    let store = RocksStore::open(dir, options)
        .with_context(|| format!("cannot open the embedded store in {}", dir.display()))?;
    Ok(Arc::new(store))
}

/// Open one Bigtable instance, with row affinity over its clusters when they are listed.
async fn open_bigtable(config: BigtableConfig) -> anyhow::Result<Arc<dyn Store>> {
    let what = format!("{}/{}", config.project, config.instance);
    let store = BigtableStore::connect(config)
        .await
        .with_context(|| format!("cannot connect to Bigtable instance {what}"))?;
    Ok(penchant_store_bigtable::with_affinity(store))
}

/// Open the configured store and its placement targets.
pub async fn open_store(config: &Config) -> anyhow::Result<Opened> {
    let (main, backend): (Arc<dyn Store>, &'static str) = match config.store.backend {
        Backend::Embedded => (open_embedded(&config.store.data_dir, config)?, "embedded"),
        Backend::Bigtable => (open_bigtable(config.bigtable.clone()).await?, "bigtable"),
    };
    if config.placement.targets.is_empty() {
        return Ok(Opened {
            store: main,
            backend,
            placed: None,
        });
    }
    let mut targets = BTreeMap::from([(DEFAULT_TARGET.to_owned(), main)]);
    for (name, target) in &config.placement.targets {
        let store = match (config.store.backend, &target.data_dir) {
            (Backend::Embedded, Some(dir)) => open_embedded(dir, config)?,
            _ => open_bigtable(target.apply(&config.bigtable)).await?,
        };
        targets.insert(name.clone(), store);
    }
    let placed = PlacedStore::new(
        targets,
        DEFAULT_TARGET,
        penchant_engine::residency::pinned_tables(),
    );
    Ok(Opened {
        store: Arc::new(placed.clone()),
        backend,
        placed: Some(placed),
    })
}

pub fn run(config: Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    // Handlers first: a signal that arrives once the server is up must never kill it unflushed.
    let mut signals = Signals::install()?;
    let open_files = raise_open_file_limit();
    let Opened {
        store,
        backend,
        placed,
    } = open_store(&config).await?;
    // Every store operation timed into what `/metrics` reports.
    let metrics = Arc::new(penchant_server::metrics::Metrics::default());
    let store: Arc<dyn Store> = Arc::new(penchant_store::metered::MeteredStore::new(
        store,
        backend,
        metrics.clone(),
    ));
    // The jobs' budget, spent before the metered store: its figures are the store's time.
    let store = penchant_store::paced::PacedStore::wrap(store, config.store.batch_rows_per_second);
    let engine_config = EngineConfig {
        tenancy: TenancyConfig {
            admin_key: config.auth.admin_key.clone(),
            cache_ttl: Duration::from_millis(config.auth.key_cache_ttl_ms),
        },
        strategy_cache_ttl: Duration::from_millis(config.personalization.strategy_cache_ttl_ms),
        recompute_parallelism: config.personalization.recompute_parallelism,
        set_cache_bytes: config.bloom.set_cache_bytes,
        bloom_cache_ttl: Duration::from_millis(config.bloom.cache_ttl_ms),
        lease_ttl: Duration::from_secs(config.personalization.lease_ttl_secs),
        vector_memory_bytes: config.vectors.memory_bytes,
        vector_index: penchant_engine::vectors::IndexSettings {
            min_rows: config.vectors.index_min_rows,
            ef: config.vectors.index_ef,
        },
        placement: placed,
        placement_refresh: Duration::from_millis(config.placement.refresh_ms),
        // RocksDB locks its folders: an embedded node is alone on its store.
        exclusive_store: config.store.backend == Backend::Embedded,
        backup_dir: Some(config.store.backup_dir.clone()),
        ..EngineConfig::default()
    };
    let engine = Engine::open(store, engine_config)
        .await
        .context("cannot open the engine")?;
    let seeds: Vec<(String, String)> = config
        .placement
        .apps
        .iter()
        .map(|(app, target)| (app.clone(), target.clone()))
        .collect();
    engine
        .seed_placements(&seeds)
        .await
        .context("cannot place the configuration's placement.apps")?;
    // Interrupted ingestions repaired and orphaned jobs resumed at once, then regularly; the
    // retention purge every interval (0: off). The engine owns this work until its shutdown.
    let purge = config.personalization.purge_interval_secs;
    engine.start_background((purge > 0).then(|| Duration::from_secs(purge)));
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, backend, "penchant listening");
    // Lines for people, and for scripts and tests that start the server on port 0 (the last
    // one, which they may stop reading after). A closed stdout stops nothing.
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "dashboard: http://{addr}/dashboard");
        let _ = writeln!(out, "penchant listening on http://{addr}");
        let _ = out.flush();
    }

    let (stop_tx, mut stop_rx) = watch::channel(false);
    let shutdown = async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    };
    let state = AppState::with_metrics(engine.clone(), backend, metrics).with_rate_limits(
        penchant_server::ratelimit::RateLimitConfig {
            trusted_proxies: config.server.trusted_proxies.clone(),
            ..Default::default()
        },
    );
    let app = penchant_server::router(state);
    let limits = http_limits(&config, open_files);
    let mut server = tokio::spawn(penchant_server::serve_with(listener, app, shutdown, limits));
    let served = tokio::select! {
        // The server stopped by itself: an error.
        joined = &mut server => Some(joined),
        () = signals.first() => None,
    };
    let served = match served {
        Some(joined) => joined,
        None => {
            tracing::info!("shutting down: finishing in-flight requests");
            let _ = stop_tx.send(true);
            tokio::spawn(signals.second());
            let grace = Duration::from_secs(config.server.shutdown_timeout_secs);
            match tokio::time::timeout(grace, server).await {
                Ok(joined) => joined,
                Err(_) => {
                    tracing::warn!(?grace, "in-flight requests did not finish in time");
                    Ok(Ok(()))
                }
            }
        }
    };
    // Stop the background work (jobs save their checkpoints), then flush, whatever happened
    // to the server.
    let flushed = engine.shutdown().await.context("cannot flush the store");
    served
        .context("server task failed")?
        .context("server failed")?;
    flushed?;
    tracing::info!("store flushed, bye");
    Ok(())
}

/// Raise the process' open-file limit to its hard limit (connections and the store's files
/// count against it); the limit now, if known.
fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(files) => Some(files),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            None
        }
    }
}

/// The listener's limits: the configuration's, with at most half the open-file limit in
/// connections (the other half left to the store's files).
fn http_limits(config: &Config, open_files: Option<u64>) -> penchant_server::HttpLimits {
    let server = &config.server;
    let mut max_connections = server.max_connections;
    if let Some(files) = open_files {
        let half = usize::try_from(files / 2).unwrap_or(usize::MAX).max(1);
        if half < max_connections {
            tracing::warn!(
                open_files = files,
                max_connections = half,
                "server.max_connections lowered to half the open-file limit"
            );
            max_connections = half;
        }
    }
    penchant_server::HttpLimits {
        header_read_timeout: Duration::from_secs(server.header_read_timeout_secs),
        idle_timeout: Duration::from_secs(server.idle_timeout_secs),
        body_read_timeout: Duration::from_secs(server.body_read_timeout_secs),
        write_timeout: Duration::from_secs(server.write_timeout_secs),
        max_connections,
    }
}

/// SIGTERM and SIGINT (Ctrl-C).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    /// The first SIGTERM or Ctrl-C: time for a graceful shutdown.
    async fn first(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    /// A second Ctrl-C: exit at once, without draining.
    async fn second(mut self) {
        self.int.recv().await;
        tracing::warn!("second interrupt: exiting without draining");
        std::process::exit(130);
    }
}
