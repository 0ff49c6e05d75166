//! The engine: evaluation context (KV pool, scratch and threads planned once), the
//! sampler chain, and the memory plan.

mod context;
mod plan;
pub mod sampling;

pub use context::{Context, ContextConfig, Outputs, LOGIT_ROWS};
pub use plan::MemoryPlan;
pub use sampling::{Sampler, SamplerConfig};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Model(#[from] model::Error),
    #[error(transparent)]
    Kv(#[from] kv::Error),
    #[error(
        "the prompt and output need {needed} positions but the context holds {n_ctx} (raise -c)"
    )]
    ContextFull { needed: usize, n_ctx: usize },
    #[error("{0}")]
    Config(String),
}

pub type Result<T> = std::result::Result<T, Error>;
