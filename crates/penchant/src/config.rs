//! Typed, layered configuration: defaults < TOML file < `PENCHANT_*` environment < flags.
//!
//! Nested keys are joined by `__` in the environment (`PENCHANT_SERVER__LISTEN`). Unknown keys
//! are errors that name the key, wherever they come from.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use penchant_store_bigtable::BigtableConfig;
use serde::{Deserialize, Serialize};

/// The engine's serving defaults, which the config file's defaults are.
fn serving() -> penchant_engine::EngineConfig {
    penchant_engine::EngineConfig::serving()
}

fn millis(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

/// The environment variable prefix.
pub const ENV_PREFIX: &str = "PENCHANT_";

/// The configuration's sections (`server`, `store`, ...), as the environment names them.
fn sections() -> Vec<String> {
    match serde_json::to_value(Config::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Whether an environment variable (its name less the prefix) names a configuration key:
/// `<SECTION>__<KEY>` of a known section. Others (`PENCHANT_KEY` holding an API key for a
/// client, say) are not read.
fn is_config_key(key: &str, sections: &[String]) -> bool {
    key.split_once("__")
        .is_some_and(|(section, _)| sections.iter().any(|s| s.eq_ignore_ascii_case(section)))
}

/// The `PENCHANT_*` variables set that are not configuration (`PENCHANT_CONFIG` is the file).
fn ignored_env(sections: &[String]) -> Vec<String> {
    let mut ignored: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| {
            name.strip_prefix(ENV_PREFIX).is_some_and(|key| {
                !key.eq_ignore_ascii_case("config") && !is_config_key(key, sections)
            })
        })
        .collect();
    ignored.sort();
    ignored
}

/// Penchant's whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    /// `[bigtable]`: used when `store.backend = "bigtable"`.
    pub bigtable: BigtableConfig,
    pub placement: PlacementConfig,
    pub auth: AuthConfig,
    pub personalization: PersonalizationConfig,
    pub bloom: BloomConfig,
    pub vectors: VectorsConfig,
    pub log: LogConfig,
}

/// `[vectors]`: vector spaces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VectorsConfig {
    /// Bytes of item vectors a node keeps in memory for similarity searches (each space's items
    /// as one matrix, loaded on first use); a space larger than this cannot be searched.
    /// 0: no limit.
    pub memory_bytes: u64,
    /// Items from which a node also builds an approximate index (HNSW) of a space it loaded,
    /// in the background; searches over all items go through it once it is ready. 0: never,
    /// every search scans.
    pub index_min_rows: usize,
    /// Candidates a search asks the index for (at least the hits wanted), then scores exactly:
    /// more finds more of the true nearest, slower.
    pub index_ef: usize,
}

impl Default for VectorsConfig {
    fn default() -> Self {
        let serving = serving();
        Self {
            memory_bytes: serving.vector_memory_bytes,
            index_min_rows: serving.vector_index.min_rows,
            index_ef: serving.vector_index.ef,
        }
    }
}

/// `[bloom]`: key sets and seen filters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BloomConfig {
    /// Bytes of key-set partitions a node keeps in memory.
    pub set_cache_bytes: u64,
    /// How long a node trusts a cached set partition or description, or an app's seen-filter
    /// settings, in milliseconds: adds and changes made through another node are seen here
    /// within this interval.
    pub cache_ttl_ms: u64,
}

impl Default for BloomConfig {
    fn default() -> Self {
        Self {
            set_cache_bytes: serving().set_cache_bytes,
            cache_ttl_ms: millis(serving().bloom_cache_ttl),
        }
    }
}

/// `[personalization]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PersonalizationConfig {
    /// How long a node trusts its cached copy of an app's strategy, in milliseconds: a strategy
    /// changed through another node is used here within this interval (profiles read through
    /// `GET /1/profiles/...` are recomputed if they lag behind the stored strategy).
    pub strategy_cache_ttl_ms: u64,
    /// Ranges of users a profile recompute (after a strategy change) runs in parallel.
    pub recompute_parallelism: usize,
    /// How often a node deletes the events past each app's retention window (they no longer
    /// count; the store's 90-day rule would delete them later), in seconds; 0: never.
    pub purge_interval_secs: u64,
    /// How long a node's lease on background work (a recompute job, the purge, the repair of
    /// interrupted ingestions) lasts without renewal, in seconds: how long a job waits before
    /// another node takes it over when the node running it dies.
    pub lease_ttl_secs: u64,
}

