//! Held replies: a delayed request hands its reply to this thread and the worker goes on
//! serving other requests; the reply is sent when its time comes.
//!
//! One thread, a heap of deadlines under a mutex that is held only to push or pop. Boxing
//! the reply is the one allocation a delayed request makes, and only a delayed one.
//!
//! **A held reply never traps its caller.** Once the daemon has read a request, the kernel
//! waits for its reply uninterruptibly, unless the daemon answers FUSE's INTERRUPT; fuser
//! 0.18 answers every INTERRUPT ENOSYS itself (the kernel then sends no more), so a caller
//! of a slowed mount could be neither killed nor timed out. Instead, while a reply is held
//! longer than [`WATCH_AFTER`], this thread looks every [`WATCH_EVERY`] at the calling
//! thread's pending signals (`/proc/TID/status`): a signal it does not block (a `kill`, a
//! `timeout`, a Ctrl-C) has its held reply answered EINTR at once, as an INTERRUPT would.
//! [`Timer::release`] sends every held reply now (`chunkscope ctl MNT release`).

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest a reply is held: [`crate::faults::MAX_DELAY`] (longer rules are refused
/// when read; a modelled cost times `--time-scale` is cut here).
pub const MAX_HOLD: Duration = crate::faults::MAX_DELAY;

/// Held replies due sooner than this are sent when due, unwatched.
pub const WATCH_AFTER: Duration = Duration::from_millis(50);

/// How often the callers of longer-held replies are looked at.
pub const WATCH_EVERY: Duration = Duration::from_millis(20);

/// A held reply: sent when its time comes, or answered EINTR when its caller is interrupted.
pub trait Held: Send {
    /// Sends the reply.
    fn send(self: Box<Self>);
    /// Answers EINTR instead (the caller was interrupted).
    fn interrupt(self: Box<Self>);
}

/// A plain job (no caller to watch): run when due, interrupted or not.
struct Job<F>(F);

impl<F: FnOnce() + Send> Held for Job<F> {
    fn send(self: Box<Self>) {
        (self.0)()
    }
    fn interrupt(self: Box<Self>) {
        (self.0)()
    }
}

struct Entry {
    due: Instant,
    n: u64,
    /// The calling thread (0: none to watch).
    tid: u32,
    job: Box<dyn Held>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.n) == (o.due, o.n)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's top is the earliest deadline (then the earliest pushed).
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.due, o.n).cmp(&(self.due, self.n))
    }
}

#[derive(Default)]
struct Shared {
    heap: Mutex<BinaryHeap<Entry>>,
    cv: Condvar,
    stop: AtomicBool,
    /// Set by [`Timer::release`]: send everything held now.
    release: AtomicBool,
    /// Set by [`Timer::release_from_now`]: hold nothing any more.
    released: AtomicBool,
    pushed: AtomicU64,
    held: AtomicU64,
    interrupted: AtomicU64,
}

/// The timer thread; dropping it sends every held reply at once and joins the thread.
pub struct Timer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the timer has done: replies held now, held since the start, answered EINTR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Held now.
    pub held: u64,
    /// Held since the start.
    pub pushed: u64,
    /// Answered EINTR because their caller was interrupted.
    pub interrupted: u64,
}

