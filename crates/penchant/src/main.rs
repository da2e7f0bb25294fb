//! `penchant`: the server, its administration and its benchmarks.

mod admin;
mod bench;
mod cli;
mod config;
mod serve;
mod telemetry;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: rows built on a store thread and dropped on a request thread are freed without the
/// cross-thread contention of glibc's allocator (a 2-3x difference on scans).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain: what failed, and why.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
