//! `tandem serve`: llama-server's command line over tandem's server.

use std::path::{Path, PathBuf};

use clap::Args;
use gguf::GgmlType;

use crate::access::{allowed_hosts, api_keys};
use crate::cli::{parse_kv_type, ModelArgs};
use crate::pull;
use crate::CliError;
use engine::DeviceKind;

/// llama-server's flags. Flags that do nothing on this backend are accepted and named in
/// one warning each at start.
#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Draft model for speculative decoding (-md): a path or a `tandem pull` name, with
    /// the same vocabulary as the model.
    #[arg(long = "model-draft")]
    pub model_draft: Option<String>,
    /// Slots: requests generated at once (-np).
    #[arg(long = "parallel", default_value_t = 4)]
    pub parallel: usize,
    /// All slots share the whole KV pool (-kvu); otherwise each gets -c / -np.
    #[arg(long = "kv-unified", overrides_with = "no_kv_unified")]
    pub kv_unified: bool,
    /// Each slot gets -c / -np (the default); the last of the two flags given wins.
    #[arg(long = "no-kv-unified", overrides_with = "kv_unified")]
    pub no_kv_unified: bool,
    /// Logical batch: tokens computed per engine step over all slots.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch: usize,
    /// KV cache type for values (-ctv); this backend stores K and V in one type.
    #[arg(long = "cache-type-v", value_parser = parse_kv_type)]
    pub cache_type_v: Option<GgmlType>,
    /// Threads for batches (-tb); this backend uses -t for all work.
    #[arg(long = "threads-batch")]
    pub threads_batch: Option<usize>,
    /// Addresses to listen on, comma-separated (`127.0.0.1,::1`).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// API key(s), comma-separated or repeated; clients send `Authorization: Bearer KEY`
    /// or `X-Api-Key: KEY`.
    #[arg(long = "api-key", value_delimiter = ',')]
    pub api_key: Vec<String>,
    /// A file of API keys, one per line (blank lines and lines starting with `#` skipped).
    #[arg(long = "api-key-file")]
    pub api_key_file: Option<PathBuf>,
    /// Host names the server answers, comma-separated (the Host header without its port;
    /// others get 403). Default: bound to a loopback address, that address, localhost,
    /// 127.0.0.1 and [::1], so that a page reaching it through DNS rebinding is refused;
    /// otherwise any. `*`: any.
    #[arg(long = "allowed-hosts", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Chat templates are always rendered with Jinja.
    #[arg(long)]
    pub jinja: bool,
    #[arg(long = "no-jinja")]
    pub no_jinja: bool,
    /// A chat template replacing the model's: a Jinja source, or the name of one of
    /// llama.cpp's built-in templates (chatml, llama3, mistral-v7, phi4, command-r, ...).
    #[arg(long = "chat-template")]
    pub chat_template: Option<String>,
    #[arg(long = "chat-template-file")]
    pub chat_template_file: Option<PathBuf>,
    /// A vision tower (an mmproj GGUF file, as llama.cpp's): chat messages may carry
    /// images (`image_url` parts with data URLs). Projectors: gemma3, mlp (LLaVA 1.5/1.6),
    /// idefics3.
    #[arg(long = "mmproj")]
    pub mmproj: Option<PathBuf>,
    /// No vision tower, even with --mmproj.
    #[arg(long = "no-mmproj")]
    pub no_mmproj: bool,
    /// deny: images come as data: URLs only; allow: the server fetches http(s) image URLs
    /// itself (any host it can reach, 10 s and the image's size limit a fetch).
    #[arg(long = "image-urls", value_parser = ["deny", "allow"], default_value = "deny")]
    pub image_urls: String,
    /// The fewest embeddings an image makes, where the tower's count follows the image
    /// (Idefics3); refused for towers of a fixed count (llama.cpp ignores it there).
    #[arg(long = "image-min-tokens")]
    pub image_min_tokens: Option<usize>,
    /// The most embeddings an image makes, where the tower's count follows the image.
    #[arg(long = "image-max-tokens")]
    pub image_max_tokens: Option<usize>,
    /// How the model writes tool calls: hermes (Qwen's `<tool_call>`), llama3, mistral, dsml
    /// (DeepSeek-V4's `<｜DSML｜tool_calls>`), qwen3-coder (Qwen 3.5's `<function=...>`) or
    /// generic (a JSON answer taught by the system prompt); default: read from the template.
    #[arg(long = "tool-format")]
    pub tool_format: Option<server::tools::ToolFormat>,
    /// on, off or auto: whether answers split out `<think>` reasoning, and the template's
    /// `enable_thinking` (auto: on where the template marks reasoning) unless a request's
    /// `chat_template_kwargs` sets it.
    #[arg(long = "reasoning", value_parser = ["on", "off", "auto"])]
    pub reasoning: Option<String>,
    /// Reasoning tokens a chat answer may spend before `</think>` is forced (-1: no limit,
    /// 0: none).
    #[arg(long = "reasoning-budget", default_value_t = -1, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(-1..))]
    pub reasoning_budget: i64,
    /// Written before the forced `</think>` when the budget is spent.
    #[arg(long = "reasoning-budget-message")]
    pub reasoning_budget_message: Option<String>,
    /// Default max tokens per request; -1: until the context is full.
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: usize,
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling (1.0: off).
    #[arg(long = "typical", default_value_t = 1.0)]
    pub typical: f32,
    /// Penalize repeating any of the last --repeat-last-n tokens (1.0: off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over (0: off, -1: the whole context).
    #[arg(
        long = "repeat-last-n",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub repeat_last_n: i64,
    #[arg(
        long = "presence-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,
    #[arg(
        long = "frequency-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,
    /// The sampler stages in order, separated by ';' (llama.cpp's names: penalties, top_k,
    /// typ_p, top_p, min_p, temperature; dry, xtc and top_n_sigma are inert here).
    #[arg(long = "samplers")]
    pub samplers: Option<String>,
    /// Default seed; -1: random per request.
    #[arg(short = 's', long = "seed", default_value_t = -1, allow_negative_numbers = true)]
    pub seed: i64,
    /// Serve Prometheus metrics at /metrics.
    #[arg(long)]
    pub metrics: bool,
    /// Serve embeddings at /v1/embeddings, /embedding and /embeddings, computed in the
    /// same steps as generations.
    #[arg(long, alias = "embedding")]
    pub embeddings: bool,
    /// After this many seconds without a request, release the model's memory on the device
    /// (weights, KV, buffers; the prefix cache is lost) until the next request (-1: never).
    #[arg(long = "sleep-idle-seconds", allow_negative_numbers = true)]
    pub sleep_idle_seconds: Option<i64>,
    /// Serve /rerank (and /reranking, /v1/rerank, /v1/reranking): documents scored against
    /// a query, as llama-server scores them.
    #[arg(long = "reranking", alias = "rerank")]
    pub reranking: bool,
    /// How embeddings pool the prompt's final states; default: the GGUF's
    /// `{arch}.pooling_type`, else `none` (a vector per token, /embedding only).
    #[arg(long, value_parser = ["none", "mean", "cls", "last"], requires = "embeddings")]
    pub pooling: Option<String>,
    /// Directory of the files `/slots/{id}?action=save|restore` write and read.
    #[arg(long = "slot-save-path")]
    pub slot_save_path: Option<PathBuf>,
    /// `/infill` prompts in suffix-prefix-middle order, as some code models prefer.
    #[arg(long = "spm-infill")]
    pub spm_infill: bool,
    /// /metrics answers without the API key (for a scraper on a trusted network).
    #[arg(long = "metrics-public")]
    pub metrics_public: bool,
    /// Origins browsers may call from, comma-separated: `*` any, `localhost` this machine's
    /// (any port). Default: any when --api-key is set (the key still guards every route),
    /// else `localhost`.
    #[arg(
        long = "cors-origins",
        alias = "cors",
        value_name = "ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// The methods a preflight allows.
    #[arg(long = "cors-methods", default_value = "GET, POST, DELETE, OPTIONS")]
    pub cors_methods: String,
    /// The request headers a preflight allows.
    #[arg(long = "cors-headers", default_value = "*")]
    pub cors_headers: String,
    #[arg(long = "cors-credentials", overrides_with = "no_cors_credentials")]
    pub cors_credentials: bool,
    /// Preflights answer `Access-Control-Allow-Credentials: false`.
    #[arg(long = "no-cors-credentials", overrides_with = "cors_credentials")]
    pub no_cors_credentials: bool,
    /// Router mode: serve every GGUF file in DIR (and each subdirectory's first, by the
    /// subdirectory's name), each loaded on the first request that names it.
    #[arg(long = "models-dir")]
    pub models_dir: Option<PathBuf>,
    /// Router mode: per-model flags, an INI file with a [NAME] section per model
    /// (`ctx-size = 8192`; `model = PATH` adds a model; [*] applies to all).
    #[arg(long = "models-preset")]
    pub models_preset: Option<PathBuf>,
    /// Router mode: at most N models loaded at once; the least recently used idle one is
    /// unloaded to make room.
    #[arg(long = "models-max", default_value_t = 4)]
    pub models_max: usize,
    /// Router mode: load models only through POST /models/load, not on request.
    #[arg(long = "no-models-autoload")]
    pub no_models_autoload: bool,
    /// Router mode: the models of repeated -m (written here from them).
    #[arg(long = "router-model", hide = true)]
    pub router_models: Vec<String>,
    /// Serve the web UI at / (the default).
    #[arg(long = "webui", overrides_with = "no_webui")]
    pub webui: bool,
    /// No web UI: / answers 404.
    #[arg(long = "no-webui", overrides_with = "webui")]
    pub no_webui: bool,
    #[arg(long)]
    pub slots: bool,
    /// Hide /slots.
    #[arg(long = "no-slots")]
    pub no_slots: bool,
    /// Names of the model, separated by commas (answers carry the alphabetically first, as
    /// llama-server's).
    #[arg(short = 'a', long = "alias")]
    pub alias: Option<String>,
    /// Tags listed with the model in /v1/models, separated by commas.
    #[arg(long = "tags", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// An answer that fills its slot drops tokens after the first `--keep` (or the
    /// request's `n_keep`) and goes on (llama-server's context shift; off by default).
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    pub context_shift: bool,
    #[arg(long = "no-context-shift", overrides_with = "context_shift")]
    pub no_context_shift: bool,
    /// Prompt tokens kept when the context shifts, for requests without `n_keep` (-1: the
    /// whole prompt).
    #[arg(long = "keep", default_value_t = 0, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i64).range(-1..))]
    pub keep: i64,
    /// Continuous batching is always on.
    #[arg(long = "cont-batching")]
    pub cont_batching: bool,
    #[arg(long = "flash-attn", num_args = 0..=1, default_missing_value = "on")]
    pub flash_attn: Option<String>,
    #[arg(
        long = "n-gpu-layers",
        alias = "gpu-layers",
        allow_hyphen_values = true
    )]
    pub n_gpu_layers: Option<String>,
    #[arg(long)]
    pub mlock: bool,
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// Drafter without a draft model: `ngram` (prompt lookup over the request's tokens;
    /// llama.cpp's ngram-* names are taken as this) or `draft-mtp` (the model's own
    /// multi-token-prediction blocks, `mtp` too; a model without them takes an MTP file's:
    /// -md FILE, or the `mtp-*.gguf` beside it); `draft-dspark`, `draft-dflash` and
    /// `draft-eagle3` without -md take the drafter file beside the model whose name holds
    /// `dspark-`, `dflash-` or `eagle3-`. With -md (but for `draft-mtp`), the file's
    /// architecture picks the drafter.
    #[arg(long = "spec-type")]
    pub spec_type: Option<String>,
    /// Draft tokens per slot and step, at most.
    #[arg(long = "spec-draft-n-max", alias = "draft-max", alias = "draft")]
    pub spec_draft_n_max: Option<usize>,
    /// Drafts shorter than this are not verified.
    #[arg(long = "spec-draft-n-min", alias = "draft-min")]
    pub spec_draft_n_min: Option<usize>,
    /// Stop a draft at a token the draft model gives less than this probability.
    #[arg(long = "spec-draft-p-min", alias = "draft-p-min")]
    pub spec_draft_p_min: Option<f32>,
    /// `adaptive`: draft as deep as the measured costs and acceptance say pays, per slot
    /// and step; `fixed`: always --spec-draft-n-max, as llama.cpp does.
    #[arg(long = "spec-policy", value_parser = ["adaptive", "fixed"], default_value = "adaptive")]
    pub spec_policy: String,
    /// Tokens the draft model's output head keeps, the most frequent ones (chosen once,
    /// stored beside the draft model); 0: the whole vocabulary. Output stays exact.
    #[arg(long = "spec-draft-vocab", default_value_t = 32768)]
    pub spec_draft_vocab: usize,
    /// Serve a model split across two machines: blocks L.. and the output head here, the
    /// embeddings and blocks 0..L on the box of --box (`tandem box --layers 0:L`).
    #[arg(long = "split-at", requires = "box_addr")]
    pub split_at: Option<usize>,
    /// The box's address (HOST:PORT).
    #[arg(long = "box", requires = "split_at")]
    pub box_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub box_key: crate::box_worker::LinkKeyArgs,
    /// TLS on the link to the box, trusting the certificates in this PEM file (a CA's, or
    /// the box's own); the box's certificate must name --box-tls-name, or the address of
    /// --box.
    #[arg(long = "box-tls-ca", requires = "box_addr")]
    pub box_tls_ca: Option<PathBuf>,
    /// The name the box's certificate must carry (a DNS name or an IP address).
    #[arg(long = "box-tls-name", requires = "box_tls_ca")]
    pub box_tls_name: Option<String>,
    /// Hidden states cross the link as f16 (half the bytes, no longer exact).
    #[arg(long = "split-f16")]
    pub split_f16: bool,
    /// Seconds a lost box is waited for (requests pause, then are replayed) before
    /// requests get 503 with Retry-After.
    #[arg(long = "box-grace", default_value_t = 10.0)]
    pub box_grace: f64,
    /// Rows per chunk of a prompt the box streams ahead of the steps (the box computes the
    /// next chunk while this stage computes the last; 2 chunks ahead at most; at most what
    /// fits a 256 MiB frame).
    #[arg(long = "box-chunk", default_value_t = split::head::DEFAULT_CHUNK as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub box_chunk: u32,
    /// Pipeline two cohorts of requests through the stages: the box computes one's step
    /// while this stage computes the other's. Pays when each stage has cores of its own
    /// and the link is slow; each forward has half the rows, so on one machine's shared
    /// cores it is slower (bench/results/README.md).
    #[arg(long = "box-pipeline")]
    pub box_pipeline: bool,
    /// Refuse to start when the memory plan exceeds this (e.g. 8G, 512M); default: the
    /// memory available.
    #[arg(long = "mem-limit", value_parser = parse_bytes)]
    pub mem_limit: Option<u64>,
    /// Requests that may wait for a slot; more get 503 with Retry-After.
    #[arg(long = "queue-limit", default_value_t = 256)]
    pub queue_limit: usize,
    /// How long a step may take while any request is writing its answer, so that others'
    /// prompts are read in chunks instead of freezing the streams: `auto` (2.5x the
    /// decoding step), a factor such as `4x`, milliseconds such as `400ms`, or `off`.
    #[arg(long = "step-budget", default_value = "auto", value_parser = engine::StepBudget::parse)]
    pub step_budget: engine::StepBudget,
    /// MiB of computed prompt prefixes kept in host memory past the KV pool, so that a
    /// conversation the pool gave up is read back instead of computed again: 0 none, -1 no
    /// limit (llama-server's flag; off by default here, since each finished request is then
    /// copied out of the pool). Refused for a split model, for recurrent states without
    /// snapshots (--ctx-checkpoints 0), and for a model with both states and sliding windows.
    #[arg(long = "cache-ram", visible_alias = "cram", default_value = "0", value_parser = parse_cache_ram, allow_hyphen_values = true)]
    pub cache_ram: usize,
    /// A folder where computed prompt prefixes are also kept on disk, one checksummed file
    /// per block of 16 tokens under a folder per model and KV shape, so that a restarted
    /// server reads a conversation back instead of computing it (files that do not match
    /// are ignored). Models as `--cache-ram`.
    #[arg(long = "cache-dir")]
    pub cache_dir: Option<PathBuf>,
    /// MiB the --cache-dir folder's block files may take, every model's together (default: no
    /// limit); past it the least recently used blocks are removed, the last of a conversation
    /// first, until a tenth is free.
    #[arg(long = "cache-dir-max", requires = "cache_dir", value_parser = clap::value_parser!(u64).range(1..))]
    pub cache_dir_max: Option<u64>,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long = "body-limit", default_value_t = 32 << 20)]
    pub body_limit: usize,
    /// Seconds a client has to send a request's head; also how long a kept-alive
    /// connection may stay idle.
    #[arg(long = "timeout-header", default_value_t = 15.0)]
    pub timeout_header: f64,
    /// Seconds a client has to send a request's body (408 after).
    #[arg(long = "timeout-body", default_value_t = 60.0)]
    pub timeout_body: f64,
    /// Connections open at once; more are closed as soon as they are accepted.
    #[arg(long = "max-connections", default_value_t = 1024)]
    pub max_connections: usize,
}

