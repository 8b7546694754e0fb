//! Held replies: a delayed request hands its reply to this thread and the worker goes on
//! serving other requests; the reply is sent when its time comes.
//!
//! One thread, a heap of deadlines under a mutex that is held only to push or pop. Boxing
//! the reply is the one allocation a delayed request makes, and only a delayed one.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send>;

struct Entry {
    due: Instant,
    n: u64,
    job: Job,
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
    pushed: AtomicU64,
    held: AtomicU64,
}

/// The timer thread; dropping it sends every held reply at once and joins the thread.
pub struct Timer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
        let n = self.shared.pushed.fetch_add(1, Ordering::Relaxed);
        self.shared.held.fetch_add(1, Ordering::Relaxed);
        let e = Entry {
            due: Instant::now() + delay,
            n,
            job: Box::new(job),
        };
        let mut heap = self.shared.heap.lock().unwrap_or_else(|p| p.into_inner());
        let earliest = heap.peek().is_none_or(|top| e.due < top.due);
        heap.push(e);
        drop(heap);
        if earliest {
            self.shared.cv.notify_one();
        }
    }

    /// Replies held now, and replies held since the start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.held.load(Ordering::Relaxed),
            self.shared.pushed.load(Ordering::Relaxed),
        )
    }
}

fn run(s: &Shared) {
    let mut heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let stop = s.stop.load(Ordering::Acquire);
        let now = Instant::now();
        match heap.peek() {
            Some(top) if stop || top.due <= now => {
                let e = heap.pop().expect("peeked");
                drop(heap);
                (e.job)();
                s.held.fetch_sub(1, Ordering::Relaxed);
                heap = s.heap.lock().unwrap_or_else(|p| p.into_inner());
            }
            Some(top) => {
                let wait = top.due - now;
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
        let (held, pushed) = t.counts();
        assert_eq!(pushed, 4);
        assert!((1..=2).contains(&held), "{held}");
        drop(t);
        assert_eq!(rx.try_recv(), Ok(9), "a held job runs when the timer stops");
    }
}
