//! Command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, FlagOverrides, LogFlags, LogFormat, ServerFlags, StoreFlags};

#[derive(Debug, Parser)]
#[command(
    name = "penchant",
    version,
    about = "Real-time personalization and recommendation engine"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the HTTP server.
    Serve(ServeArgs),
    /// Print the effective configuration (all layers merged) as JSON.
    Config(ConfigArgs),
    /// Manage apps on a running server (global admin key).
    Apps(AppsArgs),
    /// Manage an app's API keys on a running server (global admin key).
    Keys(KeysArgs),
    /// Follow background jobs on a running server (global admin key).
    Jobs(JobsArgs),
    /// Manage an app's key sets (Bloom filters) on a running server (global admin key).
    Sets(SetsArgs),
    /// Run a benchmark and print its table.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Args)]
struct JobsArgs {
    #[command(subcommand)]
    command: crate::admin::JobsCommand,
    #[command(flatten)]
    target: crate::admin::Target,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Debug, Args)]
struct SetsArgs {
    #[command(subcommand)]
    command: crate::admin::SetsCommand,
    #[command(flatten)]
    target: crate::admin::Target,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Debug, Args)]
struct AppsArgs {
    #[command(subcommand)]
    command: crate::admin::AppsCommand,
    #[command(flatten)]
    target: crate::admin::Target,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Debug, Args)]
struct KeysArgs {
    #[command(subcommand)]
    command: crate::admin::KeysCommand,
    #[command(flatten)]
    target: crate::admin::Target,
    #[command(flatten)]
    config: ConfigArgs,
}

/// Flags shared by every command that reads the configuration.
#[derive(Debug, Args)]
struct ConfigArgs {
    /// TOML configuration file.
    #[arg(long, short, env = "PENCHANT_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Address to listen on (`server.listen`).
    #[arg(long, global = true)]
    listen: Option<SocketAddr>,
    /// Folder of the embedded store (`store.data_dir`).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Log format (`log.format`).
    #[arg(long, value_enum, global = true)]
    log_format: Option<LogFormat>,
    /// Log filter (`log.level`), e.g. `debug`.
    #[arg(long, global = true)]
    log_level: Option<String>,
}

impl ConfigArgs {
    fn load(&self) -> anyhow::Result<Config> {
        let flags = FlagOverrides {
            server: self.listen.map(|listen| ServerFlags {
                listen: Some(listen),
            }),
            store: self
                .data_dir
                .clone()
                .map(|d| StoreFlags { data_dir: Some(d) }),
            log: (self.log_format.is_some() || self.log_level.is_some()).then(|| LogFlags {
                format: self.log_format,
                level: self.log_level.clone(),
            }),
        };
        Config::load(self.config.as_deref(), &flags)
    }
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// The store: durable writes, scans, point reads, each beside raw RocksDB.
    Store(crate::bench::store::StoreBenchArgs),
    /// Bloom filters: lookups beside the `fastbloom` crate, and a bulk seen-filter check.
    Bloom(crate::bench::bloom::BloomBenchArgs),
    /// Personalization on MovieLens 100k: ingestion over HTTP, event-to-profile latency, full
    /// recompute.
    Personalization(crate::bench::personalization::PersonalizationBenchArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let config = args.config.load()?;
            crate::telemetry::init(&config.log)?;
            crate::serve::run(config)
        }
        Command::Config(args) => {
            let config = args.load()?;
            println!("{}", serde_json::to_string_pretty(&config)?);
            Ok(())
        }
        Command::Apps(args) => crate::admin::apps(args.command, &args.target, &args.config.load()?),
        Command::Keys(args) => crate::admin::keys(args.command, &args.target, &args.config.load()?),
        Command::Jobs(args) => crate::admin::jobs(args.command, &args.target, &args.config.load()?),
        Command::Sets(args) => crate::admin::sets(args.command, &args.target, &args.config.load()?),
        Command::Bench(BenchCommand::Store(args)) => crate::bench::store::run(args),
        Command::Bench(BenchCommand::Bloom(args)) => crate::bench::bloom::run(args),
        Command::Bench(BenchCommand::Personalization(args)) => {
            crate::bench::personalization::run(args)
        }
    }
}
