//! `rankpulse-bench`: benchmarks of rankpulse, kept out of the product.
//! See docs/performance.md for the figures and the commands that
//! reproduce them.
//!
//! - [`shapes`]: `rankpulse run` against a bare consumer ([`bare`]) on
//!   three traffic shapes ([`traffic`]), whole processes measured from
//!   outside ([`process`]).
//! - [`engine`]: the pipeline alone on one core, memory per open list, a
//!   hot key.
//! - [`kafka`]: the daemon in this process beside a bare consumer, and
//!   freshness under a paced production; [`scale`]: one instance, then
//!   two; [`loop_gap`]: how long the consumer loop keeps messages waiting.
//! - [`simulate`]: days of event-time traffic for the end-to-end alert
//!   simulations (bench/scripts/alert_backfill.py).
//! - [`state`]: what a checkpoint costs to write and restore, in Kafka and
//!   in a directory.

pub mod bare;
pub mod engine;
pub mod kafka;
pub mod loop_gap;
pub mod process;
pub mod scale;
pub mod shapes;
pub mod simulate;
pub mod state;
pub mod traffic;

/// The `rankpulse` binary the process benchmarks start: `$RANKPULSE_BIN`,
/// else the one beside this executable (a workspace build puts both in
/// `target/<profile>`).
pub fn rankpulse_exe() -> std::io::Result<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("RANKPULSE_BIN") {
        return Ok(path.into());
    }
    let mut exe = std::env::current_exe()?;
    // A test binary lives in target/<profile>/deps.
    if exe.parent().is_some_and(|p| p.ends_with("deps")) {
        exe.pop();
    }
    Ok(exe.with_file_name("rankpulse"))
}