impl Timer {
    /// Starts the timer thread.
    pub fn start() -> std::io::Result<Timer> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("held-replies".into())
            .spawn(move || run(&s))?;
        Ok(Timer {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `job` after `delay` (on the timer thread).
    pub fn after(&self, delay: Duration, job: impl FnOnce() + Send + 'static) {
        self.hold(delay, 0, Box::new(Job(job)))
    }

    /// Sends `reply` after `delay` (at most [`MAX_HOLD`]), or answers it EINTR as soon as
    /// thread `tid` (the caller; 0 for none) has a signal pending that it does not block.
    pub fn hold(&self, delay: Duration, tid: u32, reply: Box<dyn Held>) {
        let delay = if self.shared.released.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            delay
        };
        let n = self.shared.pushed.fetch_add(1, Ordering::Relaxed);
        self.shared.held.fetch_add(1, Ordering::Relaxed);
        let e = Entry {
            due: Instant::now() + delay.min(MAX_HOLD),
            n,
            tid,
            job: reply,
        };
        let mut heap = self.shared.heap.lock().unwrap_or_else(|p| p.into_inner());
        let earliest = heap.peek().is_none_or(|top| e.due < top.due);
        heap.push(e);
        drop(heap);
        if earliest {
            self.shared.cv.notify_one();
        }
    }

    /// Sends every reply held now, at once (they are answered as if their time had come).
    pub fn release(&self) {
        self.shared.release.store(true, Ordering::Release);
        let _guard = self.shared.heap.lock();
        self.shared.cv.notify_all();
    }

    /// Sends every reply held now at once, and every later one as soon as it is held: what
    /// a stop needs (a testbed unmounting the filesystem above a slow disk would otherwise
    /// wait on each of its writes at the disk's rate).
    pub fn release_from_now(&self) {
        self.shared.released.store(true, Ordering::Release);
        self.release();
    }

    /// What the timer has done so far.
    pub fn counts(&self) -> Counts {
        Counts {
            held: self.shared.held.load(Ordering::Relaxed),
            pushed: self.shared.pushed.load(Ordering::Relaxed),
            interrupted: self.shared.interrupted.load(Ordering::Relaxed),
        }
    }
}

fn run(s: &Shared) {
    let mut heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
    let mut watched = Instant::now();
    loop {
        let stop = s.stop.load(Ordering::Acquire);
        let now = Instant::now();
        // Released: everything held now is due now (what is pushed after waits its time).
        if s.release.swap(false, Ordering::AcqRel) {
            let all = std::mem::take(&mut *heap);
            drop(heap);
            for e in all.into_vec() {
                e.job.send();
                s.held.fetch_sub(1, Ordering::Relaxed);
            }
            heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
            continue;
        }
        match heap.peek() {
            Some(top) if stop || top.due <= now => {
                let e = heap.pop().expect("peeked");
                drop(heap);
                e.job.send();
                s.held.fetch_sub(1, Ordering::Relaxed);
                heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
            }
            Some(top) => {
                let wait = top.due - now;
                let watching = heap.iter().any(|e| e.tid != 0 && e.due > now + WATCH_AFTER);
                if watching && now.duration_since(watched) >= WATCH_EVERY {
                    drop(heap);
                    interrupt_signalled(s, now);
                    watched = now;
                    heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                let wait = if watching {
                    wait.min(WATCH_EVERY)
                } else {
                    wait
                };
                heap =
                    s.cv.wait_timeout(heap, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
            }
            None if stop => return,
            None => heap = s.cv.wait(heap).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// Answers EINTR, now, the long-held replies whose callers have a signal pending. The
/// callers are looked at without the heap's lock (workers push while /proc is read).
fn interrupt_signalled(s: &Shared, now: Instant) {
    let mut tids: Vec<u32> = {
        let heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
        heap.iter()
            .filter(|e| e.tid != 0 && e.due > now + WATCH_AFTER)
            .map(|e| e.tid)
            .collect()
    };
    tids.sort_unstable();
    tids.dedup();
    tids.retain(|&t| signal_pending(t));
    if tids.is_empty() {
        return;
    }
    let interrupted: Vec<Entry> = {
        let mut heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
        let (hit, kept): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut *heap)
            .into_vec()
            .into_iter()
            .partition(|e| tids.binary_search(&e.tid).is_ok());
        *heap = BinaryHeap::from(kept);
        hit
    };
    for e in interrupted {
        e.job.interrupt();
        s.held.fetch_sub(1, Ordering::Relaxed);
        s.interrupted.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether thread `tid` has a signal pending that it does not block (or is gone): the kernel
/// would have interrupted its request, had the daemon been able to answer INTERRUPT.
fn signal_pending(tid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true;
    };
    let mask = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (mask("SigPnd:") | mask("ShdPnd:")) & !mask("SigBlk:") != 0
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _guard = self.shared.heap.lock();
            self.shared.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn jobs_run_in_deadline_order_and_all_run_on_drop() {
        let t = Timer::start().unwrap();
        let (tx, rx) = mpsc::channel();
        for (i, ms) in [(0, 40u64), (1, 10), (2, 25)] {
            let tx = tx.clone();
            t.after(Duration::from_millis(ms), move || {
                let _ = tx.send(i);
            });
        }
        let order: Vec<i32> = (0..3).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(order, vec![1, 2, 0]);
        let tx2 = tx.clone();
        t.after(Duration::from_secs(3600), move || {
            let _ = tx2.send(9);
        });
        // The third job's own count may not have dropped yet: it runs, then is counted.
        let Counts { held, pushed, .. } = t.counts();
        assert_eq!(pushed, 4);
        assert!((1..=2).contains(&held), "{held}");
        drop(t);
        assert_eq!(rx.try_recv(), Ok(9), "a held job runs when the timer stops");
    }
}
