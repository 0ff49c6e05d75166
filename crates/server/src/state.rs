//! Server configuration, loading, and the state routes share.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use engine::speculative::{Ngram, SpecConfig, Speculation};
use engine::{EngineConfig, EngineHandle, MemoryPlan, SamplerConfig};
use model::{Model, Part};
use split::head::BoxClient;
use text::{ChatTemplate, GrammarError, Grammars, TemplateSource, Tokenizer};

use crate::error::Error;
use crate::tools::{TemplateSupport, ToolFormat};

/// Request defaults from the command line (llama-server's sampling flags).
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// `seed` is unused here: see `seed`.
    pub sampling: SamplerConfig,
    /// Seed for requests without one; `None` or negative: random per request.
    pub seed: Option<i64>,
    /// `max_tokens` for requests without one; `None`: until the context is full.
    pub n_predict: Option<usize>,
    /// Reasoning tokens a chat answer may spend before the end of reasoning is forced
    /// (`--reasoning-budget`); `None`: no limit.
    pub reasoning_budget: Option<usize>,
    /// Written before the forced end of reasoning (`--reasoning-budget-message`).
    pub reasoning_budget_message: String,
    /// Whether an answer that fills its slot drops tokens and goes on (`--context-shift`).
    pub context_shift: bool,
    /// Prompt tokens kept then, for requests without `n_keep` (`--keep`; -1: the prompt).
    pub n_keep: i64,
}

/// Whether chat answers reason (`--reasoning`, as llama-server's): the template's
/// `enable_thinking` unless a request's `chat_template_kwargs` sets it, and whether
/// `<think>…</think>` is split out of the answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    On,
    Off,
    /// On when the chat template marks reasoning.
    Auto,
}

/// Where draft tokens come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Drafter {
    /// A smaller model with the same vocabulary, or an EAGLE-3 or DFlash drafter of the
    /// model's features (-md; told apart by the file's architecture).
    Model(PathBuf),
    /// Prompt lookup over the request's own tokens.
    Ngram,
    /// Multi-token-prediction blocks (`--spec-type draft-mtp`): the model's own, or an MTP
    /// file's (`-md mtp-….gguf`, or such a file beside the model), whose other matrices are
    /// the model's.
    Mtp(Option<PathBuf>),
}

/// Speculative decoding as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecSettings {
    pub drafter: Drafter,
    pub config: SpecConfig,
    /// Tokens a draft model's output head keeps (0: the whole vocabulary).
    pub draft_vocab: usize,
}

