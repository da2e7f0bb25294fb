//! `penchant`: the server and its administration (`penchant bench` runs the separate
//! `penchant-bench` executable).

mod admin;
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
        Ok(code) => code,
        Err(e) => {
            // The whole chain: what failed, and why.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
