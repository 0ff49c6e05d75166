//! Chat templates: the model's Jinja template rendered with `minijinja`, in an environment
//! that behaves like Hugging Face's `apply_chat_template`.

use std::collections::BTreeMap;

use gguf::Metadata;
use minijinja::{Environment, Value};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::jinja_fns;

const TEMPLATE_NAME: &str = "chat_template";

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Everything a render takes besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// End the prompt with the opening of an assistant turn.
    pub add_generation_prompt: bool,
    /// Tool definitions, passed to the template as `tools` (JSON schema objects).
    pub tools: Option<serde_json::Value>,
    /// Further template variables (`enable_thinking`, `reasoning_effort`, `documents`, ...).
    /// They cannot replace `messages`, `add_generation_prompt`, `tools`, `bos_token` or
    /// `eos_token`.
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// A compiled chat template.
///
/// The environment matches Hugging Face's: `trim_blocks` and `lstrip_blocks` on, Python string
/// and dict methods (`.strip()`, `.startswith()`, `.split()`, `.items()`, `.get()`, ...) through
/// `minijinja-contrib`'s pycompat layer, `{% break %}`/`{% continue %}`, `raise_exception`,
/// `strftime_now` (UTC) and a `tojson` that writes like Python's `json.dumps`. Templates see
/// `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, `tools` when given, and the
/// extra variables of [`RenderOptions`].
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

/// Where a model's chat template comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSource {
    /// `tokenizer.chat_template`.
    File(String),
    /// The file has none; the built-in template `name` is the architecture's.
    Builtin { name: &'static str, source: String },
}

impl TemplateSource {
    /// The file's template, else the built-in one of its `general.architecture`, else
    /// `None`.
    pub fn of(md: &Metadata) -> Result<Option<TemplateSource>> {
        if let Some(s) = md.opt_str("tokenizer.chat_template")? {
            return Ok(Some(TemplateSource::File(s.to_string())));
        }
        let arch = md.opt_str("general.architecture")?.unwrap_or_default();
        Ok(match arch {
            "gemma" | "gemma2" | "gemma3" => Some(TemplateSource::Builtin {
                name: "gemma",
                source: crate::builtin_templates::builtin("gemma").expect("gemma is built in"),
            }),
            _ => None,
        })
    }

    pub fn text(&self) -> &str {
        match self {
            TemplateSource::File(s) => s,
            TemplateSource::Builtin { source, .. } => source,
        }
    }
}

impl std::fmt::Display for TemplateSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateSource::File(_) => write!(f, "the model file's"),
            TemplateSource::Builtin { name, .. } => {
                write!(
                    f,
                    "built-in '{name}' (the file has none; chosen by architecture)"
                )
            }
        }
    }
}

impl ChatTemplate {
    /// The model's template ([`TemplateSource::of`]), with BOS/EOS texts from the vocabulary.
    pub fn from_gguf(md: &Metadata) -> Result<Self> {
        let source = TemplateSource::of(md)?.ok_or(Error::NoChatTemplate)?;
        Self::for_model(source.text(), md)
    }

    /// Compiles `source` with BOS/EOS texts from `md`'s vocabulary.
    pub fn for_model(source: &str, md: &Metadata) -> Result<Self> {
        let token_text = |key: &str| -> Result<String> {
            let Some(id) = md.opt_u32(key)? else {
                return Ok(String::new());
            };
            let tokens = md.array("tokenizer.ggml.tokens")?;
            Ok(tokens
                .get(id as usize)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string())
        };
        let bos = token_text("tokenizer.ggml.bos_token_id")?;
        let eos = token_text("tokenizer.ggml.eos_token_id")?;
        Self::new(source, &bos, &eos)
    }

    /// Compiles `source`; `bos_token` and `eos_token` are the texts the template sees under
    /// those names. A syntax error is reported here, with its line.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", jinja_fns::raise_exception);
        env.add_function("strftime_now", jinja_fns::strftime_now);
        env.add_filter("tojson", jinja_fns::tojson);
        env.add_filter("from_json", jinja_fns::from_json);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The prompt for `messages`, ending with the opening of an assistant turn when
    /// `add_generation_prompt` is set.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with(
            messages,
            &RenderOptions {
                add_generation_prompt,
                ..RenderOptions::default()
            },
        )
    }

    /// The prompt for `messages` of any serializable shape (so callers can pass tool calls,
    /// names or structured content the template understands).
    pub fn render_with<M: Serialize>(
        &self,
        messages: &[M],
        options: &RenderOptions,
    ) -> Result<String> {
        let mut ctx: BTreeMap<String, Value> = options
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), Value::from_serialize(v)))
            .collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(options.add_generation_prompt),
        );
        ctx.insert("bos_token".into(), Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token".into(), Value::from(self.eos_token.as_str()));
        match &options.tools {
            Some(tools) => ctx.insert("tools".into(), Value::from_serialize(tools)),
            None => ctx.remove("tools"),
        };
        let template = self.env.get_template(TEMPLATE_NAME)?;
        Ok(template.render(Value::from(ctx))?)
    }

    /// The template's BOS text.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The template's EOS text.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}
