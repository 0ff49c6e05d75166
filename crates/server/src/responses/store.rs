//! Stored responses (`store`, OpenAI's default): each finished response is kept with the
//! conversation that led to it (its input items, then its output items as input items), so
//! that `previous_response_id` continues it and `GET /v1/responses/{id}` returns it. Kept in
//! memory, the least recently stored dropped past [`CAPACITY`]; each under the API key's
//! namespace that made it, invisible to other keys.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;

/// Responses kept at most.
pub const CAPACITY: usize = 1024;

struct Stored {
    ns: u64,
    /// The conversation up to and including this response's output, as input items.
    items: Vec<Value>,
    response: Value,
}

/// The stored responses, by id.
#[derive(Default)]
pub struct Store(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Stored>,
    order: VecDeque<String>,
}

impl Store {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `response` (its `output` joined to `input` items) under namespace `ns`.
    pub fn keep(&self, ns: u64, mut items: Vec<Value>, response: Value) {
        let Some(id) = response["id"].as_str().map(String::from) else {
            return;
        };
        items.extend(response["output"].as_array().into_iter().flatten().cloned());
        let mut s = self.inner();
        if s.by_id.len() >= CAPACITY {
            if let Some(old) = s.order.pop_front() {
                s.by_id.remove(&old);
            }
        }
        s.order.push_back(id.clone());
        s.by_id.insert(
            id,
            Stored {
                ns,
                items,
                response,
            },
        );
    }

    /// The conversation of response `id` as input items, if `ns` stored it.
    pub fn items(&self, ns: u64, id: &str) -> Option<Vec<Value>> {
        let s = self.inner();
        s.by_id
            .get(id)
            .filter(|r| r.ns == ns)
            .map(|r| r.items.clone())
    }

    /// Response `id`, if `ns` stored it.
    pub fn get(&self, ns: u64, id: &str) -> Option<Value> {
        let s = self.inner();
        s.by_id
            .get(id)
            .filter(|r| r.ns == ns)
            .map(|r| r.response.clone())
    }

    /// Forgets response `id`; whether `ns` had stored it.
    pub fn delete(&self, ns: u64, id: &str) -> bool {
        let mut s = self.inner();
        if s.by_id.get(id).is_none_or(|r| r.ns != ns) {
            return false;
        }
        s.by_id.remove(id);
        s.order.retain(|o| o != id);
        true
    }
}
