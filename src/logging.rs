//! Logs, beside the data flow: `tracing` events written to stderr as text
//! lines (the default) or JSON objects (`log.format = "json"`), filtered by
//! `RUST_LOG` when set, else by `log.level`. The daemon's repeated
//! librdkafka errors are collapsed before they get here
//! (`kafka::RepeatedErrors`): one line per change with a count, not one per
//! retry.

use crate::config::{LogConfig, LogFormat};
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the process's log subscriber; a second call changes nothing
/// (tests run several daemons in one process).
pub fn init(config: &LogConfig) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(directives),
        _ => EnvFilter::try_new(&config.level),
    }
    // `Config::validate` checked `log.level`; a bad RUST_LOG falls back.
    .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match config.format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
}

/// Whether `level` is a filter `init` accepts (for `Config::validate`).
pub fn valid_filter(level: &str) -> Result<(), String> {
    EnvFilter::try_new(level).map(|_| ()).map_err(|e| e.to_string())
}