impl Default for PersonalizationConfig {
    fn default() -> Self {
        Self {
            strategy_cache_ttl_ms: millis(serving().strategy_cache_ttl),
            recompute_parallelism: serving().recompute_parallelism,
            purge_interval_secs: 3_600,
            lease_ttl_secs: serving().lease_ttl.as_secs(),
        }
    }
}

/// `[auth]`: API keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The global admin key: manages apps (`/1/apps`) and acts as an admin key of every app.
    /// Unset: apps can only be managed by a node that has one.
    pub admin_key: Option<String>,
    /// How long a node trusts a cached API-key lookup and an app's cached settings (retention,
    /// event layout), in milliseconds: a key created or deleted, or an app changed, through
    /// another node takes effect here within this interval.
    pub key_cache_ttl_ms: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            admin_key: None,
            key_cache_ttl_ms: millis(serving().tenancy.cache_ttl),
        }
    }
}

/// `[server]`: the HTTP listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on. Default: `127.0.0.1:7070` (loopback only).
    pub listen: SocketAddr,
    /// Seconds to let in-flight requests finish after a shutdown signal.
    pub shutdown_timeout_secs: u64,
    /// Seconds a client may take to send a request's headers, from its connection or from its
    /// first byte after an idle wait; then the connection is closed. 0: no limit.
    pub header_read_timeout_secs: u64,
    /// Seconds a kept-alive connection may wait for its next request; then it is closed. 0: no
    /// limit.
    pub idle_timeout_secs: u64,
    /// Seconds the server waits for the next bytes of a request's body, and for all of it this
    /// plus a second per 64 KiB received; then the request is answered 408 and the connection
    /// closed. 0: no limit.
    pub body_read_timeout_secs: u64,
    /// Seconds a write to a client may wait for it to read; then the connection is closed. 0:
    /// no limit.
    pub write_timeout_secs: u64,
    /// The most connections served at once (more wait to be accepted); at most half the
    /// process' open-file limit, which is raised to its hard limit at start.
    pub max_connections: usize,
    /// Addresses of your proxies (a backend calling for its users, a load balancer): from
    /// them, `X-Algolia-UserToken`, else `X-Forwarded-For`, names the client a key's rate limit
    /// counts. From any other peer, the client is the peer's IP address.
    pub trusted_proxies: Vec<IpAddr>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let limits = penchant_server::HttpLimits::default();
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            shutdown_timeout_secs: 30,
            header_read_timeout_secs: limits.header_read_timeout.as_secs(),
            idle_timeout_secs: limits.idle_timeout.as_secs(),
            body_read_timeout_secs: limits.body_read_timeout.as_secs(),
            write_timeout_secs: limits.write_timeout.as_secs(),
            max_connections: limits.max_connections,
            trusted_proxies: Vec::new(),
        }
    }
}

/// Which store backend holds the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// RocksDB in `data_dir`.
    Embedded,
    /// Google Cloud Bigtable (or its emulator), configured in `[bigtable]`.
    Bigtable,
}

/// `[store]`: where data lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub backend: Backend,
    /// Folder of the embedded store. Default: `./penchant-data`.
    pub data_dir: PathBuf,
    /// Fsync the write-ahead log before acknowledging a write (group commit batches concurrent
    /// writers). `false` survives a process crash but not a power loss. Default: true.
    pub sync_writes: bool,
    /// Block cache of the embedded store, in MiB. Default: 256.
    pub block_cache_mib: usize,
    /// Where `POST /1/backups` (`penchant backup create`) writes backups of the embedded store,
    /// one folder each; on the store's file system, their files are hard links. Default:
    /// `./penchant-backups`.
    pub backup_dir: PathBuf,
    /// Rows a second the node's background jobs (recomputes, builds, trainings, retention, the
    /// repair's listing) may read or write, all together; requests are never paced. For a store
    /// that serves requests and jobs alike and has no room for both at full speed: the embedded
    /// store on a small machine, a Bigtable instance without a cluster for batch work (or the
    /// emulator). 0: no budget. Default: 0.
    pub batch_rows_per_second: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Embedded,
            data_dir: PathBuf::from("penchant-data"),
            sync_writes: true,
            block_cache_mib: 256,
            backup_dir: PathBuf::from("penchant-backups"),
            batch_rows_per_second: 0,
        }
    }
}

