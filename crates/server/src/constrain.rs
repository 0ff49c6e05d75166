//! The request fields of the sampler chain past the basic ones (penalties, typical-p, the
//! stage order, `logit_bias`) and of structured output (`response_format`, `json_schema`,
//! `grammar`, vLLM's `guided_*`), validated into the engine's types. A llama.cpp sampler
//! tandem does not implement is refused unless it is given its inert value.

use engine::sampling::{Dry, LogitBias, Order, Penalties};
use engine::SamplerConfig;
use serde::Deserialize;
use serde_json::Value;
use text::{Constraint, GrammarSpec};

use crate::error::ApiError;
use crate::state::Ready;

/// The raw fields, flattened into the request.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct RawChain {
    pub typical_p: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub repeat_last_n: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logit_bias: Option<Value>,
    pub samplers: Option<Value>,
    pub dry_multiplier: Option<f64>,
    pub dry_base: Option<f64>,
    pub dry_allowed_length: Option<i64>,
    pub dry_penalty_last_n: Option<i64>,
    pub dry_sequence_breakers: Option<Vec<String>>,
    pub xtc_probability: Option<f64>,
    pub top_n_sigma: Option<f64>,
    pub mirostat: Option<i64>,
    pub dynatemp_range: Option<f64>,
    pub response_format: Option<Value>,
    pub json_schema: Option<Value>,
    pub grammar: Option<String>,
    pub guided_json: Option<Value>,
    pub guided_regex: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_grammar: Option<String>,
}

/// `v` within `lo..=hi`, as the engine's `f32`.
fn range(name: &str, v: Option<f64>, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    Ok(crate::validate::range(name, v, lo, hi)?.map(|x| x as f32))
}

/// Refuses a llama.cpp sampler tandem lacks unless it has its inert value.
fn inert<T: PartialEq + std::fmt::Display>(
    name: &str,
    v: Option<T>,
    off: T,
) -> Result<(), ApiError> {
    match v {
        Some(x) if x != off => Err(ApiError::invalid(
            name,
            format!("{name} is not implemented by tandem (only {off}, which turns it off)"),
        )),
        _ => Ok(()),
    }
}

impl RawChain {
    /// The chain's settings over `base` (the server's defaults and the basic fields).
    pub fn sampling(&self, base: SamplerConfig) -> Result<SamplerConfig, ApiError> {
        inert("xtc_probability", self.xtc_probability, 0.0)?;
        inert("top_n_sigma", self.top_n_sigma, -1.0)?;
        inert("mirostat", self.mirostat, 0)?;
        inert("dynatemp_range", self.dynatemp_range, 0.0)?;
        let d = base.penalties;
        let last_n = match self.repeat_last_n {
            None => d.last_n,
            Some(-1) => usize::MAX,
            Some(n) if n >= 0 => n as usize,
            Some(n) => {
                return Err(ApiError::invalid(
                    "repeat_last_n",
                    format!("repeat_last_n must be -1 (the whole context) or at least 0, got {n}"),
                ))
            }
        };
        let penalties = Penalties {
            last_n,
            repeat: range("repeat_penalty", self.repeat_penalty, 0.0, 100.0)?.unwrap_or(d.repeat),
            frequency: range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?
                .unwrap_or(d.frequency),
            presence: range("presence_penalty", self.presence_penalty, -2.0, 2.0)?
                .unwrap_or(d.presence),
        };
        if penalties.repeat == 0.0 {
            return Err(ApiError::invalid(
                "repeat_penalty",
                "repeat_penalty must be positive (1.0 turns it off)",
            ));
        }
        let order = match &self.samplers {
            None => base.order,
            Some(v) => samplers(v)?,
        };
        Ok(SamplerConfig {
            typical_p: range("typical_p", self.typical_p, 0.0, 1.0)?.unwrap_or(base.typical_p),
            penalties,
            order,
            ..base
        })
    }