/// Everything `tandem serve` was told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub model_path: PathBuf,
    /// The model ids clients see (`--alias`, several separated by commas; the first is the
    /// one answers carry); default: the file name without `.gguf`.
    pub alias: Option<String>,
    /// Tags listed with the model in `/v1/models` (`--tags`).
    pub tags: Vec<String>,
    /// The addresses to listen on, comma-separated (`127.0.0.1,::1`).
    pub host: String,
    pub port: u16,
    /// Engine sizes; `n_ctx` 0 means the model's training context.
    pub engine: EngineConfig,
    /// Accepted keys; empty: no authentication.
    pub api_keys: Vec<String>,
    /// Host names (the Host header without its port) the server answers; `None`: any.
    pub allowed_hosts: Option<Vec<String>>,
    pub defaults: Defaults,
    /// A Jinja chat template that replaces the model's.
    pub chat_template: Option<String>,
    /// How the model writes tool calls; `None`: read from the chat template.
    pub tool_format: Option<ToolFormat>,
    pub reasoning: Reasoning,
    pub metrics: bool,
    /// /metrics answers without the API key.
    pub metrics_public: bool,
    /// Which origins browsers may call from, and the preflight's answer.
    pub cors: crate::cors::Cors,
    pub slots: bool,
    /// Memory the plan must fit in (bytes); `None`: the memory available now.
    pub mem_limit: Option<u64>,
    /// Largest request body accepted.
    pub body_limit: usize,
    /// Deadlines for clients and the cap on connections.
    pub limits: crate::conn::Limits,
    pub speculation: Option<SpecSettings>,
    /// Serve the last stage of a model split across two machines.
    pub split: Option<SplitSettings>,
    /// `-ngl N`: the last `N` blocks and the output head on the engine's device (a GPU),
    /// the embeddings and the blocks before them on the CPU, in this process. `None`, or
    /// `N` at least the model's blocks: the whole model on the engine's device.
    pub gpu_layers: Option<usize>,
    /// Serve embeddings (`--embeddings`), pooled as `pooling` (`None`: as the GGUF says,
    /// else `none`).
    pub embeddings: bool,
    /// Serve `/rerank` (`--reranking`).
    pub reranking: bool,
    /// Vertex AI's predict route (`AIP_MODE=PREDICTION`).
    pub gcp: Option<crate::gcp::Gcp>,
    /// Idle time after which the engine releases the model's memory until the next request
    /// (`--sleep-idle-seconds`).
    pub sleep_idle: Option<std::time::Duration>,
    pub pooling: Option<engine::Pooling>,
    /// Where `/slots/{id}?action=save|restore` files live (`--slot-save-path`).
    pub slot_save_path: Option<PathBuf>,
    /// `/infill` prompts put the suffix before the prefix (`--spm-infill`).
    pub spm_infill: bool,
    /// Fetches the models tandem knows for Ollama's `/api/pull`; `None`: it is refused.
    pub pull: Option<crate::ollama::Puller>,
    /// Serve the web UI at `/` (`--no-webui`: 404).
    pub webui: bool,
    /// RoPE scaling over the model file's (`--rope-scaling`, `--yarn-*`, ...).
    pub rope: model::rope::RopeOverrides,
    /// Which tables stay in the file (`--lazy-mode`).
    pub lazy: model::LazyMode,
    /// How the model files are held (`--load-mode`).
    pub load_mode: gguf::LoadMode,
    /// LoRA adapters, with the scale of requests that give none (`--lora`).
    pub lora: Vec<crate::lora::LoraSetting>,
    /// The vision tower (`--mmproj`).
    pub mmproj: Option<PathBuf>,
    /// `--image-urls allow`: http(s) image URLs are fetched.
    pub image_urls: bool,
    /// `--image-min-tokens`, `--image-max-tokens`.
    pub image_tokens: (Option<usize>, Option<usize>),
}

/// The head of a split model: blocks `at..n` and the output head here, the embeddings and
/// blocks `0..at` on the box at `box_addr` (`tandem box --layers 0:at`).
#[derive(Debug, Clone)]
pub struct SplitSettings {
    pub at: usize,
    pub box_addr: std::net::SocketAddr,
    pub states: split::head::StateType,
    /// How long a lost box is waited for before requests get 503.
    pub grace: std::time::Duration,
    /// Rows per chunk of a streamed prompt.
    pub chunk: usize,
    /// Two cohorts of requests take turns, one on each stage.
    pub pipeline: bool,
    /// The link's key and TLS.
    pub credentials: split::Credentials,
}

impl ServerConfig {
    /// `model_path` served with `engine`'s sizes and every other setting at its default:
    /// 127.0.0.1:8080, no key, CORS for this machine's origins, the model's template, default sampling, /slots on,
    /// /metrics off, a 32 MiB body limit, no drafter.
    pub fn new(model_path: PathBuf, engine: EngineConfig) -> ServerConfig {
        ServerConfig {
            model_path,
            alias: None,
            tags: Vec::new(),
            host: "127.0.0.1".into(),
            port: 8080,
            engine,
            api_keys: Vec::new(),
            allowed_hosts: None,
            defaults: Defaults {
                sampling: SamplerConfig::default(),
                seed: None,
                n_predict: None,
                reasoning_budget: None,
                reasoning_budget_message: String::new(),
                context_shift: false,
                n_keep: 0,
            },
            chat_template: None,
            tool_format: None,
            reasoning: Reasoning::Auto,
            metrics: false,
            metrics_public: false,
            cors: crate::cors::Cors::new(crate::cors::Origins::Localhost),
            slots: true,
            mem_limit: None,
            body_limit: 32 << 20,
            limits: crate::conn::Limits::default(),
            speculation: None,
            split: None,
            gpu_layers: None,
            embeddings: false,
            reranking: false,
            gcp: None,
            sleep_idle: None,
            pooling: None,
            slot_save_path: None,
            spm_infill: false,
            pull: None,
            mmproj: None,
            image_urls: false,
            image_tokens: (None, None),
            webui: true,
            rope: Default::default(),
            lazy: Default::default(),
            load_mode: Default::default(),
            lora: Vec::new(),
        }
    }
}

