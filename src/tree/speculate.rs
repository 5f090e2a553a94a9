//! Counting on a second core the codes the tree is about to ask for.
//!
//! Contract: [`Speculator::submit`] queues a final code (staged, with every flag applied) for a
//! worker thread that lowers and counts it ([`crate::counters::count`]), newest first.
//! [`Speculator::take`] returns the worker's count of a submitted code, waiting while the
//! worker is counting it; a code the worker has not started is withdrawn (`None`) and the tree
//! counts it itself, so both cores count at once. Counting is a pure function of the code
//! (LLVM only: no Z3, whose contexts must stay on the tree's thread), so a tree is the same
//! whichever core counted; only the time differs. Wrong guesses cost the other core's time.
//! The worker ends when the speculator is dropped, after the count it is making.

use crate::counters::{count, Counters};
use crate::kernel::Kernel;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What the tree's thread and the worker share. A submitted code is known by its key: the code
/// the tree will ask to evaluate (before staging).
#[derive(Default)]
struct Shared {
    /// Submitted and not started, oldest first (the worker takes the newest).
    queue: Vec<(Kernel, Kernel)>,
    /// The code the worker is counting.
    running: Option<Kernel>,
    /// Counts made and not yet taken.
    done: HashMap<Kernel, Result<Counters, String>>,
    /// Set when the speculator is dropped: the worker stops.
    closed: bool,
}

type Link = Arc<(Mutex<Shared>, Condvar)>;

fn lock(link: &Link) -> MutexGuard<'_, Shared> {
    link.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// The worker, started at the first submission.
#[derive(Default)]
pub(super) struct Speculator {
    link: Option<Link>,
    /// Whether no worker could be started (every code is then counted where it is needed).
    unavailable: bool,
}

/// The worker's stack: lowering recurses through the code's statements, as on the main thread.
const WORKER_STACK_BYTES: usize = 64 << 20;

impl Speculator {
    /// Queue `code` (a final code, the tree's key `key`) for the worker.
    pub(super) fn submit(&mut self, key: Kernel, code: Kernel) {
        if self.unavailable {
            return;
        }
        if self.link.is_none() {
            let link: Link = Default::default();
            let theirs = link.clone();
            match std::thread::Builder::new().name("metafork-count".into()).stack_size(WORKER_STACK_BYTES).spawn(move || work(&theirs)) {
                Ok(_) => self.link = Some(link),
                Err(_) => {
                    self.unavailable = true;
                    return;
                }
            }
        }
        let Some(link) = &self.link else { return };
        let mut shared = lock(link);
        if shared.running.as_ref() == Some(&key) || shared.done.contains_key(&key) || shared.queue.iter().any(|(k, _)| *k == key) {
            return;
        }
        shared.queue.push((key, code));
        link.1.notify_all();
    }

    /// The worker's count of the code submitted as `key`, waiting while it is being made;
    /// `None` when the worker has not started it (it is withdrawn) or it was never submitted.
    pub(super) fn take(&mut self, key: &Kernel) -> Option<Result<Counters, String>> {
        let link = self.link.as_ref()?;
        let mut shared = lock(link);
        if let Some(i) = shared.queue.iter().position(|(k, _)| k == key) {
            shared.queue.remove(i);
            return None;
        }
        loop {
            if let Some(counted) = shared.done.remove(key) {
                return Some(counted);
            }
            if shared.running.as_ref() != Some(key) {
                return None;
            }
            shared = link.1.wait(shared).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Speculator {
    fn drop(&mut self) {
        if let Some(link) = &self.link {
            let mut shared = lock(link);
            shared.closed = true;
            shared.queue.clear();
            link.1.notify_all();
        }
    }
}

fn work(link: &Link) {
    let mut shared = lock(link);
    loop {
        if shared.closed {
            return;
        }
        let Some((key, code)) = shared.queue.pop() else {
            shared = link.1.wait(shared).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        shared.running = Some(key.clone());
        drop(shared);
        // A count that panics is left to the tree's thread, which counts the code again and
        // fails where and as it would have without the worker.
        let counted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| count(&code, &[])));
        shared = lock(link);
        shared.running = None;
        if let Ok(counted) = counted {
            shared.done.insert(key, counted);
        }
        link.1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernels() -> Vec<Kernel> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/vecadd.mf")).unwrap();
        let program = crate::frontend::check_source("vecadd.mf", &text).unwrap_or_else(|d| panic!("{}", d.render(false)));
        let f = &program.kernels[0];
        let plain = Kernel::from_schedule(f, &f.schedules[0]).unwrap();
        vec![plain.clone(), Kernel { cse: 2, ..plain.clone() }, Kernel { merged: true, ..plain }]
    }

    fn same(a: &Counters, b: &Counters) -> bool {
        format!("{:?}", (&a.registers, &a.shared_bytes, &a.threads_per_block)) == format!("{:?}", (&b.registers, &b.shared_bytes, &b.threads_per_block))
    }

    #[test]
    fn the_worker_counts_what_the_tree_would_and_withdraws_what_it_has_not_started() {
        let codes = kernels();
        let mut s = Speculator::default();
        let never = Kernel { cse: 1, ..codes[0].clone() };
        assert!(s.take(&never).is_none());
        for code in &codes {
            s.submit(code.clone(), code.clone());
        }
        // Submitting a key again queues nothing more.
        s.submit(codes[0].clone(), codes[0].clone());
        {
            let shared = lock(s.link.as_ref().unwrap());
            assert_eq!(shared.queue.len() + usize::from(shared.running.is_some()) + shared.done.len(), codes.len());
        }
        // Once the worker has started a code, that code is its to count.
        let started = std::time::Instant::now();
        while { let shared = lock(s.link.as_ref().unwrap()); shared.running.is_none() && shared.done.is_empty() } {
            assert!(started.elapsed().as_secs() < 60, "the worker never started");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let mut counted_by_worker = 0;
        for (i, code) in codes.iter().enumerate() {
            let here = count(code, &[]).unwrap();
            match s.take(code) {
                Some(theirs) => {
                    assert!(same(&theirs.unwrap(), &here), "code {i}");
                    counted_by_worker += 1;
                }
                None => {}
            }
            // Taken or withdrawn: it is not there a second time.
            assert!(s.take(code).is_none());
        }
        // What the worker started was waited for, never withdrawn.
        assert!(counted_by_worker >= 1);
        // Dropping the speculator ends its worker with work still queued.
        s.submit(never, codes[0].clone());
        drop(s);
    }
}