    /// `logit_bias` as OpenAI (`{"id": bias}`) or llama-server (`[[id, bias]]`, a text in
    /// place of an id standing for each of its tokens, `false` for a ban) gives it.
    pub fn logit_bias(&self, ready: &Ready) -> Result<LogitBias, ApiError> {
        let Some(v) = &self.logit_bias else {
            return Ok(Vec::new());
        };
        let bad = |m: String| ApiError::invalid("logit_bias", format!("logit_bias: {m}"));
        let pairs: Vec<(Value, &Value)> = match v {
            Value::Object(m) => m
                .iter()
                .map(|(k, b)| (Value::String(k.clone()), b))
                .collect(),
            Value::Array(a) => a
                .iter()
                .map(|p| match p.as_array().map(Vec::as_slice) {
                    Some([k, b]) => Ok((k.clone(), b)),
                    _ => Err(bad(format!("{p} is not a [token, bias] pair"))),
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(bad(
                    "must be an object or a list of [token, bias] pairs".into()
                ))
            }
        };
        let n_vocab = ready.tok.n_vocab();
        let mut out = Vec::new();
        for (k, b) in pairs {
            let bias = match b {
                Value::Bool(false) => f32::NEG_INFINITY,
                Value::Number(n) => match n.as_f64().filter(|x| x.is_finite()) {
                    Some(x) => x as f32,
                    None => return Err(bad(format!("bias {n} is not a finite number"))),
                },
                other => return Err(bad(format!("bias {other} is not a number or false"))),
            };
            let ids = match &k {
                Value::Number(n) => vec![n
                    .as_u64()
                    .ok_or_else(|| bad(format!("{n} is not a token id")))?],
                Value::String(s) => match s.parse::<u64>() {
                    Ok(id) => vec![id],
                    Err(_) => ready
                        .tok
                        .encode(s, false, false)
                        .map_err(|e| bad(format!("cannot tokenize {s:?}: {e}")))?
                        .into_iter()
                        .map(u64::from)
                        .collect(),
                },
                other => return Err(bad(format!("{other} is not a token id or text"))),
            };
            for id in ids {
                if id >= n_vocab as u64 {
                    return Err(bad(format!(
                        "token id {id} is outside the vocabulary of {n_vocab}"
                    )));
                }
                out.push((id as u32, bias));
            }
        }
        Ok(out)
    }

    /// The grammar the request constrains its answer to, with the field that gave it.
    pub fn grammar_spec(&self) -> Result<Option<(String, GrammarSpec)>, ApiError> {
        let mut given: Vec<(String, GrammarSpec)> = Vec::new();
        if let Some(rf) = &self.response_format {
            if let Some(g) = response_format(rf)? {
                given.push(g);
            }
        }
        if let Some(s) = &self.json_schema {
            given.push(("json_schema".into(), GrammarSpec::JsonSchema(s.clone())));
        }
        if let Some(g) = &self.grammar {
            let spec = match g.trim_start().strip_prefix("%llguidance") {
                Some(_) => GrammarSpec::Lark(g.clone()),
                None => GrammarSpec::Gbnf(g.clone()),
            };
            given.push(("grammar".into(), spec));
        }
        if let Some(s) = &self.guided_json {
            let schema = match s {
                Value::String(t) => serde_json::from_str(t).map_err(|e| {
                    ApiError::invalid("guided_json", format!("guided_json is not JSON: {e}"))
                })?,
                v => v.clone(),
            };
            given.push(("guided_json".into(), GrammarSpec::JsonSchema(schema)));
        }
        if let Some(r) = &self.guided_regex {
            given.push(("guided_regex".into(), GrammarSpec::Regex(r.clone())));
        }
        if let Some(choices) = &self.guided_choice {
            if choices.is_empty() {
                return Err(ApiError::invalid(
                    "guided_choice",
                    "guided_choice must not be empty",
                ));
            }
            let alts: Vec<String> = choices.iter().map(|c| regex_escape(c)).collect();
            given.push(("guided_choice".into(), GrammarSpec::Regex(alts.join("|"))));
        }
        if let Some(g) = &self.guided_grammar {
            given.push(("guided_grammar".into(), GrammarSpec::Lark(g.clone())));
        }
        if given.len() > 1 {
            let names: Vec<&str> = given.iter().map(|g| g.0.as_str()).collect();
            return Err(ApiError::invalid(
                &given[1].0,
                format!("only one constraint may be given, got {}", names.join(", ")),
            ));
        }
        Ok(given.pop())
    }
}

/// llama-server's `samplers`: a list of names or a string of letters.
fn samplers(v: &Value) -> Result<Order, ApiError> {
    let bad = |m: String| ApiError::invalid("samplers", format!("samplers: {m}"));
    match v {
        Value::String(s) => {
            Order::from_chars(s).map_err(|c| bad(format!("unknown sampler letter '{c}'")))
        }
        Value::Array(a) => {
            let names: Option<Vec<&str>> = a.iter().map(Value::as_str).collect();
            let names = names.ok_or_else(|| bad("the list must hold names".into()))?;
            Order::from_names(names).map_err(|n| bad(format!("unknown sampler '{n}'")))
        }
        _ => Err(bad("must be a list of names or a string of letters".into())),
    }
}

/// llama.cpp's default DRY sequence breakers.
pub(crate) const DRY_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];

