//! `[log]`: how the daemon's own log lines are filtered and written
//! (`crate::logging`).

use serde::{Deserialize, Serialize};

/// How the daemon logs (to stderr).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter: a level (`error`, `warn`, `info`, `debug`,
    /// `trace`) or per-module directives (`info,rankpulse::daemon=debug`).
    /// `RUST_LOG`, when set, takes precedence.
    pub level: String,
    /// `text`, one human-readable line per event, or `json`, one JSON
    /// object per line for a log pipeline.
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into(), format: LogFormat::Text }
    }
}
