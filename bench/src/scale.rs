//! `rankpulse-bench scale`: what a second instance in the same consumer
//! group adds.
//!
//! The topics hold the mix (filled by `rankpulse-bench kafka`, or here).
//! One `rankpulse run` process consumes all of it in a fresh group; then two
//! processes share another fresh group. Each is scraped every second; the
//! rate is taken over the window in which every instance of the run is
//! consuming (after the group handed each its partitions, before the
//! backlog runs out), so group joins and rebalances are left out.
//!
//! With `--cpu-limit`, each instance runs in a CPU cgroup of its own with
//! that quota, as a container's CPU limit would hold it (Kubernetes'
//! `resources.limits.cpu`). On a machine with fewer cores than the
//! instances and the broker need, that is what tells scale-out (each
//! instance bringing its own budget) from the instances fighting for the
//! same cores.

use crate::kafka::{BenchError, consumed, cpu_seconds_of, fill_topics, scrape_path};
use std::fmt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One scrape of every instance.
#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    /// Messages each instance consumed so far.
    consumed: Vec<u64>,
    /// CPU seconds each instance used so far.
    cpu: Vec<f64>,
    /// The machine's (busy, total) CPU seconds so far, from /proc/stat.
    machine: (f64, f64),
}

/// The machine's busy and total CPU seconds since boot (Linux; 0 elsewhere).
fn machine_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else { return (0.0, 0.0) };
    let ticks: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let total: f64 = ticks.iter().sum();
    // idle and iowait
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    ((total - idle) / 100.0, total / 100.0)
}

/// What the instances of one run did inside the measuring window.
#[derive(Debug, Clone)]
pub struct RunMeasure {
    pub instances: usize,
    pub window_seconds: f64,
    /// Messages per second of each instance over the window.
    pub rates: Vec<f64>,
    /// Cores each instance used over the window.
    pub cores: Vec<f64>,
    /// Share of the machine's CPU in use over the window (broker included).
    pub machine_busy: f64,
}

impl RunMeasure {
    pub fn total_rate(&self) -> f64 {
        self.rates.iter().sum()
    }

    /// Events per second per core the instances used together: where the
    /// instances share too few cores to each get one (this 2-core machine,
    /// broker included), what tells a shared bottleneck (the group, the
    /// broker, the partition split) from a lack of CPU.
    pub fn per_core(&self) -> f64 {
        self.total_rate() / self.cores.iter().sum::<f64>().max(1e-9)
    }
}

#[derive(Debug, Clone)]
pub struct ScaleReport {
    pub messages: u64,
    /// Each instance's CPU quota (cores), when one was set.
    pub cpu_limit: Option<f64>,
    pub one: RunMeasure,
    pub two: RunMeasure,
}

impl fmt::Display for ScaleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "mix: {} messages on the topics", self.messages)?;
        if let Some(cores) = self.cpu_limit {
            writeln!(f, "each instance in a CPU cgroup limited to {cores} cores")?;
        }
        for m in [&self.one, &self.two] {
            let each: Vec<String> =
                m.rates.iter().zip(&m.cores).map(|(r, c)| format!("{r:.0} events/s on {c:.2} cores")).collect();
            writeln!(
                f,
                "{} instance(s): {:.0} events/s over a {:.1} s window ({}); machine CPU {:.0}% busy",
                m.instances,
                m.total_rate(),
                m.window_seconds,
                each.join("; "),
                m.machine_busy * 100.0
            )?;
        }
        let added = self.two.total_rate() - self.one.total_rate();
        writeln!(
            f,
            "the second instance adds {added:.0} events/s: {:.2} of one instance's throughput",
            added / self.one.total_rate().max(1e-9)
        )?;
        write!(
            f,
            "per core used: one instance {:.0} events/s, two instances {:.0} ({:.2} of one); \
             a second instance on a core of its own would add about that share, the broker keeping up",
            self.one.per_core(),
            self.two.per_core(),
            self.two.per_core() / self.one.per_core().max(1e-9)
        )?;
        if self.cpu_limit.is_none() && self.two.machine_busy >= MACHINE_BOUND {
            write!(
                f,
                "\nnote: the machine was {:.0}% busy with two instances, so this measured its cores; \
                 --cpu-limit gives each instance a budget of its own, as separate hosts or containers would",
                self.two.machine_busy * 100.0
            )?;
        }
        Ok(())
    }
}

