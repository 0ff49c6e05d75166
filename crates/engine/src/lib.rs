//! The engine: the executor (a model's state on its device, planned once, and the one
//! forward), where a backend is chosen, the sampler chain, the memory plan, and the
//! multi-user engine thread with its handle.

mod backend;
pub mod cost;
mod executor;
mod front;
mod handle;
mod local_front;
mod plan;
mod request;
pub mod sampling;
mod scheduler;
mod slot;
pub mod speculative;

pub use backend::{DeviceKind, Threads};
pub use executor::{
    ContextConfig, Enter, Executor, Out, Outputs, Placed, RowOut, Taps, LOGIT_ROWS,
};
pub use front::{Front, FrontSeq, FrontState, FrontStats};
pub use handle::{
    Counters, DiskTier, EngineConfig, EngineHandle, EventStream, SlotState, Snapshot, StepBudget,
};
pub use local_front::LocalFront;
pub use plan::{available_memory, MemoryPlan};
pub use request::{
    ContextShift, DraftLimits, Event, FinishReason, GenRequest, Pooling, Progress, PromptImage,
    Summary, TokenLogprob,
};
pub use sampling::{Sampler, SamplerConfig};
pub use scheduler::persist::{SavedPrefix, SlotDone, SlotOp};
pub use scheduler::{start, start_with};

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
    #[error("the server is busy: {limit} requests are already waiting; retry later")]
    QueueFull { limit: usize },
    #[error("the engine has stopped")]
    Stopped,
    #[error("{0}")]
    Unavailable(String),
    #[error("the model computed NaN or infinite numbers at position {pos}")]
    NonFinite { pos: usize },
}

pub type Result<T> = std::result::Result<T, Error>;
