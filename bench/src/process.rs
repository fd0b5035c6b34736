//! Measuring a process from outside, as its user's monitoring would: the
//! CPU time of all its threads (utime + stime in `/proc/PID/stat`) sampled
//! against the wall clock, and its peak resident memory (`VmHWM`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a process's CPU time is read: its reading at an instant is
/// interpolated between the samples around it.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// Clock ticks per second of `/proc/PID/stat`.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// User + system CPU seconds of every thread of `pid`, `None` once it is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesized and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of the line are the 12th and 13th after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_second())
}

/// Peak resident memory of `pid` so far, bytes.
pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub fn unix_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Samples a process's CPU time on a thread of its own until dropped.
pub struct CpuSampler {
    samples: Arc<Mutex<Vec<(i64, f64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CpuSampler {
    pub fn start(pid: u32) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let Some(cpu) = cpu_seconds(pid) else { break };
                if let Ok(mut v) = s.lock() {
                    v.push((unix_ms(), cpu));
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        CpuSampler { samples, stop, thread: Some(thread) }
    }

    /// The process's CPU seconds at `at_ms` (Unix ms), interpolated between
    /// the samples around it; `None` if the samples do not cover it.
    pub fn at(&self, at_ms: i64) -> Option<f64> {
        let samples = self.samples.lock().ok()?;
        interpolate(&samples, at_ms)
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn interpolate(samples: &[(i64, f64)], at_ms: i64) -> Option<f64> {
    let after = samples.iter().position(|(t, _)| *t >= at_ms)?;
    let (t1, c1) = samples[after];
    if t1 == at_ms || after == 0 {
        return (t1 == at_ms).then_some(c1);
    }
    let (t0, c0) = samples[after - 1];
    Some(c0 + (c1 - c0) * (at_ms - t0) as f64 / (t1 - t0) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_between_samples_is_interpolated_and_outside_them_unknown() {
        let s = [(1_000, 1.0), (1_010, 1.5), (1_030, 1.5)];
        assert_eq!(interpolate(&s, 1_005), Some(1.25));
        assert_eq!(interpolate(&s, 1_010), Some(1.5));
        assert_eq!(interpolate(&s, 1_000), Some(1.0));
        assert_eq!(interpolate(&s, 999), None);
        assert_eq!(interpolate(&s, 1_031), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let pid = std::process::id();
        let before = cpu_seconds(pid).unwrap();
        let mut x = 0u64;
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(200) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = cpu_seconds(pid).unwrap();
        assert!(after - before >= 0.1, "{before} → {after}");
        assert!(peak_rss(pid).unwrap() > 1 << 20);
    }
}