/// A `rankpulse run` child process with its /metrics address.
pub(crate) struct Instance {
    pub(crate) child: Child,
    pub(crate) http: std::net::SocketAddr,
    /// Held for its drop, after the child is gone (fields drop after `drop`
    /// below): a cgroup with tasks cannot be removed.
    _limit: Option<CpuCgroup>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The machine's busy share past which an unlimited run measured the
/// machine (the broker and the instances competing for its cores) rather
/// than the instances.
const MACHINE_BOUND: f64 = 0.75;

/// The scheduler's quota period: CPU time is granted per 100 ms.
const CFS_PERIOD_US: u64 = 100_000;

/// A CPU cgroup with a quota of `cores` (Linux, cgroup v1 or v2; creating
/// one needs root), removed when dropped.
#[derive(Debug)]
struct CpuCgroup {
    dir: std::path::PathBuf,
}

impl CpuCgroup {
    fn create(name: &str, cores: f64) -> Result<CpuCgroup, BenchError> {
        let quota_us = (cores * CFS_PERIOD_US as f64).round() as u64;
        let fail = |what: String, e: std::io::Error| BenchError::CpuLimit(format!("{what}: {e}"));
        let write = |path: std::path::PathBuf, value: String| {
            std::fs::write(&path, &value).map_err(|e| fail(format!("writing {value:?} to {}", path.display()), e))
        };
        let v1 = std::path::Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists();
        let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let dir = if v1 {
            std::path::Path::new("/sys/fs/cgroup/cpu").join(name)
        } else if v2 {
            std::path::Path::new("/sys/fs/cgroup").join(name)
        } else {
            return Err(BenchError::CpuLimit("no cgroup CPU controller under /sys/fs/cgroup".into()));
        };
        std::fs::create_dir(&dir).map_err(|e| fail(format!("creating {}", dir.display()), e))?;
        let group = CpuCgroup { dir };
        let set = if v1 {
            write(group.dir.join("cpu.cfs_period_us"), CFS_PERIOD_US.to_string())
                .and_then(|()| write(group.dir.join("cpu.cfs_quota_us"), quota_us.to_string()))
        } else {
            // The root's children get the cpu controller only once it is
            // enabled for them.
            let enabled = std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control").unwrap_or_default();
            let enable = if enabled.split_whitespace().any(|c| c == "cpu") {
                Ok(())
            } else {
                write("/sys/fs/cgroup/cgroup.subtree_control".into(), "+cpu".into())
            };
            enable.and_then(|()| write(group.dir.join("cpu.max"), format!("{quota_us} {CFS_PERIOD_US}")))
        };
        set.map(|()| group)
    }

