//! Where a flood's CPU went, per request: the server's process, the store's
//! own processes and threads (PostgreSQL's backends, the NATS server, the
//! SQLite store's writer of events), the load generator, and the share of
//! the machine left idle. Read from Linux's `/proc` before and after each
//! run, so that every run of the bench says where its time went (elsewhere
//! each figure is left out).
//!
//! A store that is slower than the memory store is slower either because
//! something did more work per request (the server, the database) or
//! because the machine waited (idle: a disk flush, a round trip); these
//! columns tell the two apart without a profiler.

use std::process::Command;

/// The store's own processes, by the name the kernel gives them
/// (`/proc/PID/comm`): their CPU is counted for every target (for the
/// memory store it shows what the idle database does meanwhile).
const STORE_PROCESSES: [&str; 2] = ["postgres", "nats-server"];

/// The store's own threads in the server's process (the SQLite store's
/// writer of events and its checkpointer), by name: counted as the
/// store's, not the server's.
const STORE_THREADS: [&str; 2] = ["sqlite-events", "sqlite-checkpoint"];

/// Cumulative CPU times at one instant, in clock ticks.
#[derive(Clone, Copy, Debug)]
pub struct CpuSample {
    /// The server's process, but for its threads named in
    /// [`STORE_THREADS`].
    server: u64,
    /// Every process named in [`STORE_PROCESSES`], and the server's threads
    /// named in [`STORE_THREADS`].
    store: u64,
    /// This program and the children it has waited for (`wrk`): the load
    /// generator.
    generator: u64,
    /// The whole machine idle (idle and waiting for I/O).
    idle: u64,
    /// The whole machine, every state.
    total: u64,
}

/// CPU per request of one run, in microseconds, and the idle share.
#[derive(Clone, Copy, Debug)]
pub struct CpuPerRequest {
    /// The server's process, but for the store's threads in it.
    pub server_us: f64,
    /// The store's own processes and threads.
    pub store_us: f64,
    /// The load generator.
    pub generator_us: f64,
    /// The machine idle, as a share of all its CPU time (0 to 1).
    pub idle_share: f64,
}

impl CpuSample {
    /// The CPU times now, with `server` the server's process id; `None`
    /// where `/proc` cannot be read (not Linux).
    pub fn now(server: u32) -> Option<Self> {
        // Asked once, before any sample counts it: `getconf` is a child
        // of this program, and its time would count as the generator's.
        ticks_per_second();
        let (idle, total) = machine()?;
        let store_threads = store_thread_ticks(server);
        Some(Self {
            server: process_ticks(server, false)?.saturating_sub(store_threads),
            store: store_ticks() + store_threads,
            generator: process_ticks(std::process::id(), true)?,
            idle,
            total,
        })
    }

    /// The CPU per request between `self` and `later`, `requests` having
    /// been answered meanwhile.
    pub fn per_request(&self, later: &Self, requests: f64) -> CpuPerRequest {
        let micros = |before: u64, after: u64| {
            after.saturating_sub(before) as f64 * 1e6 / ticks_per_second() / requests.max(1.0)
        };
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        CpuPerRequest {
            server_us: micros(self.server, later.server),
            store_us: micros(self.store, later.store),
            generator_us: micros(self.generator, later.generator),
            idle_share: later.idle.saturating_sub(self.idle) as f64 / total,
        }
    }
}

/// User and system time of process `pid` (`/proc/PID/stat` fields 14 and
/// 15), with its waited-for children's (16 and 17) if `children`.
fn process_ticks(pid: u32, children: bool) -> Option<u64> {
    stat_ticks(&format!("/proc/{pid}"), children)
}

/// The CPU time of the threads of process `pid` named in [`STORE_THREADS`].
fn store_thread_ticks(pid: u32) -> u64 {
    let tasks = format!("/proc/{pid}/task");
    let Ok(entries) = std::fs::read_dir(&tasks) else {
        return 0;
    };
    entries
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|task| {
            std::fs::read_to_string(task.join("comm"))
                .is_ok_and(|name| STORE_THREADS.contains(&name.trim()))
        })
        .filter_map(|task| stat_ticks(task.to_str()?, false))
        .sum()
}

/// User and system time from the `stat` file under `dir` (a process's or
/// a thread's), with the waited-for children's if `children`.
fn stat_ticks(dir: &str, children: bool) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    // The command name, field 2, is in parentheses and may hold spaces: the
    // fields are counted from the last closing one.
    let fields: Vec<u64> = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    let own = fields.first()? + fields.get(1)?;
    Some(if children {
        own + fields.get(2)? + fields.get(3)?
    } else {
        own
    })
}

/// The CPU time of every process named in [`STORE_PROCESSES`].
fn store_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| STORE_PROCESSES.contains(&name.trim()))
        })
        .filter_map(|pid| process_ticks(pid, false))
        .sum()
}

/// The machine's idle and total CPU time (`/proc/stat`, line `cpu`).
fn machine() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let times: Vec<u64> = stat
        .lines()
        .find(|line| line.starts_with("cpu "))?
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    // user, nice, system, idle, iowait, ...
    let idle = times.get(3)? + times.get(4)?;
    Some((idle, times.iter().sum()))
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on every
/// common Linux).
fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}
