//! Structured logs with `tracing`, as text or JSON, on stderr.

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Install the global subscriber. `RUST_LOG`, when set, overrides the configured filter.
pub fn init(log: &LogConfig) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.is_empty() => EnvFilter::try_new(env)?,
        _ => EnvFilter::try_new(&log.level)
            .map_err(|e| anyhow::anyhow!("invalid log.level `{}`: {e}", log.level))?,
    };
    // Colours only on a terminal: a file or a pipe gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = match log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