impl RawChain {
    /// DRY, when `dry_multiplier` is above 0: breakers are the tokens whose text holds one
    /// of `dry_sequence_breakers` (llama.cpp's four by default).
    pub fn dry(&self, ready: &Ready) -> Result<Option<Dry>, ApiError> {
        let Some(multiplier) = range("dry_multiplier", self.dry_multiplier, 0.0, 100.0)? else {
            return Ok(None);
        };
        if multiplier == 0.0 {
            return Ok(None);
        }
        let base = range("dry_base", self.dry_base, 1.0, 100.0)?.unwrap_or(1.75);
        let allowed_length = match self.dry_allowed_length {
            None => 2,
            Some(n) if (1..=1000).contains(&n) => n as usize,
            Some(n) => {
                return Err(ApiError::invalid(
                    "dry_allowed_length",
                    format!("dry_allowed_length must be between 1 and 1000, got {n}"),
                ))
            }
        };
        let last_n = match self.dry_penalty_last_n {
            None | Some(-1) => usize::MAX,
            Some(n) if n >= 0 => n as usize,
            Some(n) => {
                return Err(ApiError::invalid(
                    "dry_penalty_last_n",
                    format!(
                        "dry_penalty_last_n must be -1 (the whole context) or at least 0, got {n}"
                    ),
                ))
            }
        };
        let given: Vec<&str> = match &self.dry_sequence_breakers {
            Some(v) if v.iter().any(String::is_empty) => {
                return Err(ApiError::invalid(
                    "dry_sequence_breakers",
                    "dry_sequence_breakers must not hold an empty string",
                ))
            }
            Some(v) => v.iter().map(String::as_str).collect(),
            None => DRY_BREAKERS.to_vec(),
        };
        let tok = &ready.tok;
        let breakers = (0..tok.n_vocab() as u32)
            .filter(|&id| {
                let piece = tok.token_to_piece(id);
                given.iter().any(|b| {
                    let b = b.as_bytes();
                    piece.len() >= b.len() && piece.windows(b.len()).any(|w| w == b)
                })
            })
            .collect();
        Ok(Some(Dry {
            multiplier,
            base,
            allowed_length,
            last_n,
            breakers,
        }))
    }
}

/// `response_format`: `text`, `json_object` (with llama-server's optional `schema`) or
/// `json_schema` (`{json_schema: {name, schema, strict}}`).
fn response_format(rf: &Value) -> Result<Option<(String, GrammarSpec)>, ApiError> {
    let kind = rf.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid("response_format.type", "response_format.type is required")
    })?;
    Ok(match kind {
        "text" => None,
        "json_object" => Some(match rf.get("schema") {
            Some(s) => (
                "response_format.schema".into(),
                GrammarSpec::JsonSchema(s.clone()),
            ),
            None => ("response_format".into(), GrammarSpec::JsonObject),
        }),
        "json_schema" => {
            let js = rf.get("json_schema").ok_or_else(|| {
                ApiError::invalid(
                    "response_format.json_schema",
                    "response_format.json_schema is required with type json_schema",
                )
            })?;
            match js.get("schema") {
                Some(s) => Some((
                    "response_format.json_schema.schema".into(),
                    GrammarSpec::JsonSchema(s.clone()),
                )),
                None => Some((
                    "response_format.json_schema".into(),
                    GrammarSpec::JsonObject,
                )),
            }
        }
        other => {
            return Err(ApiError::invalid(
                "response_format.type",
                format!(
                    "response_format.type '{other}' is not one of text, json_object, json_schema"
                ),
            ))
        }
    })
}

/// `s` as a regex matching exactly itself.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~/\"".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Compiles `spec` (given by `field`) against the model's vocabulary; an error names the
/// field.
pub fn compile(ready: &Ready, field: &str, spec: &GrammarSpec) -> Result<Constraint, ApiError> {
    let grammars = ready.grammars().map_err(|e| {
        ApiError::invalid(
            field,
            format!("constrained decoding is unavailable for this model: {e}"),
        )
    })?;
    grammars
        .compile(spec)
        .map_err(|e| ApiError::invalid(field, format!("{field} does not compile: {e}")))
}