/// `[placement]`: data residency. Each target is another store — on Bigtable another instance
/// (possibly in another region) or table prefix, embedded another RocksDB folder; the main
/// store is the target `default`. Who lives where is data (table `placements`), changed online
/// with `penchant placement`; `apps` places apps that have no placement yet when a node starts.
///
/// ```toml
/// [placement.targets.eu]
/// instance = "penchant-eu"        # Bigtable; embedded: data_dir = "penchant-data-eu"
/// [placement.apps]
/// MYAPPID = "eu"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlacementConfig {
    pub targets: BTreeMap<String, PlacementTarget>,
    /// App ID → target name, for apps without a placement yet.
    pub apps: BTreeMap<String, String>,
    /// How often a node reloads every placement: a change reaches every node within it.
    pub refresh_ms: u64,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            targets: BTreeMap::new(),
            apps: BTreeMap::new(),
            refresh_ms: millis(serving().placement_refresh),
        }
    }
}

/// Where a placement target differs from `[bigtable]` (unset fields are taken from it), or,
/// on the embedded store, its folder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlacementTarget {
    pub project: Option<String>,
    pub instance: Option<String>,
    pub table_prefix: Option<String>,
    pub endpoint: Option<String>,
    pub admin_endpoint: Option<String>,
    /// The embedded store's folder for this target.
    pub data_dir: Option<PathBuf>,
}

impl PlacementTarget {
    /// `[bigtable]` with this target's overrides.
    pub fn apply(&self, base: &BigtableConfig) -> BigtableConfig {
        let mut config = base.clone();
        let set = |field: &mut String, value: &Option<String>| {
            if let Some(v) = value {
                field.clone_from(v);
            }
        };
        set(&mut config.project, &self.project);
        set(&mut config.instance, &self.instance);
        set(&mut config.table_prefix, &self.table_prefix);
        if self.endpoint.is_some() {
            config.endpoint.clone_from(&self.endpoint);
        }
        if self.admin_endpoint.is_some() {
            config.admin_endpoint.clone_from(&self.admin_endpoint);
        }
        config
    }
}

impl PlacementConfig {
    /// Every app's target must exist, and each target must say where it is for the backend.
    pub fn check(&self, backend: Backend) -> anyhow::Result<()> {
        for (app, target) in &self.apps {
            if target != DEFAULT_TARGET && !self.targets.contains_key(target) {
                bail!(
                    "placement.apps.{app} names the target `{target}`, which is not in placement.targets"
                );
            }
        }
        for (name, target) in &self.targets {
            if name == DEFAULT_TARGET {
                bail!(
                    "placement.targets.{DEFAULT_TARGET}: `{DEFAULT_TARGET}` is the main store's name"
                );
            }
            let bigtable = target.project.is_some()
                || target.instance.is_some()
                || target.table_prefix.is_some()
                || target.endpoint.is_some()
                || target.admin_endpoint.is_some();
            match backend {
                Backend::Embedded if target.data_dir.is_none() || bigtable => bail!(
                    "placement.targets.{name}: on the embedded store a target is a folder: set \
                     data_dir (and no Bigtable field)"
                ),
                Backend::Bigtable if target.data_dir.is_some() => bail!(
                    "placement.targets.{name}: data_dir is for the embedded store; on Bigtable a \
                     target is an instance (instance, project, table_prefix, endpoint)"
                ),
                _ => {}
            }
        }
        Ok(())
    }
}

/// The main store's name among placement targets.
pub const DEFAULT_TARGET: &str = penchant_engine::residency::DEFAULT_TARGET;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

/// `[log]`: structured logs on stderr.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `penchant=debug,info`; `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// Values given as command-line flags: the top layer. Only flags that were given are set.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FlagOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerFlags>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreFlags>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogFlags>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerFlags {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StoreFlags {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LogFlags {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<LogFormat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
}

