//! A persistent thread pool for many small operations per token.
//!
//! `run` hands one closure to every thread (the caller is thread 0) and returns when all
//! have finished. Work is split by the closure itself, by output rows or columns, so the
//! pool never changes a reduction order.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Job = dyn Fn(usize, usize) + Sync;

struct State {
    generation: u64,
    /// Erased-lifetime pointer to the caller's closure; valid while `remaining > 0`.
    job: Option<*const Job>,
    remaining: usize,
    panicked: bool,
    shutdown: bool,
}

// SAFETY: the raw job pointer is only dereferenced while `run` keeps the closure alive.
unsafe impl Send for State {}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
}

pub struct ThreadPool {
    n_threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    /// A pool of `n_threads` threads in all, the caller included (at least 1).
    pub fn new(n_threads: usize) -> Self {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                job: None,
                remaining: 0,
                panicked: false,
                shutdown: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let workers = (1..n_threads)
            .map(|index| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("tandem-worker-{index}"))
                    .spawn(move || worker(shared, index, n_threads))
                    .expect("spawning a worker thread")
            })
            .collect();
        ThreadPool {
            n_threads,
            shared,
            workers,
        }
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Calls `f(thread_index, n_threads)` once on every thread and waits for all.
    /// A panic in any thread is re-raised here after all have stopped.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        if self.n_threads == 1 {
            f(0, 1);
            return;
        }
        {
            let mut s = self.shared.state.lock().unwrap();
            // SAFETY: the pointer's lifetime is erased; we wait below until every worker
            // is done with it before returning, so it never outlives `f`.
            let short: *const (dyn Fn(usize, usize) + Sync + '_) = f;
            let ptr: *const Job = unsafe { std::mem::transmute(short) };
            s.job = Some(ptr);
            s.remaining = self.n_threads - 1;
            s.panicked = false;
            s.generation += 1;
            self.shared.work.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0, self.n_threads)));
        let mut s = self.shared.state.lock().unwrap();
        while s.remaining > 0 {
            s = self.shared.done.wait(s).unwrap();
        }
        s.job = None;
        let theirs = s.panicked;
        drop(s);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        assert!(!theirs, "a worker thread panicked");
    }

    /// Splits `0..n` into one contiguous range per thread and calls `f(range)` for each
    /// non-empty one.
    pub fn for_ranges(&self, n: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        self.run(&|t, nt| {
            let r = split_range(n, t, nt);
            if !r.is_empty() {
                f(r)
            }
        });
    }
}

/// The `t`-th of `nt` near-equal contiguous parts of `0..n`.
pub fn split_range(n: usize, t: usize, nt: usize) -> std::ops::Range<usize> {
    let base = n / nt;
    let extra = n % nt;
    let start = t * base + t.min(extra);
    start..start + base + usize::from(t < extra)
}

fn worker(shared: Arc<Shared>, index: usize, n_threads: usize) {
    let mut seen = 0u64;
    loop {
        let job = {
            let mut s = shared.state.lock().unwrap();
            while s.generation == seen && !s.shutdown {
                s = shared.work.wait(s).unwrap();
            }
            if s.shutdown {
                return;
            }
            seen = s.generation;
            s.job.expect("a job accompanies every generation")
        };
        // SAFETY: `run` keeps the closure alive until `remaining` reaches zero.
        let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(index, n_threads) }));
        let mut s = shared.state.lock().unwrap();
        s.panicked |= result.is_err();
        s.remaining -= 1;
        if s.remaining == 0 {
            shared.done.notify_one();
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.state.lock().unwrap().shutdown = true;
        self.shared.work.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_thread_runs_once_per_call() {
        let pool = ThreadPool::new(3);
        let count = AtomicUsize::new(0);
        for _ in 0..1000 {
            pool.run(&|_, _| {
                count.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(count.load(Ordering::Relaxed), 3000);
    }

    #[test]
    fn ranges_cover_everything_once() {
        for n in 0..50 {
            for nt in 1..5 {
                let mut covered = vec![0; n];
                for t in 0..nt {
                    for i in split_range(n, t, nt) {
                        covered[i] += 1;
                    }
                }
                assert!(covered.iter().all(|&c| c == 1));
            }
        }
    }

    #[test]
    fn worker_panic_reaches_the_caller() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(&|t, _| assert_ne!(t, 1))));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
