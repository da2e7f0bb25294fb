//! `penchant`: the server, its administration and its benchmarks.

mod bench;
mod cli;
mod config;
mod serve;
mod telemetry;

use std::process::ExitCode;

use clap::Parser;

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
