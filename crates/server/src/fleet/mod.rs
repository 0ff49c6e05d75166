//! Router mode (`tandem serve --models-dir DIR`, repeated `-m`, `--models-preset`): several
//! models behind one port, as llama-server's router serves them. Each model runs in a
//! `tandem serve` of its own ([`instance`]), started on the first request that names it
//! (`model` in the body, `?model=` on a GET; Ollama's `NAME:latest` too) and stopped when
//! room is needed: at most `--models-max` run at once, and a model whose memory plan does
//! not fit beside the others unloads them too, least recently used first, never one that is
//! serving a request. Requests wait in arrival order for room; requests for a model being
//! loaded share its load. A name the catalog does not hold is a 404 naming it.
//!
//! The router answers itself: `/health`, `/models` and `/v1/models` (every model with its
//! status, `?reload=1` reading the directory and preset again), `/models/load` and
//! `/models/unload`, `/props` without `?model=` (its role and limits), Ollama's `/api/tags`,
//! `/api/ps` and `/api/version`, and the web UI. Everything else goes to the model's server,
//! streamed both ways with the client's own key: the models' servers take the router's
//! keys, so that each key keeps its own prefix-cache namespace there.

mod catalog;
mod instance;
mod routes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use catalog::{Entry, Sources};
use instance::{Instance, Status};

use crate::error::ApiError;

/// What the router is told beside the HTTP settings.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    pub sources: Sources,
    /// The `tandem` binary the models' servers run.
    pub exe: PathBuf,
    /// Flags every model's server gets (a preset's come after them).
    pub args: Vec<String>,
    /// Models loaded at once (`--models-max`).
    pub max: usize,
    /// Load a model on the first request that names it (else only `/models/load` does).
    pub autoload: bool,
}

/// The router's models.
pub struct Fleet {
    settings: FleetSettings,
    catalog: RwLock<Vec<Entry>>,
    live: Mutex<HashMap<String, Arc<Instance>>>,
    /// Why the last load of a model failed (until it is loaded again).
    failures: Mutex<HashMap<String, String>>,
    /// Held while room is made and a load starts: requests that need room take turns in
    /// the order they came.
    gate: tokio::sync::Mutex<()>,
}

