//! The resident memory of `MemoryRateLimiter` holding one million distinct
//! leads within a window: what a flood of conversions, each with a new
//! contact e-mail, costs the limiter of one instance (README, "Security").
//!
//! Run with `cargo bench --bench limiter_memory` (a release build, on the
//! service's allocator, mimalloc). It charges `LIMITER_LEADS` leads
//! (default 1,000,000) as the event routes do, one charge per lead under
//! keys of the same form (`lead:<account>:<32 hex digits>`), within one
//! window of the default lead limit (120 per 24 hours), then prints the
//! growth of the process's resident memory (`VmRSS`) and of its peak
//! (`VmHWM`), read from `/proc/self/status` (Linux only). Exits with 1 if
//! either grew by more than 64 MB, the bound the README states.

use std::process::ExitCode;
use std::time::Instant;

use conversion_gateway::{Admission, Charge, Limit, LimitKind, MemoryRateLimiter, RateLimiter};
use time::{Duration, OffsetDateTime};

/// The service's allocator, so that the figure is the release
/// server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The bound the README states for a million leads.
const BOUND_MB: f64 = 64.0;

/// A field of `/proc/self/status` in kB (`VmRSS`, `VmHWM`).
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[allow(clippy::cast_precision_loss)] // kilobytes of one process
fn megabytes(kb: u64) -> f64 {
    kb as f64 / 1000.0
}

fn main() -> ExitCode {
    let leads: u64 = std::env::var("LIMITER_LEADS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let limiter = MemoryRateLimiter::new();
    let limit = Limit::new(120, Duration::hours(24));
    let account = "0196a4c2e1f87d3b9c0a5e6f7a8b9c0d";
    let start = OffsetDateTime::now_utc();
    let (Some(rss_before), Some(peak_before)) = (status_kb("VmRSS"), status_kb("VmHWM")) else {
        eprintln!("limiter_memory: no /proc/self/status (Linux only)");
        return ExitCode::FAILURE;
    };
    let timer = Instant::now();
    runtime.block_on(async {
        for lead in 0..leads {
            // Spread like hashes, as the keyed hash of each e-mail is.
            let hash = u128::from(lead).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
            let charge = Charge {
                kind: LimitKind::Lead,
                limit,
                key: format!("lead:{account}:{hash:032x}"),
                subject: format!("the contact lead{lead}@example.com"),
                cost: 1,
            };
            // Within one window: a millisecond apart at most.
            let now = start + Duration::nanoseconds(i64::try_from(lead).unwrap_or(0));
            let admitted = limiter.charge(std::slice::from_ref(&charge), now).await;
            assert_eq!(admitted.ok(), Some(Admission::Admitted), "lead {lead}");
        }
    });
    let elapsed = timer.elapsed();
    let rss = status_kb("VmRSS").unwrap_or(0).saturating_sub(rss_before);
    let peak = status_kb("VmHWM").unwrap_or(0).saturating_sub(peak_before);
    println!(
        "limiter_memory: {leads} distinct leads, {} counters held: resident +{:.1} MB, peak +{:.1} MB ({:.0} ns a charge)",
        limiter.len(),
        megabytes(rss),
        megabytes(peak),
        elapsed.as_secs_f64() * 1e9 / leads.max(1) as f64,
    );
    if leads >= 1_000_000 && megabytes(rss.max(peak)) > BOUND_MB {
        eprintln!("limiter_memory: more than {BOUND_MB} MB");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
