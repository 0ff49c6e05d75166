//! A persistent thread pool for many small operations per token.
//!
//! `run` hands one closure to every thread (the caller is thread 0) and returns when all
//! have finished. Work is split by the closure itself, by output rows or columns, so the
//! pool never changes a reduction order.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Job = dyn Fn(usize, usize) + Sync;

/// Spins before a waiting thread parks: long enough to bridge the gap between the many
/// small operations of one token, short enough not to burn a core when idle.
const SPINS: u32 = 200_000;

struct Shared {
    /// Bumped once per `run`; workers start the job when they see a new value.
    generation: AtomicU64,
    /// The current job, written before `generation` is bumped (Release) and read after
    /// it is seen (Acquire). Its lifetime is erased; `run` outlives every use.
    job: UnsafeCell<Option<*const Job>>,
    /// Workers still running the current job.
    remaining: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Set by `rest`: waiting workers park at once instead of spinning; cleared by `run`.
    resting: AtomicBool,
    /// Workers parked on `wake`, so `run` knows to notify.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is only written by `run` while no worker reads it (all finished the
// previous generation) and read by workers only between the bump and their decrement.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

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
            generation: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            resting: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
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
        let sh = &*self.shared;
        let short: *const (dyn Fn(usize, usize) + Sync + '_) = f;
        // SAFETY: the lifetime is erased; we wait below until every worker is done with
        // the pointer before returning, so it never outlives `f`. No worker reads `job`
        // now: all finished the previous generation.
        unsafe {
            *sh.job.get() = Some(std::mem::transmute::<
                *const (dyn Fn(usize, usize) + Sync + '_),
                *const Job,
            >(short))
        };
        sh.panicked.store(false, Ordering::Relaxed);
        sh.resting.store(false, Ordering::Relaxed);
        sh.remaining.store(self.n_threads - 1, Ordering::Relaxed);
        sh.generation.fetch_add(1, Ordering::SeqCst);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = sh.lock.lock().unwrap();
            sh.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0, self.n_threads)));
        let mut spins = 0u32;
        while sh.remaining.load(Ordering::Acquire) > 0 {
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        assert!(
            !sh.panicked.load(Ordering::Relaxed),
            "a worker thread panicked"
        );
    }

    /// Tells the workers that no work comes for a while (the caller is about to wait on
    /// another process): they park now instead of spinning, leaving the cores to it. The
    /// next `run` wakes them.
    pub fn rest(&self) {
        self.shared.resting.store(true, Ordering::Relaxed);
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

/// An output buffer that the threads of one `run` write disjoint parts of.
#[derive(Clone, Copy)]
pub struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `slice` callers guarantee that threads touch disjoint elements.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub fn new(buf: &mut [f32]) -> SharedOut {
        SharedOut {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        }
    }

    /// Elements `offset..offset + len` of the buffer.
    ///
    /// # Safety
    /// No other thread may access these elements while the slice lives, and the buffer
    /// must outlive it (it does for the duration of the `run` it was made for).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, offset: usize, len: usize) -> &mut [f32] {
        assert!(offset + len <= self.len, "{offset}+{len} past {}", self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(offset), len)
    }
}

/// The `t`-th of `nt` near-equal contiguous parts of `0..n`.
pub fn split_range(n: usize, t: usize, nt: usize) -> std::ops::Range<usize> {
    let base = n / nt;
    let extra = n % nt;
    let start = t * base + t.min(extra);
    start..start + base + usize::from(t < extra)
}

/// Waits for a generation other than `seen`: spins, then parks. `None` at shutdown.
fn next_generation(sh: &Shared, seen: u64) -> Option<u64> {
    for _ in 0..SPINS {
        let g = sh.generation.load(Ordering::Acquire);
        if g != seen {
            return Some(g);
        }
        if sh.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        if sh.resting.load(Ordering::Relaxed) {
            break;
        }
        std::hint::spin_loop();
    }
    let mut guard = sh.lock.lock().unwrap();
    sh.sleepers.fetch_add(1, Ordering::SeqCst);
    loop {
        let g = sh.generation.load(Ordering::SeqCst);
        if g != seen || sh.shutdown.load(Ordering::SeqCst) {
            sh.sleepers.fetch_sub(1, Ordering::SeqCst);
            return (g != seen).then_some(g);
        }
        guard = sh.wake.wait(guard).unwrap();
    }
}

fn worker(shared: Arc<Shared>, index: usize, n_threads: usize) {
    let sh = &*shared;
    let mut seen = 0u64;
    while let Some(g) = next_generation(sh, seen) {
        seen = g;
        // SAFETY: `run` published the job before bumping the generation and keeps it
        // alive until `remaining` reaches zero.
        let job = unsafe { (*sh.job.get()).expect("a job accompanies every generation") };
        let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(index, n_threads) }));
        if result.is_err() {
            sh.panicked.store(true, Ordering::Relaxed);
        }
        sh.remaining.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.lock.lock().unwrap();
            self.shared.wake.notify_all();
        }
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
    fn runs_after_a_rest_wake_every_worker() {
        let pool = ThreadPool::new(3);
        for round in 0..50 {
            pool.rest();
            if round % 2 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let seen = Mutex::new(Vec::new());
            pool.run(&|t, _| seen.lock().unwrap().push(t));
            let mut seen = seen.into_inner().unwrap();
            seen.sort();
            assert_eq!(seen, [0, 1, 2], "round {round}");
        }
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