impl Config {
    /// Load the layers: defaults, then the TOML file (if given; it must exist), then the
    /// environment, then the flags.
    /// This configuration as it may be shown: secrets (the admin key) replaced by
    /// `"<redacted>"`.
    pub fn redacted(&self) -> Self {
        let mut shown = self.clone();
        if shown.auth.admin_key.is_some() {
            shown.auth.admin_key = Some("<redacted>".into());
        }
        shown
    }

    pub fn load(file: Option<&Path>, flags: &FlagOverrides) -> anyhow::Result<Self> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.is_file() {
                bail!("config file {} does not exist", path.display());
            }
            figment = figment.merge(Toml::file_exact(path));
        }
        let sections = sections();
        let ignored = ignored_env(&sections);
        if !ignored.is_empty() {
            eprintln!(
                "penchant: ignoring {} (not configuration: that is {ENV_PREFIX}<SECTION>__<KEY>, \
                 SECTION one of {})",
                ignored.join(", "),
                sections.join(", ")
            );
        }
        let env = Env::prefixed(ENV_PREFIX)
            .ignore(&["config"])
            .filter(move |key| is_config_key(key.as_str(), &sections))
            .split("__");
        figment = figment.merge(env).merge(Serialized::defaults(flags));
        let config: Config = figment
            .extract()
            .map_err(|e| anyhow::anyhow!(describe(e)))
            .context("invalid configuration")?;
        config
            .placement
            .check(config.store.backend)
            .context("invalid configuration")?;
        Ok(config)
    }
}

