//! A process-wide time budget. Once its deadline has passed, every solver query answers
//! `Unknown(`[`REASON`]`)` at once (never sat or unsat), and long loops that ask
//! [`expired`] stop, so a phase that would run for too long ends with a verdict ("unverified:
//! budget") instead of a hang. No deadline is set unless a caller sets one (the command line
//! does, from `--time-limit`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The reason of an `Unknown` answer given because the budget is spent.
pub const REASON: &str = "time budget spent";

/// Nanoseconds after [`origin`] at which the budget ends; `u64::MAX`: no deadline.
static DEADLINE_NS: AtomicU64 = AtomicU64::new(u64::MAX);

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Spend at most `limit` from now on (`None`: no limit).
pub fn set(limit: Option<Duration>) {
    let ns = limit.map_or(u64::MAX, |l| (origin().elapsed() + l).as_nanos().min(u128::from(u64::MAX - 1)) as u64);
    DEADLINE_NS.store(ns, Ordering::Relaxed);
}

/// Whether the deadline has passed.
pub fn expired() -> bool {
    let ns = DEADLINE_NS.load(Ordering::Relaxed);
    ns != u64::MAX && origin().elapsed().as_nanos() >= u128::from(ns)
}

/// The time left, `None` without a deadline.
pub fn remaining() -> Option<Duration> {
    let ns = DEADLINE_NS.load(Ordering::Relaxed);
    (ns != u64::MAX).then(|| Duration::from_nanos(ns).saturating_sub(origin().elapsed()))
}