    /// Moves process `pid`, all its threads, into the group.
    fn admit(&self, pid: u32) -> Result<(), BenchError> {
        let procs = self.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .map_err(|e| BenchError::CpuLimit(format!("adding {pid} to {}: {e}", procs.display())))
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn free_addr() -> Result<std::net::SocketAddr, BenchError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts one instance, held to `cpu_limit` cores (in a cgroup of that
/// name) when given, with `env` on top of this process's environment. It
/// is moved into its cgroup right after the spawn, before it has joined
/// the group: the window measured starts only once every instance consumes.
pub(crate) fn start(
    brokers: &str,
    group: &str,
    cpu_limit: Option<(f64, String)>,
    env: &[(&str, &str)],
) -> Result<Instance, BenchError> {
    let limit = cpu_limit.map(|(cores, name)| CpuCgroup::create(&name, cores)).transpose()?;
    let http = free_addr()?;
    let child = Command::new(crate::rankpulse_exe()?)
        .arg("run")
        .envs(env.iter().copied())
        .env("RANKPULSE__KAFKA__BROKERS", brokers)
        .env("RANKPULSE__KAFKA__GROUP_ID", group)
        .env("RANKPULSE__HTTP__LISTEN", http.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let admitted = limit.as_ref().map(|l| l.admit(child.id())).transpose();
    let instance = Instance { child, http, _limit: limit };
    admitted?;
    Ok(instance)
}

/// Runs `n` instances in a fresh group until they consumed `total`
/// messages together, and measures them over the window in which all of
/// them consume.
async fn measure(brokers: &str, n: usize, total: u64, cpu_limit: Option<f64>) -> Result<RunMeasure, BenchError> {
    let group = format!("rankpulse-bench-scale{n}-{}", std::process::id());
    let instances: Vec<Instance> = (0..n)
        .map(|i| start(brokers, &group, cpu_limit.map(|cores| (cores, format!("{group}-{i}"))), &[]))
        .collect::<Result<_, _>>()?;
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut samples: Vec<Sample> = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut sample = Sample { at: Instant::now(), consumed: Vec::new(), cpu: Vec::new(), machine: machine_cpu() };
        for i in &instances {
            let body = scrape_path(i.http, "/metrics").await.unwrap_or_default();
            sample.consumed.push(consumed(&body));
            sample.cpu.push(cpu_seconds_of(i.child.id()));
        }
        let done = sample.consumed.iter().sum::<u64>() >= total;
        samples.push(sample);
        if done {
            break;
        }
        if Instant::now() > deadline {
            let done = samples.last().map_or(0, |s| s.consumed.iter().sum());
            return Err(BenchError::Timeout { what: "the scale run", secs: 900, done, total });
        }
    }
    drop(instances);
    window(&samples, n, total)
}

/// The rates between the first sample in which every instance had consumed
/// something and the last one before the backlog ran out.
fn window(samples: &[Sample], n: usize, total: u64) -> Result<RunMeasure, BenchError> {
    let first = samples.iter().position(|s| s.consumed.iter().all(|&c| c > 0));
    let last = samples.iter().rposition(|s| s.consumed.iter().sum::<u64>() < total);
    let (Some(a), Some(b)) = (first, last) else {
        return Err(BenchError::Window("no window with every instance consuming: use more --lists".into()));
    };
    if b < a + 2 {
        return Err(BenchError::Window(format!(
            "the window with every instance consuming is {} s: use more --lists",
            b.saturating_sub(a)
        )));
    }
    let (a, b) = (&samples[a], &samples[b]);
    let seconds = b.at.duration_since(a.at).as_secs_f64();
    Ok(RunMeasure {
        instances: n,
        window_seconds: seconds,
        rates: (0..n).map(|i| (b.consumed[i] - a.consumed[i]) as f64 / seconds).collect(),
        cores: (0..n).map(|i| (b.cpu[i] - a.cpu[i]) / seconds).collect(),
        machine_busy: (b.machine.0 - a.machine.0) / (b.machine.1 - a.machine.1).max(1e-9),
    })
}

/// Fills (unless `fill` is false), then measures one instance, then two,
/// each held to `cpu_limit` cores when given.
pub async fn run(
    brokers: &str,
    lists: usize,
    seed: u64,
    fill: bool,
    cpu_limit: Option<f64>,
) -> Result<ScaleReport, BenchError> {
    let (total, _, _) = fill_topics(brokers, lists, seed, fill).await?;
    let one = measure(brokers, 1, total, cpu_limit).await?;
    let two = measure(brokers, 2, total, cpu_limit).await?;
    Ok(ScaleReport { messages: total, cpu_limit, one, two })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(consumed: &[[u64; 2]]) -> Vec<Sample> {
        let t0 = Instant::now();
        consumed
            .iter()
            .enumerate()
            .map(|(i, c)| Sample {
                at: t0 + Duration::from_secs(i as u64),
                consumed: c.to_vec(),
                cpu: vec![i as f64 * 0.5, i as f64 * 0.25],
                machine: (i as f64 * 1.5, i as f64 * 2.0),
            })
            .collect()
    }

    #[test]
    fn the_window_starts_when_every_instance_consumes_and_ends_before_the_backlog_does() {
        // The second instance gets partitions at t=2; the backlog (1,000)
        // runs out between t=5 and t=6.
        let s = samples(&[[0, 0], [100, 0], [200, 10], [300, 110], [400, 210], [450, 260], [600, 400]]);
        let m = window(&s, 2, 1_000).unwrap();
        assert_eq!(m.window_seconds, 3.0);
        assert_eq!(m.rates, [(450.0 - 200.0) / 3.0, (260.0 - 10.0) / 3.0]);
        assert_eq!(m.cores, [0.5, 0.25]);
        assert_eq!(m.machine_busy, 0.75);
        // 166.7 events/s over 0.75 cores.
        assert!((m.per_core() - (250.0 + 250.0) / 3.0 / 0.75).abs() < 1e-9);
    }

    #[test]
    fn a_window_too_short_to_measure_is_an_error() {
        let s = samples(&[[0, 0], [100, 5], [200, 900], [300, 1_000]]);
        assert!(matches!(window(&s, 2, 1_000), Err(BenchError::Window(_))));
        let never = samples(&[[0, 0], [500, 0], [1_000, 0]]);
        assert!(matches!(window(&never, 2, 1_000), Err(BenchError::Window(_))));
    }

    #[test]
    fn a_run_that_kept_the_machine_busy_says_it_measured_the_machine() {
        let run = |instances: usize, busy: f64| RunMeasure {
            instances,
            window_seconds: 10.0,
            rates: vec![100.0; instances],
            cores: vec![1.0; instances],
            machine_busy: busy,
        };
        let report = |limit: Option<f64>, busy: f64| {
            ScaleReport { messages: 1_000, cpu_limit: limit, one: run(1, 0.5), two: run(2, busy) }.to_string()
        };
        assert!(report(None, 0.9).contains("note: the machine was 90% busy with two instances"));
        assert!(!report(None, 0.6).contains("note:"), "the machine had room");
        let limited = report(Some(0.5), 0.9);
        assert!(!limited.contains("note:"), "each instance had its budget");
        assert!(limited.contains("limited to 0.5 cores"));
        assert!(limited.contains("adds 100 events/s: 1.00 of one instance's throughput"));
    }

    #[test]
    #[ignore = "CPU-cgroup tier: needs root and a cgroup CPU controller, run with --ignored (.ci/run does where one exists)"]
    fn an_instance_in_a_cpu_cgroup_gets_no_more_than_its_quota() {
        let group = CpuCgroup::create(&format!("rankpulse-test-{}", std::process::id()), 0.2)
            .unwrap_or_else(|e| panic!("the CPU-cgroup tier needs root and a cgroup CPU controller: {e}"));
        // A busy loop would take a whole core without the quota.
        let mut child = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        let admitted = group.admit(child.id());
        let (cpu0, t0) = (cpu_seconds_of(child.id()), Instant::now());
        std::thread::sleep(Duration::from_millis(1500));
        let cores = (cpu_seconds_of(child.id()) - cpu0) / t0.elapsed().as_secs_f64();
        let _ = child.kill();
        let _ = child.wait();
        let dir = group.dir.clone();
        drop(group);
        admitted.unwrap();
        assert!(!dir.exists(), "the cgroup is removed once its process is gone");
        // 0.2 cores, plus at most one 100 ms period granted at the start.
        assert!(cores > 0.05 && cores < 0.3, "{cores:.2} cores used under a 0.2-core quota");
    }
}