/// Figment errors, one line each, naming the key and where it came from.
fn describe(errors: figment::Error) -> String {
    errors
        .into_iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
// `Jail` closures return figment's own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    fn load(file: Option<&str>, flags: &FlagOverrides) -> Result<Config, String> {
        Config::load(file.map(Path::new), flags).map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn defaults_listen_on_loopback() {
        Jail::expect_with(|_| {
            let c = load(None, &FlagOverrides::default())?;
            assert_eq!(c, Config::default());
            assert!(c.server.listen.ip().is_loopback());
            Ok(())
        });
    }

    #[test]
    fn layers_override_in_order() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "p.toml",
                r#"
                [server]
                listen = "127.0.0.1:9000"
                shutdown_timeout_secs = 5
                header_read_timeout_secs = 3
                body_read_timeout_secs = 4
                [store]
                data_dir = "from-file"
                sync_writes = false
                [log]
                level = "debug"
                "#,
            )?;
            jail.set_env("PENCHANT_STORE__DATA_DIR", "from-env");
            jail.set_env("PENCHANT_LOG__FORMAT", "json");
            jail.set_env("PENCHANT_SERVER__IDLE_TIMEOUT_SECS", "7");
            jail.set_env("PENCHANT_SERVER__WRITE_TIMEOUT_SECS", "8");
            jail.set_env("PENCHANT_SERVER__TRUSTED_PROXIES", r#"["10.0.0.1", "::1"]"#);
            jail.set_env("PENCHANT_CONFIG", "ignored: it names the file");
            let flags = FlagOverrides {
                server: Some(ServerFlags {
                    listen: Some("127.0.0.1:9999".parse().unwrap()),
                }),
                ..Default::default()
            };
            let c = load(Some("p.toml"), &flags)?;
            assert_eq!(c.server.listen.port(), 9999, "flag beats file");
            assert_eq!(c.server.shutdown_timeout_secs, 5, "file beats default");
            assert_eq!(c.server.header_read_timeout_secs, 3);
            assert_eq!(c.server.idle_timeout_secs, 7);
            assert_eq!(c.server.body_read_timeout_secs, 4);
            assert_eq!(c.server.write_timeout_secs, 8);
            assert_eq!(c.server.max_connections, 10_000);
            let proxies: Vec<IpAddr> = vec!["10.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
            assert_eq!(c.server.trusted_proxies, proxies);
            assert_eq!(
                c.store.data_dir,
                PathBuf::from("from-env"),
                "env beats file"
            );
            assert!(!c.store.sync_writes);
            assert_eq!(c.log.format, LogFormat::Json);
            assert_eq!(c.log.level, "debug");
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_are_named() {
        Jail::expect_with(|jail| {
            jail.create_file("p.toml", "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n")?;
            let err = load(Some("p.toml"), &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("lisen"), "{err}");
            jail.create_file("q.toml", "[stor]\nx = 1\n")?;
            let err = load(Some("q.toml"), &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("stor"), "{err}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.set_env("PENCHANT_STORE__SYNC_WRITE", "true");
            let err = load(None, &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("sync_write"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn variables_that_are_not_configuration_are_ignored() {
        Jail::expect_with(|jail| {
            // A client's key (docs/CLIENTS.md's JavaScript example), and another tool's setting.
            jail.set_env("PENCHANT_KEY", "secret");
            jail.set_env("PENCHANT_SEARCH_KEY", "secret");
            jail.set_env("PENCHANT_OTHER__THING", "1");
            jail.set_env("PENCHANT_SERVER__LISTEN", "127.0.0.1:7171");
            let c = load(None, &FlagOverrides::default())?;
            assert_eq!(c.server.listen.port(), 7171, "configuration is still read");
            let sections = sections();
            assert!(
                sections.contains(&"server".to_owned()) && sections.contains(&"log".to_owned())
            );
            assert_eq!(
                ignored_env(&sections),
                [
                    "PENCHANT_KEY",
                    "PENCHANT_OTHER__THING",
                    "PENCHANT_SEARCH_KEY"
                ]
            );
            Ok(())
        });
    }

    #[test]
    fn bigtable_and_placement() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "p.toml",
                r#"
                [store]
                backend = "bigtable"
                [bigtable]
                project = "proj"
                instance = "us"
                app_profile = "serving"
                batch_app_profile = "batch"
                [placement.targets.eu]
                instance = "eu"
                [placement.apps]
                APP1 = "eu"
                "#,
            )?;
            jail.set_env("PENCHANT_BIGTABLE__TABLE_PREFIX", "prod_");
            let c = load(Some("p.toml"), &FlagOverrides::default())?;
            assert_eq!(c.store.backend, Backend::Bigtable);
            assert_eq!(c.bigtable.batch_app_profile, "batch");
            let eu = c.placement.targets["eu"].apply(&c.bigtable);
            assert_eq!((eu.project.as_str(), eu.instance.as_str()), ("proj", "eu"));
            assert_eq!(
                eu.table_prefix, "prod_",
                "unset fields come from [bigtable]"
            );
            jail.create_file(
                "q.toml",
                "[store]\nbackend = \"bigtable\"\n[placement.apps]\nX = \"nowhere\"\n",
            )?;
            let err = load(Some("q.toml"), &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("nowhere"), "{err}");
            // On the embedded store, a target is a folder.
            jail.create_file(
                "r.toml",
                "[placement.targets.eu]\ninstance = \"eu\"\n[placement.apps]\nX = \"eu\"\n",
            )?;
            let err = load(Some("r.toml"), &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("data_dir"), "{err}");
            jail.create_file(
                "s.toml",
                "[placement.targets.eu]\ndata_dir = \"eu-data\"\n[placement.apps]\nX = \"eu\"\n",
            )?;
            let c = load(Some("s.toml"), &FlagOverrides::default())?;
            assert_eq!(
                c.placement.targets["eu"].data_dir,
                Some(PathBuf::from("eu-data"))
            );
            assert_eq!(c.placement.refresh_ms, 5000);
            jail.create_file(
                "t.toml",
                "[store]\nbackend = \"bigtable\"\n[placement.targets.eu]\ndata_dir = \"x\"\n",
            )?;
            let err = load(Some("t.toml"), &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("embedded"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn bad_values_and_missing_files_are_errors() {
        Jail::expect_with(|jail| {
            jail.set_env("PENCHANT_SERVER__LISTEN", "not an address");
            let err = load(None, &FlagOverrides::default()).unwrap_err();
            assert!(err.to_lowercase().contains("server.listen"), "{err}");
            Ok(())
        });
        Jail::expect_with(|_| {
            let err = load(Some("missing.toml"), &FlagOverrides::default()).unwrap_err();
            assert!(err.contains("missing.toml"), "{err}");
            Ok(())
        });
    }
}
