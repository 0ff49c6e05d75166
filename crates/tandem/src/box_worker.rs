//! `tandem box`: the first stage of a split model (the embeddings and blocks `0..L`),
//! serving a `tandem serve --split-at L --box ADDR` head over TCP.

use clap::Args;
use model::{Model, Part};
use split::worker::BoxWorker;

use crate::cli::ModelArgs;
use crate::CliError;

#[derive(Args)]
pub struct BoxArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The blocks this box holds: `0:L` (the head runs `L..`).
    #[arg(long, value_parser = parse_layers)]
    pub layers: usize,
    /// Address to listen on (port 0 picks a free one, printed at start).
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub listen: String,
}

fn parse_layers(s: &str) -> Result<usize, String> {
    let bad = || format!("'{s}' is not 0:L (the box holds blocks 0 to L, the head the rest)");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
        (Ok(0), Ok(l)) if l > 0 => Ok(l),
        _ => Err(bad()),
    }
}

pub fn execute(a: BoxArgs) -> Result<(), CliError> {
    let path = a.model.path()?;
    // Before loading: the plan counts the weights, which loading takes from what is free.
    let available = engine::available_memory();
    let model = Model::load_stage(&path, Part::First(a.layers))?;
    let n_layer = model.hparams.n_layer;
    let cfg = a.model.context_config();
    let plan = engine::MemoryPlan::new(&model, &cfg);
    eprintln!(
        "tandem box: blocks 0..{} of {n_layer} of {}, device {}, memory plan: {plan} (context {})",
        a.layers,
        path.display(),
        cfg.device.name(),
        cfg.n_ctx
    );
    if let Some(limit) = available.filter(|&l| plan.total() > l) {
        return Err(server::Error::OverMemory {
            plan,
            limit_mib: limit as f64 / 1048576.0,
            source_of_limit: "memory available",
        }
        .into());
    }
    let worker = BoxWorker::new(model, cfg)?;
    let epoch = worker.epoch();
    worker.serve_blocking(&a.listen, |addr| {
        eprintln!("tandem box: listening on {addr} (epoch {epoch:016x})")
    })?;
    Ok(())
}
