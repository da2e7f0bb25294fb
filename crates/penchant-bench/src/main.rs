//! `penchant-bench <suite> [flags]`: run one of Penchant's benchmarks and print its table.

use std::process::ExitCode;

use clap::Parser;

/// The server's allocator, so that the numbers are the server's (see `penchant`'s `main.rs`:
/// rows freed on another thread than the one that built them cost 2-3x more under glibc's).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Run one of Penchant's benchmarks and print its table (`penchant bench` runs this too).
#[derive(Debug, Parser)]
#[command(name = "penchant-bench", version)]
struct Cli {
    #[command(subcommand)]
    suite: penchant_bench::Suite,
}

fn main() -> ExitCode {
    match Cli::parse().suite.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain: what failed, and why.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