/// What exists once the model is loaded.
pub struct Ready {
    pub engine: EngineHandle,
    pub tok: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub template_source: Option<String>,
    /// How the model writes tool calls.
    pub tool_format: ToolFormat,
    /// What the template renders of tools and tool turns by itself.
    pub tool_support: TemplateSupport,
    /// Chat answers carry `reasoning_content`.
    pub reasoning: bool,
    /// The `enable_thinking` chat templates see unless a request's `chat_template_kwargs`
    /// sets it: `--reasoning on` true, `off` false, `auto` true for a template that marks
    /// reasoning (as llama-server passes it); `None`: not set. DeepSeek-V4's template reads
    /// a request's `thinking` before it.
    pub thinking: Option<bool>,
    /// The first of `aliases` (alphabetically, as llama-server picks it), the name answers
    /// carry.
    pub model_id: String,
    /// Every name the model answers to (`--alias a,b`).
    pub aliases: Vec<String>,
    pub defaults: Defaults,
    pub n_ctx_train: usize,
    pub n_vocab: usize,
    pub n_embd: usize,
    /// How embeddings are pooled; `None`: the server does not compute them.
    pub embeddings: Option<engine::Pooling>,
    /// How rerank prompts are built; `None`: the server does not rerank.
    pub reranker: Option<crate::rerank::Reranker>,
    /// [`split::model_hash`] of the model: saved slots name it.
    pub model_hash: u64,
    /// The KV pool's shape.
    pub kv_config: kv::KvConfig,
    /// `/infill` prompts put the suffix before the prefix.
    pub spm_infill: bool,
    pub n_params: u64,
    pub model_bytes: u64,
    pub plan: MemoryPlan,
    /// The grammar compiler for the vocabulary, built at the first constrained request.
    grammars: OnceLock<Result<Grammars, GrammarError>>,
    /// The LoRA adapters and their scales.
    pub lora: crate::lora::Adapters,
    /// The vision tower, when images are read.
    pub vision: Option<crate::vision::Vision>,
}

impl Ready {
    /// The grammar compiler, built on first use (it walks the whole vocabulary).
    pub fn grammars(&self) -> Result<&Grammars, &GrammarError> {
        self.grammars
            .get_or_init(|| Grammars::new(self.tok.clone()))
            .as_ref()
    }
}

/// Shared by every route. `ready` is set once, when loading has finished.
pub struct AppState {
    pub config: ServerConfig,
    pub ready: OnceLock<Ready>,
    pub started: Instant,
    pub created: u64,
    /// The token counters at the last `/metrics` scrape: prompt tokens and seconds,
    /// generated tokens and seconds (the throughput gauges are over the window since).
    pub scraped: std::sync::Mutex<[f64; 4]>,
    /// Turns to prepare a request (parse, template, tokenize, compile a grammar) on the
    /// blocking pool, for small bodies and for large ones; requests beyond them wait
    /// without holding a runtime thread.
    pub preparing: Lanes,
    /// Stored Responses-API responses.
    pub responses: crate::responses::store::Store,
    /// A router's models (`crate::fleet`): set instead of `ready`.
    pub fleet: OnceLock<Arc<crate::fleet::Fleet>>,
    /// What Ollama's `/api/tags`, `/api/ps` and `/api/show` show of the model file, read once.
    pub ollama_card: OnceLock<crate::ollama::Card>,
}

/// The preparation turns: large bodies get one less than the cores (one at least), so that
/// preparing them never takes every core from the engine and the runtime; small bodies
/// (quick to prepare) have turns of their own and never queue behind large ones.
pub struct Lanes {
    pub small: tokio::sync::Semaphore,
    pub large: tokio::sync::Semaphore,
}

impl Lanes {
    /// Bodies up to this many bytes are small.
    pub const SMALL: usize = 256 << 10;

    fn new() -> Lanes {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Lanes {
            small: tokio::sync::Semaphore::new(4),
            large: tokio::sync::Semaphore::new(cores.saturating_sub(1).max(1)),
        }
    }

