//! Sleeping when idle (llama-server's `--sleep-idle-seconds`): after a set time with no
//! request, the engine drops its executor (the weights on the device, the KV storage and
//! every buffer) and forgets the prefix cache; the next request or slot operation builds it
//! again from the model, which stays mapped. Counters, measured costs and the drafter stay.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv::PrefixCache;
use model::Model;

use super::Engine;
use crate::backend::Threads;
use crate::executor::Executor;
use crate::Result;

/// The executor, or what rebuilds it while the engine sleeps.
pub(super) struct Exec {
    live: Option<Executor>,
    model: Arc<Model>,
    pool: Threads,
    /// Idle time after which the engine sleeps; `None`: never.
    pub sleep_after: Option<Duration>,
    /// The KV pool's blocks, for snapshots taken asleep.
    pub n_blocks: usize,
    /// When the engine last had a request or slot operation (idle time counts from it).
    pub busy: Instant,
}

impl Exec {
    pub fn new(exec: Executor, pool: Threads) -> Exec {
        Exec {
            model: exec.model_arc(),
            n_blocks: exec.kv().config().n_blocks(),
            live: Some(exec),
            pool,
            sleep_after: None,
            busy: Instant::now(),
        }
    }

    pub fn asleep(&self) -> bool {
        self.live.is_none()
    }
}

/// Every use of the executor is made awake ([`Engine::wake`] runs first).
impl Deref for Exec {
    type Target = Executor;

    fn deref(&self) -> &Executor {
        self.live.as_ref().expect("the engine is awake")
    }
}

impl DerefMut for Exec {
    fn deref_mut(&mut self) -> &mut Executor {
        self.live.as_mut().expect("the engine is awake")
    }
}

impl Engine {
    /// Drops the executor and the prefix cache (called idle: no slot holds a sequence).
    pub(super) fn sleep(&mut self) {
        if let Some(exec) = self.exec.live.take() {
            drop(exec);
            self.cache = PrefixCache::new();
            self.last.iter_mut().for_each(|l| *l = None);
            eprintln!("engine: idle, asleep (weights, KV and buffers released)");
        }
    }

    /// Awake, the idle time left before it sleeps (all of `sleep_after` while busy).
    pub(super) fn sleeps_in(&self) -> Option<Duration> {
        let after = self.exec.sleep_after.filter(|_| !self.exec.asleep())?;
        match self.is_idle() {
            true => Some(after.saturating_sub(self.exec.busy.elapsed())),
            false => Some(after),
        }
    }

    /// Builds the executor again when asleep.
    pub(super) fn wake(&mut self) -> Result<()> {
        if !self.exec.asleep() {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let config = self.cfg.context_config();
        let dev = self
            .cfg
            .device
            .open(self.exec.pool.clone(), config.precision)?;
        let exec = Executor::on(self.exec.model.clone(), config, dev, &|_, _| {})?;
        self.exec.live = Some(exec);
        self.exec.busy = std::time::Instant::now();
        eprintln!("engine: awake in {:.2} s", t0.elapsed().as_secs_f64());
        Ok(())
    }
}