/// A positive, finite number of seconds from flag `name`.
fn seconds(name: &str, v: f64) -> Result<std::time::Duration, CliError> {
    if v.is_finite() && v > 0.0 {
        Ok(std::time::Duration::from_secs_f64(v))
    } else {
        Err(CliError::Usage(format!(
            "{name} takes a positive number of seconds, got {v}"
        )))
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| (v * mult as f64) as u64)
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 8G, 512M, 1048576)"))
}

impl ServeArgs {
    /// One line per accepted flag that does nothing here.
    fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let mut say = |cond: bool, msg: &str| {
            if cond {
                w.push(msg.to_string());
            }
        };
        say(
            self.n_gpu_layers.is_some() && self.model.context_config().device != DeviceKind::Gpu,
            "-ngl: no GPU in use (--device cpu or reference, or auto without a real GPU): the whole model runs on the CPU",
        );
        say(
            self.keep != 0 && !self.context_shift,
            "--keep: without --context-shift the context is never shifted, so nothing is kept; the flag does nothing",
        );
        say(self.flash_attn.is_some(), "--flash-attn: attention is always computed block by block (on the GPU, split by position as flash attention is); the flag does nothing");
        say(
            self.mlock,
            "--mlock: weights are not locked in memory; the flag does nothing",
        );
        say(
            self.no_mmap,
            "--no-mmap: weights are always memory-mapped; the flag does nothing",
        );
        say(
            self.no_jinja,
            "--no-jinja: chat templates are always rendered with Jinja",
        );
        say(
            self.threads_batch
                .is_some_and(|tb| Some(tb) != self.model.threads),
            "-tb: this backend uses the -t threads for prompts and generation alike",
        );
        say(
            self.model_draft.is_none()
                && self.spec_type.is_none()
                && (self.spec_draft_n_max.is_some()
                    || self.spec_draft_n_min.is_some()
                    || self.spec_draft_p_min.is_some()),
            "--spec-draft-*: no drafter is set (-md or --spec-type ngram|draft-mtp); these flags do nothing",
        );
        w
    }

    fn config(self) -> Result<server::ServerConfig, CliError> {
        if let Some(v) = self.cache_type_v.filter(|&v| v != self.model.cache_type) {
            return Err(CliError::Usage(format!(
                "-ctv {} differs from -ctk {}: this backend stores keys and values in one type; give both the same",
                v.to_string().to_lowercase(),
                self.model.cache_type.to_string().to_lowercase()
            )));
        }
        if self.slots && self.no_slots {
            return Err(CliError::Usage(
                "--slots and --no-slots contradict each other".into(),
            ));
        }
        let chat_template = match (&self.chat_template, &self.chat_template_file) {
            (Some(_), Some(_)) => {
                return Err(CliError::Usage(
                    "give --chat-template or --chat-template-file, not both".into(),
                ))
            }
            (Some(t), None) => {
                Some(text::builtin_templates::builtin(t).unwrap_or_else(|| t.clone()))
            }
            (None, Some(p)) => Some(std::fs::read_to_string(p).map_err(|e| CliError::io(p, e))?),
            (None, None) => None,
        };
        let api_keys = api_keys(&self.api_key, self.api_key_file.as_deref())?;
        let keyed = !api_keys.is_empty();
        let (cors, limits) = (self.cors(keyed), self.limits()?);
        let allowed_hosts = allowed_hosts(&self.host, &self.allowed_hosts);
        let ctx = self.model.context_config();
        let (device, gpu_layers) = self.gpu_layers(ctx.device)?;
        let model_path = self.model.path()?;
        let speculation = self.speculation(&model_path)?;
        let credentials = split::Credentials {
            key: self.box_key.key()?,
            tls: match &self.box_tls_ca {
                Some(ca) => Some(split::tls::TlsClient::from_pem(
                    ca,
                    self.box_tls_name.as_deref(),
                )?),
                None => None,
            },
        };
        Ok(server::ServerConfig {
            model_path,
            alias: self.alias,
            tags: self
                .tags
                .iter()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect(),
            host: self.host,
            port: self.port,
            engine: engine::EngineConfig {
                n_ctx: self.model.ctx_size,
                n_parallel: self.parallel,
                kv_unified: self.kv_unified,
                n_batch: self.batch.max(self.parallel),
                n_ubatch: self.model.ubatch.clamp(1, self.batch.max(1)),
                n_threads: ctx.n_threads,
                kv_type: ctx.kv_type,
                queue_limit: self.queue_limit,
                device,
                step_budget: self.step_budget,
                swa_full: self.model.swa_full,
                ctx_checkpoints: self.model.ctx_checkpoints,
                cache_ram_mib: self.cache_ram,
                cache_dir: self.cache_dir.clone().map(|dir| {
                    &*Box::leak(Box::new(engine::DiskTier {
                        dir,
                        max_bytes: self.cache_dir_max.map(|m| m << 20),
                    }))
                }),
            },
            api_keys,
            allowed_hosts,
            defaults: server::Defaults {
                sampling: engine::SamplerConfig {
                    temperature: self.temp,
                    top_k: self.top_k,
                    top_p: self.top_p,
                    min_p: self.min_p,
                    typical_p: self.typical,
                    penalties: engine::sampling::Penalties {
                        last_n: usize::try_from(self.repeat_last_n).unwrap_or(usize::MAX),
                        repeat: self.repeat_penalty,
                        frequency: self.frequency_penalty,
                        presence: self.presence_penalty,
                    },
                    order: match &self.samplers {
                        None => engine::sampling::Order::default(),
                        Some(s) => {
                            engine::sampling::Order::from_names(s.split(';')).map_err(|n| {
                                CliError::Usage(format!("--samplers: unknown sampler '{n}'"))
                            })?
                        }
                    },
                    seed: 0,
                },
                seed: Some(self.seed).filter(|&s| s >= 0),
                n_predict: usize::try_from(self.n_predict).ok().filter(|&n| n > 0),
                reasoning_budget: usize::try_from(self.reasoning_budget).ok(),
                reasoning_budget_message: self.reasoning_budget_message.clone().unwrap_or_default(),
                context_shift: self.context_shift,
                n_keep: self.keep,
            },
            chat_template,
            tool_format: self.tool_format,
            reasoning: match self.reasoning.as_deref() {
                Some("on") => server::Reasoning::On,
                Some("off") => server::Reasoning::Off,
                _ => server::Reasoning::Auto,
            },
            metrics: self.metrics,
            embeddings: self.embeddings,
            reranking: self.reranking,
            gcp: server::gcp::Gcp::from_env(|k| std::env::var(k).ok()),
            sleep_idle: match self.sleep_idle_seconds {
                None | Some(..=0) => None,
                Some(s) => Some(std::time::Duration::from_secs(s as u64)),
            },
            slot_save_path: self.slot_save_path.clone(),
            spm_infill: self.spm_infill,
            pull: Some(pull::for_ollama),
            pooling: self.pooling.as_deref().map(|p| match p {
                "mean" => engine::Pooling::Mean,
                "cls" => engine::Pooling::Cls,
                "last" => engine::Pooling::Last,
                _ => engine::Pooling::None,
            }),
            metrics_public: self.metrics_public,
            cors,
            slots: !self.no_slots,
            webui: !self.no_webui,
            rope: self.model.rope.overrides()?,
            lazy: self.model.lazy_mode,
            load_mode: self.model.load_mode,
            lora: self.model.lora_settings()?,
            mmproj: self.mmproj.clone().filter(|_| !self.no_mmproj),
            image_urls: self.image_urls == "allow",
            image_tokens: (self.image_min_tokens, self.image_max_tokens),
            mem_limit: self.mem_limit,
            body_limit: self.body_limit,
            limits,
            speculation,
            split: self
                .split_at
                .zip(self.box_addr)
                .map(|(at, box_addr)| server::SplitSettings {
                    at,
                    box_addr,
                    states: if self.split_f16 {
                        split::head::StateType::F16
                    } else {
                        split::head::StateType::F32
                    },
                    grace: std::time::Duration::from_secs_f64(self.box_grace.max(0.0)),
                    chunk: self.box_chunk as usize,
                    pipeline: self.box_pipeline,
                    credentials,
                }),
            gpu_layers,
        })
    }

    /// Which origins browsers may call from (any only with a key, by default this machine's).
    pub fn cors(&self, keyed: bool) -> server::cors::Cors {
        server::cors::Cors {
            origins: server::cors::Origins::parse(
                (!self.cors_origins.is_empty())
                    .then(|| self.cors_origins.join(","))
                    .as_deref(),
                keyed,
            ),
            methods: self.cors_methods.clone(),
            headers: self.cors_headers.clone(),
            credentials: !self.no_cors_credentials,
        }
    }

    /// Deadlines for clients and the cap on connections.
    pub fn limits(&self) -> Result<server::Limits, CliError> {
        Ok(server::Limits {
            header_timeout: seconds("--timeout-header", self.timeout_header)?,
            body_timeout: seconds("--timeout-body", self.timeout_body)?,
            max_connections: self.max_connections.max(1),
        })
    }

    /// The engine's device and the blocks it holds, from `-ngl` (llama-server's meaning:
    /// the last N blocks and the output head on the GPU, the rest on the CPU; `-1`, `all`
    /// or more than the blocks: all of it; `0`: none, the CPU computes everything).
    fn gpu_layers(&self, device: DeviceKind) -> Result<(DeviceKind, Option<usize>), CliError> {
        let Some(v) = self.n_gpu_layers.as_deref() else {
            return Ok((device, None));
        };
        let n = match v {
            "-1" | "all" | "auto" => None,
            v => Some(v.parse::<usize>().map_err(|_| {
                CliError::Usage(format!(
                    "-ngl: '{v}' is not a number of layers (a count, -1 or all)"
                ))
            })?),
        };
        Ok(match (device, n) {
            (DeviceKind::Gpu, Some(0)) => (DeviceKind::Cpu, None),
            (DeviceKind::Gpu, n) => (device, n),
            _ => (device, None),
        })
    }

    /// The drafter the flags name; a drafter file named by `--spec-type` alone is the
    /// sidecar beside `model` ([`crate::sidecar`]).
    fn speculation(&self, model: &Path) -> Result<Option<server::SpecSettings>, CliError> {
        let drafter = match (&self.model_draft, self.spec_type.as_deref()) {
            (None, None | Some("none")) => return Ok(None),
            (Some(m), Some("draft-mtp" | "mtp")) => server::Drafter::Mtp(Some(pull::resolve(
                m,
                self.model.cache.dir.as_deref(),
            )?)),
            (None, Some("draft-mtp" | "mtp")) => match crate::sidecar::has_nextn(model) {
                true => server::Drafter::Mtp(None),
                false => server::Drafter::Mtp(crate::sidecar::find(model, "mtp-")),
            },
            (None, Some(t @ ("draft-eagle3" | "draft-dflash" | "draft-dspark" | "draft-simple"))) => {
                let keyword = crate::sidecar::keyword(t);
                match keyword.and_then(|k| crate::sidecar::find(model, k)) {
                    Some(file) => server::Drafter::Model(file),
                    None => {
                        let beside = keyword.map_or(String::new(), |k| {
                            format!(", or put a {k}*.gguf beside the model")
                        });
                        return Err(CliError::Usage(format!(
                            "--spec-type {t} drafts with a drafter file: give it as -md FILE{beside}"
                        )));
                    }
                }
            }
            (Some(_), Some(t)) if !t.starts_with("draft") => {
                return Err(CliError::Usage(format!(
                    "-md and --spec-type {t} both name a drafter; give one"
                )))
            }
            (Some(m), _) => {
                server::Drafter::Model(pull::resolve(m, self.model.cache.dir.as_deref())?)
            }
            (None, Some(t)) if t == "ngram" || t.starts_with("ngram-") => server::Drafter::Ngram,
            (None, Some(t)) => {
                return Err(CliError::Usage(format!(
                    "--spec-type {t}: this server drafts with -md MODEL (a draft model or an EAGLE-3 drafter), --spec-type ngram or --spec-type draft-mtp"
                )))
            }
        };
        let d = engine::speculative::SpecConfig::default();
        let config = engine::speculative::SpecConfig {
            n_max: self.spec_draft_n_max.unwrap_or(d.n_max),
            n_min: self.spec_draft_n_min.unwrap_or(d.n_min),
            p_min: self.spec_draft_p_min.unwrap_or(d.p_min),
            policy: if self.spec_policy == "fixed" {
                engine::speculative::PolicyKind::Fixed
            } else {
                engine::speculative::PolicyKind::Adaptive
            },
        };
        if config.n_max == 0 || config.n_max > 64 {
            return Err(CliError::Usage(format!(
                "--spec-draft-n-max {} must be between 1 and 64",
                config.n_max
            )));
        }
        if !(0.0..=1.0).contains(&config.p_min) {
            return Err(CliError::Usage(format!(
                "--spec-draft-p-min {} must be between 0 and 1",
                config.p_min
            )));
        }
        Ok(Some(server::SpecSettings {
            drafter,
            config,
            draft_vocab: self.spec_draft_vocab,
        }))
    }
}

pub fn execute(a: ServeArgs) -> Result<(), CliError> {
    if crate::router::wanted(&a) {
        return crate::router::execute(a);
    }
    for w in a.warnings() {
        eprintln!("warning: {w}");
    }
    server::run(a.config()?)?;
    Ok(())
}

/// `--cache-ram`: MiB, or -1 for no limit.
fn parse_cache_ram(s: &str) -> Result<usize, String> {
    match s.trim() {
        "-1" => Ok(usize::MAX >> 20),
        v => v
            .parse()
            .map_err(|_| format!("'{s}' is not a size in MiB (or -1 for no limit)")),
    }
}