    /// The lane for a body of `bytes`.
    pub fn of(&self, bytes: usize) -> &tokio::sync::Semaphore {
        match bytes <= Lanes::SMALL {
            true => &self.small,
            false => &self.large,
        }
    }
}

impl AppState {
    /// The state of a server whose model is still loading.
    pub fn new(config: ServerConfig) -> Self {
        AppState {
            config,
            ready: OnceLock::new(),
            fleet: OnceLock::new(),
            ollama_card: OnceLock::new(),
            preparing: Lanes::new(),
            responses: Default::default(),
            started: Instant::now(),
            scraped: std::sync::Mutex::new([0.0; 4]),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

pub type Shared = Arc<AppState>;

/// Starts the engine on `model`, with a progress bar of the upload of its weights to the
/// device when stderr is a terminal (the server prints one line when the model is ready
/// either way).
fn start_engine(
    model: Model,
    tok: Arc<Tokenizer>,
    cfg: engine::EngineConfig,
    spec: Option<Speculation>,
    front: Option<Box<dyn engine::Front>>,
) -> Result<engine::EngineHandle, engine::Error> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return engine::start(model, tok, cfg, spec, front);
    }
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes}")
            .expect("a valid template"),
    );
    let engine = engine::start_with(model, tok, cfg, spec, front, &|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    engine
}

/// Where `-ngl` splits the model between the CPU and the engine's device: the first block
/// of the device's stage, when some blocks stay on the CPU.
fn local_split(config: &ServerConfig) -> Result<Option<usize>, Error> {
    let Some(n) = config.gpu_layers else {
        return Ok(None);
    };
    if config.split.is_some() {
        return Err(engine::Error::Config(
            "-ngl and --split-at both split the model; give one".into(),
        )
        .into());
    }
    let file = gguf::GgufFile::open(&config.model_path).map_err(model::Error::from)?;
    let n_layer = model::read_hparams(&file.header.metadata)?.n_layer;
    Ok((n < n_layer).then(|| n_layer - n))
}

