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
    // `Config::validate` checked `log.level`; a RUST_LOG that is not a
    // filter falls back to it, and says so once the subscriber is up.
    let mut refused = None;
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives).ok().or_else(|| {
            refused = Some(directives);
            None
        }),
        _ => None,
    }
    .or_else(|| EnvFilter::try_new(&config.level).ok())
    .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match config.format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
    if let (Ok(()), Some(directives)) = (installed, refused) {
        tracing::warn!(rust_log = %directives, level = %config.level, "RUST_LOG is not a log filter; log.level applies");
    }
}

/// Whether `level` is a filter `init` accepts (for `Config::validate`).
/// An empty filter parses, as "errors only", which nobody means by it.
pub fn valid_filter(level: &str) -> Result<(), String> {
    if level.trim().is_empty() {
        return Err("empty (for errors only, write \"error\")".into());
    }
    EnvFilter::try_new(level).map(|_| ()).map_err(|e| e.to_string())
}