/// A count in a model's `in_flight`, given back when dropped (also when the request that
/// took it is cancelled while the model loads).
struct Hold(Arc<Instance>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's hold on a loaded model: it is not unloaded while held.
pub struct Lease {
    hold: Hold,
    pub addr: std::net::SocketAddr,
}

impl Lease {
    /// Whether its model's server has exited (crashed or was killed from outside).
    pub fn dead(&self) -> bool {
        self.hold.0.exited()
    }
}

impl Fleet {
    /// The fleet of `settings`, its catalog read.
    pub fn new(settings: FleetSettings) -> Result<Fleet, String> {
        let catalog = catalog::read(&settings.sources)?;
        Ok(Fleet {
            settings,
            catalog: RwLock::new(catalog),
            live: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            gate: tokio::sync::Mutex::new(()),
        })
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the directory and preset again.
    pub fn reload(&self) -> Result<(), String> {
        let c = catalog::read(&self.settings.sources)?;
        *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = c;
        Ok(())
    }

    /// The catalog's name for `asked` (Ollama's `NAME:latest` read as `NAME`).
    pub fn resolve(&self, asked: &str) -> Result<Entry, ApiError> {
        let c = self.catalog.read().unwrap_or_else(|e| e.into_inner());
        let bare = asked.strip_suffix(":latest").unwrap_or(asked);
        c.iter()
            .find(|e| e.name == asked)
            .or_else(|| c.iter().find(|e| e.name == bare))
            .cloned()
            .ok_or_else(|| {
                let mut e = ApiError::not_found(format!(
                    "model '{asked}' not found (this router serves: {})",
                    c.iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                e.param = Some("model".into());
                e
            })
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Instance>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A model's status: `loaded`, `loading`, `failed` or `unloaded`, with the failure.
    pub fn status(&self, name: &str) -> (&'static str, Option<String>) {
        let live = self.live().get(name).map(|i| i.status.borrow().clone());
        match live {
            Some(Status::Loading) => ("loading", None),
            Some(Status::Loaded(_)) => ("loaded", None),
            Some(Status::Failed(why)) => ("failed", Some(why)),
            None => match self.failures().get(name) {
                Some(why) => ("failed", Some(why.clone())),
                None => ("unloaded", None),
            },
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The names loaded now.
    pub fn loaded(&self) -> Vec<String> {
        let live = self.live();
        let mut v: Vec<String> = live
            .iter()
            .filter(|(_, i)| matches!(*i.status.borrow(), Status::Loaded(_)))
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    pub fn max(&self) -> usize {
        self.settings.max
    }

    pub fn autoload(&self) -> bool {
        self.settings.autoload
    }

    /// Waits for `entry`'s server and holds it for a request; starts it first when it is not
    /// loaded and `load` allows.
    pub async fn acquire(self: &Arc<Self>, entry: &Entry, load: bool) -> Result<Lease, ApiError> {
        loop {
            // Counted in flight under the lock, so that no unload takes it from here on.
            let inst = self.live().get(&entry.name).cloned().inspect(|i| {
                i.in_flight.fetch_add(1, Ordering::AcqRel);
            });
            let Some(inst) = inst else {
                if !load {
                    return Err(ApiError::invalid(
                        "model",
                        format!("model '{}' is not loaded, and this router loads models only through POST /models/load", entry.name),
                    ));
                }
                self.start(entry).await;
                continue;
            };
            let hold = Hold(inst);
            let mut rx = hold.0.status.subscribe();
            let status = rx
                .wait_for(|s| *s != Status::Loading)
                .await
                .map(|s| s.clone())
                .unwrap_or(Status::Failed("the router is stopping".into()));
            match status {
                Status::Loaded(addr) => return Ok(Lease { hold, addr }),
                Status::Failed(why) => {
                    return Err(ApiError::unavailable(
                        format!("model '{}' could not be loaded: {why}", entry.name),
                        1,
                    ))
                }
                Status::Loading => unreachable!("waited past loading"),
            }
        }
    }

    /// Starts loading `entry` unless it is loaded or loading, first unloading the least
    /// recently used idle models down to `--models-max` (waiting, in turn, while every
    /// loaded model is busy).
    pub async fn start(self: &Arc<Self>, entry: &Entry) {
        let _turn = self.gate.lock().await;
        if self.live().contains_key(&entry.name) {
            return;
        }
        while self.live().len() >= self.settings.max.max(1) {
            if !self.unload_lru(&entry.name).await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let inst = Arc::new(Instance::new(&entry.name));
        self.live().insert(entry.name.clone(), inst.clone());
        let (fleet, entry) = (self.clone(), entry.clone());
        tokio::spawn(async move {
            let s = &fleet.settings;
            let loaded = loop {
                match inst.load(&s.exe, &entry, &s.args).await {
                    // A plan that does not fit beside the others: unload one and try again.
                    Err(why)
                        if why.contains("the memory plan")
                            && fleet.unload_lru(&entry.name).await => {}
                    done => break done,
                }
            };
            match loaded {
                Ok(addr) => {
                    fleet.failures().remove(&entry.name);
                    inst.status.send_replace(Status::Loaded(addr));
                }
                Err(why) => {
                    {
                        let mut live = fleet.live();
                        if live.get(&entry.name).is_some_and(|i| Arc::ptr_eq(i, &inst)) {
                            live.remove(&entry.name);
                        }
                    }
                    fleet.failures().insert(entry.name.clone(), why.clone());
                    inst.status.send_replace(Status::Failed(why));
                }
            }
        });
    }

    /// Unloads the least recently used idle model other than `keep`; whether there was one.
    async fn unload_lru(&self, keep: &str) -> bool {
        let victim = {
            let mut live = self.live();
            let lru = live
                .iter()
                .filter(|(n, _)| n.as_str() != keep)
                .filter_map(|(n, i)| i.idle_since().map(|t| (t, n.clone())))
                .min();
            lru.and_then(|(_, n)| live.remove(&n))
        };
        match victim {
            None => false,
            Some(v) => {
                eprintln!("router: unloading '{}' to make room", v.name);
                v.status.send_replace(Status::Failed("unloaded".into()));
                v.unload().await;
                true
            }
        }
    }

    /// Forgets the model of `lease` when its server has exited, so that the next request
    /// loads it again; whether it had.
    pub fn forget_if_dead(&self, lease: &Lease) -> bool {
        if !lease.dead() {
            return false;
        }
        let inst = &lease.hold.0;
        let mut live = self.live();
        if live.get(&inst.name).is_some_and(|i| Arc::ptr_eq(i, inst)) {
            live.remove(&inst.name);
        }
        inst.status
            .send_replace(Status::Failed("its server stopped".into()));
        true
    }

    /// Unloads `name`; whether it was loaded.
    pub async fn unload(&self, name: &str) -> bool {
        let inst = self.live().remove(name);
        match inst {
            None => false,
            Some(i) => {
                i.status.send_replace(Status::Failed("unloaded".into()));
                i.unload().await;
                true
            }
        }
    }

    /// Stops every model's server.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Instance>> = self.live().drain().map(|(_, i)| i).collect();
        for i in all {
            i.unload().await;
        }
    }
}

pub use routes::run;
