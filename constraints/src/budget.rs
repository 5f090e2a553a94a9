//! A process-wide time budget. Once its deadline has passed, every solver query answers
//! `Unknown(`[`REASON`]`)` at once (never sat or unsat), and long loops that ask
//! [`expired`] stop, so a phase that would run for too long ends with a verdict ("unverified:
//! budget") instead of a hang. No deadline is set unless a caller sets one (the command line
//! does, from `--time-limit`). A piece of work may get a share of what is left
//! ([`with_share`]): on its thread the budget then ends at the share's end, or sooner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// Set by [`interrupt`]: the user asked the process to stop (Ctrl-C, SIGTERM).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Spend at most `limit` from now on (`None`: no limit). Once [`interrupt`]ed, the budget
/// stays spent.
pub fn set(limit: Option<Duration>) {
    let ns = limit.map_or(u64::MAX, |l| (origin().elapsed() + l).as_nanos().min(u128::from(u64::MAX - 1)) as u64);
    DEADLINE_NS.store(if interrupted() { 0 } else { ns }, Ordering::Relaxed);
}

/// Spend the budget now, because the user asked the process to stop: every query then answers
/// unknown and every loop that asks [`expired`] ends, and [`interrupted`] tells the caller
/// not to write what it made. Async-signal-safe (two atomic stores): a signal handler may
/// call it.
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
    DEADLINE_NS.store(0, Ordering::SeqCst);
}

/// Whether [`interrupt`] was called.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

thread_local! {
    /// Nanoseconds after [`origin`] at which this thread's share ends; `u64::MAX`: none.
    static SHARE_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

/// Whether the deadline, or this thread's share of the budget, has passed.
pub fn expired() -> bool {
    let ns = DEADLINE_NS.load(Ordering::Relaxed).min(SHARE_NS.with(|s| s.get()));
    ns != u64::MAX && origin().elapsed().as_nanos() >= u128::from(ns)
}

/// Runs `work` with this thread's budget ending `share` from now at the latest (the process's
/// deadline still holds): one piece of work among many (a leaf's checks) that must not spend
/// what the others need. The thread's earlier share is restored after, even on a panic.
pub fn with_share<R>(share: Duration, work: impl FnOnce() -> R) -> R {
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            SHARE_NS.with(|s| s.set(self.0));
        }
    }
    let end = (origin().elapsed() + share).as_nanos().min(u128::from(u64::MAX - 1)) as u64;
    let _restore = Restore(SHARE_NS.with(|s| s.replace(end.min(s.get()))));
    work()
}

/// The time left, `None` without a deadline.
pub fn remaining() -> Option<Duration> {
    let ns = DEADLINE_NS.load(Ordering::Relaxed);
    (ns != u64::MAX).then(|| Duration::from_nanos(ns).saturating_sub(origin().elapsed()))
}