/// Loads the model, checks the memory plan against the limit, and starts the engine.
pub fn load(config: &ServerConfig) -> Result<Ready, Error> {
    let local_at = local_split(config)?;
    let part = match (&config.split, local_at) {
        (Some(s), _) => Part::Last(s.at),
        (None, Some(at)) => Part::Last(at),
        (None, None) => Part::Whole,
    };
    // Before loading: the plan counts the weights, which loading takes from what is free.
    let available = engine::available_memory();
    let mut model = Model::load_stage_with(&config.model_path, part, config.load_mode)?;
    if !config.lora.is_empty() && part != Part::Whole {
        return Err(Error::Config(
            "--lora: adapters apply to a model served whole, not in two stages (a split, or \
             --n-gpu-layers short of every block)"
                .into(),
        ));
    }
    for l in &config.lora {
        model.add_adapter(&l.path, l.scale)?;
    }
    let lora = crate::lora::Adapters::new(&model, &config.lora);
    model.hparams.apply_rope(&config.rope);
    model.set_lazy(config.lazy);
    let hp = &model.hparams;
    let md = &model.file.header.metadata;
    let tok = Arc::new(Tokenizer::from_gguf(md)?);
    let template_source = match &config.chat_template {
        Some(s) => Some(s.clone()),
        None => {
            let found = TemplateSource::of(md)?;
            match &found {
                Some(t) => eprintln!("chat template: {t}"),
                None => eprintln!(
                    "chat template: none (chat requests are refused; --chat-template gives one)"
                ),
            }
            found.map(|t| t.text().to_string())
        }
    };
    let template = template_source
        .as_deref()
        .map(|src| ChatTemplate::for_model(src, md))
        .transpose()?;
    let marks_reasoning = template_source
        .as_deref()
        .is_some_and(|t| t.contains("<think>"));
    if config.reasoning == Reasoning::On && !marks_reasoning {
        eprintln!("warning: --reasoning on: the chat template does not mark reasoning with <think>; answers stay whole");
    }
    let reasoning = config.reasoning != Reasoning::Off && marks_reasoning;
    let thinking = match config.reasoning {
        Reasoning::On => Some(true),
        Reasoning::Off => Some(false),
        Reasoning::Auto => marks_reasoning.then_some(true),
    };
    let tool_format = config
        .tool_format
        .unwrap_or_else(|| ToolFormat::detect(template_source.as_deref().unwrap_or_default()));
    let tool_support = template.as_ref().map_or(
        TemplateSupport {
            tools: false,
            tool_turns: false,
        },
        TemplateSupport::probe,
    );
    eprintln!(
        "tool calls: {tool_format} format, tools {}",
        if tool_support.tools && tool_format != ToolFormat::Generic {
            "shown by the chat template"
        } else {
            "shown by tandem's system prompt"
        }
    );
    let mut ecfg = config.engine;
    if ecfg.n_ctx == 0 {
        ecfg.n_ctx = hp.n_ctx_train;
    }
    ecfg.validate()?;
    let (spec, draft_plan) = match &config.speculation {
        None => (None, None),
        Some(s) => match &s.drafter {
            Drafter::Ngram => (Some(Speculation::with(Ngram::default(), s.config)), None),
            Drafter::Mtp(file) => {
                let mut mtp = match file {
                    None => {
                        Model::load_stage_with(&config.model_path, Part::Nextn, config.load_mode)?
                    }
                    Some(f) => Model::load_nextn_sidecar(f, config.load_mode, &model)?,
                };
                mtp.hparams.apply_rope(&config.rope);
                mtp.set_lazy(config.lazy);
                let plan = MemoryPlan::new(&mtp, &ecfg.context_config());
                (Some(Speculation::mtp(mtp, s.config)), Some(plan))
            }
            Drafter::Model(path) if reads_features(path) => {
                let draft = Model::load_drafter(path, config.load_mode, &model)?;
                check_draft_vocab(&tok, &draft, path)?;
                let reads = draft.hparams.target.as_ref().map_or(0, |t| t.n_embd);
                if reads != hp.n_embd {
                    return Err(Error::DraftVocab {
                        path: path.display().to_string(),
                        why: format!(
                            "it reads features {reads} wide (target_hidden_size), the model's \
                             are {}",
                            hp.n_embd
                        ),
                    });
                }
                let plan = MemoryPlan::new(&draft, &ecfg.context_config());
                let block = draft.hparams.target.as_ref().is_some_and(|t| t.block > 0);
                let spec = match block {
                    true => Speculation::dflash(draft, s.config),
                    false => Speculation::eagle3(draft, s.config),
                };
                (Some(spec), Some(plan))
            }
            Drafter::Model(path) => {
                let mut draft = Model::load_stage_with(path, Part::Whole, config.load_mode)?;
                draft.set_lazy(config.lazy);
                check_draft_vocab(&tok, &draft, path)?;
                if s.draft_vocab > 0 && s.draft_vocab < tok.n_vocab() {
                    let ids = engine::speculative::vocab::load_or_choose(&tok, path, s.draft_vocab);
                    draft.restrict_head(&ids)?;
                }
                let plan = MemoryPlan::new(&draft, &ecfg.context_config());
                (Some(Speculation::draft_model(draft, s.config)), Some(plan))
            }
        },
    };
    let n_draft = spec.as_ref().map_or(0, |s| s.config.n_max);
    let mut plan = MemoryPlan::new(&model, &ecfg.context_config().with_drafts(n_draft));
    if let Some(s) = &config.split {
        let streamed = split::head::stream_bytes(s.chunk, hp.n_embd, ecfg.n_parallel);
        plan.scratch += streamed;
    }
    let mut host_plan = MemoryPlan::default();
    let local_front = match local_at {
        None => None,
        Some(at) => {
            let mut first =
                Model::load_stage_with(&config.model_path, Part::First(at), config.load_mode)?;
            first.hparams.apply_rope(&config.rope);
            first.set_lazy(config.lazy);
            let cfg = engine::ContextConfig {
                device: engine::DeviceKind::Cpu,
                ..ecfg.context_config().with_drafts(n_draft)
            };
            let front_plan = MemoryPlan::new(&first, &cfg);
            eprintln!(
                "-ngl {}: blocks {at}..{} and the output head on the {} device, the embeddings and blocks 0..{at} on the cpu (memory plan there: {front_plan})",
                hp.n_layer - at,
                hp.n_layer,
                ecfg.device.name(),
            );
            host_plan = front_plan;
            Some(engine::LocalFront::new(first, cfg)?)
        }
    };
    if let Some(d) = draft_plan {
        eprintln!(
            "draft model memory plan: {d} (on the {} device)",
            ecfg.device.name()
        );
        plan = plan.with(&d);
    }
    if let Some(path) = config.mmproj.as_ref().filter(|_| config.split.is_none()) {
        let tower = tower_plan(path, ecfg.device)?;
        let kind = ecfg.device.encoder_kind();
        eprintln!(
            "vision tower memory plan: {tower} (on the {} device)",
            kind.name()
        );
        match kind {
            engine::DeviceKind::Gpu => plan = plan.with(&tower),
            _ => host_plan = host_plan.with(&tower),
        }
    }
    let host_limit = crate::memory::HostLimit::of(config.mem_limit, available);
    let own = ecfg.device.own_memory();
    eprintln!(
        "memory plan: {plan} ({}; context {} over {} slots, {} per slot{})",
        crate::memory::placement(ecfg.device, own.as_ref()),
        ecfg.pool_positions(),
        ecfg.n_parallel,
        ecfg.slot_ctx(),
        if ecfg.kv_unified { ", unified" } else { "" }
    );
    crate::memory::check(plan, host_plan, own.as_ref(), host_limit)?;
    let mut aliases: Vec<String> = config
        .alias
        .iter()
        .flat_map(|a| a.split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    if aliases.is_empty() {
        aliases.push(
            config
                .model_path
                .file_stem()
                .map_or("model".into(), |s| s.to_string_lossy().into_owned()),
        );
    }
    aliases.sort();
    aliases.dedup();
    let model_id = aliases[0].clone();
    let n_params = model
        .file
        .header
        .tensors
        .iter()
        .map(|t| t.n_elements())
        .sum();
    let model_bytes = MemoryPlan::new(&model, &ecfg.context_config()).weights;
    let (n_ctx_train, n_vocab, n_embd) = (hp.n_ctx_train, hp.n_vocab, hp.n_embd);
    let model_hash = split::model_hash(&model.file);
    let kv_config = ecfg.context_config().kv_config(&model);
    let embeddings = config.embeddings.then(|| {
        let pooling = config
            .pooling
            .or_else(|| crate::embeddings::gguf_pooling(&model.file.header.metadata))
            .unwrap_or(engine::Pooling::None);
        eprintln!("embeddings: pooling {pooling:?}");
        pooling
    });
    let reranker = if config.reranking {
        let header = &model.file.header;
        Some(
            crate::rerank::Reranker::of(&header.metadata, &header.tensors)
                .map_err(Error::Config)?,
        )
    } else {
        None
    };
    let front: Option<Box<dyn engine::Front>> = match &config.split {
        None => local_front.map(|f| Box::new(f) as Box<dyn engine::Front>),
        Some(s) => {
            let client = BoxClient::connect(s.box_addr, &model, s.states, s.credentials.clone())?
                .with_grace(s.grace)
                .with_chunk(s.chunk)
                .with_pipeline(s.pipeline);
            eprintln!(
                "split: blocks {}..{} here, 0..{} on the box at {} (epoch {:016x})",
                s.at,
                hp.n_layer,
                s.at,
                s.box_addr,
                client.epoch()
            );
            Some(Box::new(client))
        }
    };
    if config.sleep_idle.is_some() && front.is_some() {
        return Err(Error::Config(
            "--sleep-idle-seconds: a model served in two stages (-ngl or a split) does not sleep yet".into(),
        ));
    }
    let (min, max) = config.image_tokens;
    let limited = min.is_some() || max.is_some();
    let vision = match &config.mmproj {
        None if config.image_urls || limited => {
            return Err(Error::Config(
                "--image-urls/--image-min-tokens/--image-max-tokens: no vision tower to read images with (--mmproj)".into(),
            ))
        }
        None => None,
        Some(_) if config.split.is_some() => {
            return Err(Error::Config(
                "--mmproj: a model split with a box (--split-at) reads no images yet".into(),
            ))
        }
        Some(path) => {
            let mut v =
                crate::vision::Vision::start(path, (n_embd, &tok), ecfg.device, ecfg.n_threads)
                    .map_err(Error::Config)?;
            v.fetch_urls = config.image_urls;
            if limited && !v.limit_tokens(min, max) {
                return Err(Error::Config(format!(
                    "--image-min-tokens/--image-max-tokens: the {:?} projector makes a fixed count of embeddings a tile",
                    v.projector
                )));
            }
            let room = ecfg.n_ubatch.min(ecfg.n_batch);
            if v.n_tokens > room {
                return Err(Error::Config(format!(
                    "--mmproj: an image's {} rows are computed in one forward, and -ub/-b allow {room}; raise them",
                    v.n_tokens
                )));
            }
            eprintln!(
                "vision: {} ({:?} projector, {} embeddings a tile, on {})",
                path.display(),
                v.projector,
                v.n_tokens,
                v.device
            );
            Some(v)
        }
    };
    let engine = start_engine(model, tok.clone(), ecfg, spec, front)?;
    engine.sleep_after(config.sleep_idle)?;
    Ok(Ready {
        engine,
        tok,
        template,
        template_source,
        tool_format,
        tool_support,
        reasoning,
        thinking,
        model_id,
        aliases,
        defaults: config.defaults.clone(),
        n_ctx_train,
        n_vocab,
        n_embd,
        embeddings,
        reranker,
        model_hash,
        kv_config,
        spm_infill: config.spm_infill,
        n_params,
        model_bytes,
        plan,
        grammars: OnceLock::new(),
        lora,
        vision,
    })
}

/// A draft model must tokenize exactly like the target: same vocabulary, same pieces, same
/// end-of-generation tokens.
/// Whether the file at `path` is a drafter of a target's features (EAGLE-3, DFlash); a file that
/// cannot be read is left to the draft model's loading to report.
fn reads_features(path: &std::path::Path) -> bool {
    gguf::GgufFile::open(path)
        .ok()
        .and_then(|f| model::read_hparams(&f.header.metadata).ok())
        .is_some_and(|h| h.target.is_some())
}

/// The memory the vision tower of `path` takes beside a model on `device` (on the device
/// [`engine::DeviceKind::encoder`] makes): its weights and one image's buffers.
fn tower_plan(path: &std::path::Path, device: engine::DeviceKind) -> Result<MemoryPlan, Error> {
    let what =
        |e: &dyn std::fmt::Display| Error::Config(format!("--mmproj {}: {e}", path.display()));
    let file = Arc::new(gguf::GgufFile::open(path).map_err(|e| what(&e))?);
    let kind = device.encoder_kind();
    let bytes = |ty, rows, cols, role| kind.matrix_bytes(ty, rows, cols, role);
    let (weights, scratch) =
        model::vision::Tower::footprint(&file, &bytes).map_err(|e| what(&e))?;
    Ok(MemoryPlan {
        weights,
        scratch,
        ..MemoryPlan::default()
    })
}

fn check_draft_vocab(tok: &Tokenizer, draft: &Model, path: &std::path::Path) -> Result<(), Error> {
    let dtok = Tokenizer::from_gguf(&draft.file.header.metadata)?;
    let bad = |why: String| Error::DraftVocab {
        path: path.display().to_string(),
        why,
    };
    if dtok.n_vocab() != tok.n_vocab() {
        return Err(bad(format!(
            "its vocabulary has {} tokens, the model's {}",
            dtok.n_vocab(),
            tok.n_vocab()
        )));
    }
    if let Some(id) =
        (0..tok.n_vocab() as u32).find(|&i| dtok.token_to_piece(i) != tok.token_to_piece(i))
    {
        return Err(bad(format!(
            "token {id} is {:?} in the draft and {:?} in the model",
            String::from_utf8_lossy(dtok.token_to_piece(id)),
            String::from_utf8_lossy(tok.token_to_piece(id))
        )));
    }
    if dtok.eog_ids() != tok.eog_ids() {
        return Err(bad(format!(
            "its end tokens {:?} differ from the model's {:?}",
            dtok.eog_ids(),
            tok.eog_ids()
        )));
    }
    if draft.hparams.n_vocab != tok.n_vocab() {
        return Err(bad(format!(
            "its output head has {} rows for a vocabulary of {}",
            draft.hparams.n_vocab,
            tok.n_vocab()
        )));
    }
    Ok(())
}
