//! Command-line interface.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
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
    /// Back up the running server's embedded store online, list its backups, or restore one
    /// (offline) into this configuration's folders.
    Backup(BackupArgs),
    /// Manage an app's API keys on a running server (global admin key).
    Keys(KeysArgs),
    /// Start, follow and stop an app's A/B tests on a running server (global admin key).
    Abtests(AbtestsArgs),
    /// Follow background jobs on a running server (global admin key).
    Jobs(JobsArgs),
    /// Show where apps and users live, place them, move them online (global admin key).
    Placement(PlacementArgs),
    /// Manage an app's key sets (Bloom filters) on a running server (global admin key).
    Sets(SetsArgs),
    /// Train an app's ALS vectors, follow the training, evaluate it (global admin key).
    Als(AlsArgs),
    /// Show what a Recommend model answers (a user's recommendations, an item's, trending items
    /// or facet values), or build an app's lists and queues (global admin key).
    #[command(args_conflicts_with_subcommands = true)]
    Recommend(RecommendArgs),
    /// Run a benchmark and print its table (the `penchant-bench` executable next to this one).
    #[command(after_help = BENCH_HELP)]
    Bench(BenchArgs),
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
struct PlacementArgs {
    #[command(subcommand)]
    command: crate::admin::PlacementCommand,
    #[command(flatten)]
    target: crate::admin::Target,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Debug, Args)]
struct AlsArgs {
    #[command(subcommand)]
    command: crate::admin::AlsCommand,
    #[command(flatten)]
    target: crate::admin::Target,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Debug, Args)]
struct RecommendArgs {
    #[command(subcommand)]
    command: Option<crate::admin::RecommendCommand>,
    #[command(flatten)]
    show: crate::admin::ShowArgs,
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
struct BackupArgs {
    #[command(subcommand)]
    command: crate::admin::BackupCommand,
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

#[derive(Debug, Args)]
struct AbtestsArgs {
    #[command(subcommand)]
    command: crate::admin::AbtestsCommand,
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

const BENCH_HELP: &str = "\
`penchant bench <SUITE> [--scale small|medium|large] [--json FILE]` runs one suite (store, bloom,
personalization, ingest, mixed, als, topk, recommend, schema, residency, soak), `penchant bench
all` every one but the soak;
`penchant bench <SUITE> --help` lists a suite's flags. docs/BENCHMARKS.md holds the latest tables.

The benchmarks are a separate executable, so that the server does not link them: this command
runs `penchant-bench` from the folder of this `penchant` executable, with the arguments as given,
and exits with its status. Build it with

    cargo build --release -p penchant-bench

(cargo puts it next to a release `penchant`), or run it directly:

    cargo run --release -p penchant-bench -- <SUITE> [FLAGS]";

#[derive(Debug, Args)]
struct BenchArgs {
    /// The suite (`store`, `bloom`, `personalization`, `ingest`, `als`, `topk`) and its flags,
    /// passed to `penchant-bench` as they are.
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..
    )]
    args: Vec<OsString>,
}

/// `penchant bench ...`: run the `penchant-bench` executable next to this one and return its exit
/// status.
fn bench(args: &[OsString]) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot locate the penchant executable")?;
    let name = format!("penchant-bench{}", std::env::consts::EXE_SUFFIX);
    let bench = exe.with_file_name(name);
    if !bench.is_file() {
        anyhow::bail!(
            "the benchmarks are a separate executable, and {} does not exist: build it with \
             `cargo build --release -p penchant-bench` (cargo puts it next to a release \
             `penchant`), or run `cargo run --release -p penchant-bench -- <suite> [flags]`",
            bench.display()
        );
    }
    let status = std::process::Command::new(&bench)
        .args(args)
        .status()
        .with_context(|| format!("cannot run {}", bench.display()))?;
    Ok(exit_code(status))
}

/// A child's exit status as this process's: its code, or 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    #[cfg(unix)]
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return ExitCode::from(128u8.wrapping_add(signal as u8));
    }
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}

/// Run a command; its exit code (`penchant bench` exits with the benchmark's).
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = match cli.command {
        Command::Serve(args) => {
            let config = args.config.load()?;
            crate::telemetry::init(&config.log)?;
            crate::serve::run(config)
        }
        Command::Config(args) => {
            let config = args.load()?.redacted();
            println!("{}", serde_json::to_string_pretty(&config)?);
            Ok(())
        }
        Command::Apps(args) => crate::admin::apps(args.command, &args.target, &args.config.load()?),
        Command::Backup(args) => {
            crate::admin::backup(args.command, &args.target, &args.config.load()?)
        }
        Command::Keys(args) => crate::admin::keys(args.command, &args.target, &args.config.load()?),
        Command::Abtests(args) => {
            crate::admin::abtests(args.command, &args.target, &args.config.load()?)
        }
        Command::Jobs(args) => crate::admin::jobs(args.command, &args.target, &args.config.load()?),
        Command::Placement(args) => {
            crate::admin::placement(args.command, &args.target, &args.config.load()?)
        }
        Command::Sets(args) => crate::admin::sets(args.command, &args.target, &args.config.load()?),
        Command::Als(args) => crate::admin::als(args.command, &args.target, &args.config.load()?),
        Command::Recommend(args) => {
            crate::admin::recommend(args.command, args.show, &args.target, &args.config.load()?)
        }
        Command::Bench(args) => return bench(&args.args),
    };
    done.map(|()| ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Clap's own checks of the commands (names, groups, conflicts), which a release build skips.
    #[test]
    fn the_commands_are_well_formed() {
        Cli::command().debug_assert();
    }
}
