//! Token kinds and special token ids from GGUF metadata, with llama.cpp's rules for the ids
//! that files leave implicit (end-of-turn, fill-in-the-middle) and for end of generation.

use gguf::Metadata;

use crate::error::{Error, Result};

/// What a vocabulary entry is, from `tokenizer.ggml.token_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// Ordinary text; its spelling is byte-level encoded.
    Normal,
    Unknown,
    /// A special token (`<|im_end|>`): matched in text only when special parsing is asked
    /// for, and rendered as nothing unless asked for.
    Control,
    /// An added token that is always matched in text and always rendered (`<tool_call>`).
    UserDefined,
    /// A placeholder that is never produced from text and renders as nothing.
    Unused,
    Byte,
    Undefined,
}

impl TokenKind {
    /// The kind for a GGUF token type code (llama.cpp's `LLAMA_TOKEN_TYPE_*`).
    pub fn from_gguf(code: i64) -> Self {
        match code {
            1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Undefined,
        }
    }

    /// Whether the token is cut out of text before BPE: control and unknown tokens only when
    /// special parsing is on, user-defined tokens always.
    pub(crate) fn matched_in_text(self, parse_special: bool) -> bool {
        match self {
            TokenKind::UserDefined => true,
            TokenKind::Control | TokenKind::Unknown => parse_special,
            _ => false,
        }
    }
}

/// Texts llama.cpp recognises as end-of-generation tokens.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// Texts llama.cpp takes as the end-of-turn token when `tokenizer.ggml.eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<PRE>",
    "▁<PRE>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<SUF>",
    "▁<SUF>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<MID>",
    "▁<MID>",
];

/// A model's fill-in-the-middle tokens: prefix, suffix and middle markers, and the
/// repository and file separators of repo-level prompts where it has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: u32,
    pub suf: u32,
    pub mid: u32,
    pub rep: Option<u32>,
    pub sep: Option<u32>,
}

/// Special token ids and the end-of-generation set.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    /// Sorted, no duplicates.
    pub eog: Vec<u32>,
    pub fim: Option<FimTokens>,
}

/// An optional token id key, checked against the vocabulary size.
fn id_key(md: &Metadata, key: &'static str, n_vocab: usize) -> Result<Option<u32>> {
    match md.opt_u32(key)? {
        Some(id) if id as usize >= n_vocab => {
            Err(Error::SpecialTokenOutOfRange { key, id, n_vocab })
        }
        other => Ok(other),
    }
}

/// The id of the first token (lowest id) whose text is in `texts`.
fn find_text(texts: &[&str], wanted: &[&str]) -> Option<u32> {
    texts
        .iter()
        .position(|t| wanted.contains(t))
        .map(|i| i as u32)
}

/// Reads the special ids and computes the end-of-generation set the way llama.cpp does:
/// FIM pad/repo/separator tokens, every token whose text is in [`EOG_TEXTS`], and EOS, EOT and
/// EOM. Tokens found by their text are forced to [`TokenKind::Control`], as llama.cpp does
/// with "control-looking" tokens the converter left normal.
pub(crate) fn read(md: &Metadata, texts: &[&str], kinds: &mut [TokenKind]) -> Result<SpecialIds> {
    let n = texts.len();
    let bos = id_key(md, "tokenizer.ggml.bos_token_id", n)?;
    let eos = id_key(md, "tokenizer.ggml.eos_token_id", n)?;
    let by_key_or_text = |key, wanted: &[&str]| -> Result<Option<u32>> {
        Ok(id_key(md, key, n)?.or_else(|| find_text(texts, wanted)))
    };
    let eot = by_key_or_text("tokenizer.ggml.eot_token_id", EOT_TEXTS)?;
    let eom = by_key_or_text("tokenizer.ggml.eom_token_id", EOM_TEXTS)?;
    let fim_pad = by_key_or_text("tokenizer.ggml.fim_pad_token_id", FIM_PAD_TEXTS)?;
    let fim_rep = by_key_or_text("tokenizer.ggml.fim_rep_token_id", FIM_REP_TEXTS)?;
    let fim_sep = by_key_or_text("tokenizer.ggml.fim_sep_token_id", FIM_SEP_TEXTS)?;
    let fim_pre = by_key_or_text("tokenizer.ggml.fim_pre_token_id", FIM_PRE_TEXTS)?;
    let fim_suf = by_key_or_text("tokenizer.ggml.fim_suf_token_id", FIM_SUF_TEXTS)?;
    let fim_mid = by_key_or_text("tokenizer.ggml.fim_mid_token_id", FIM_MID_TEXTS)?;
    let fim = match (fim_pre, fim_suf, fim_mid) {
        (Some(pre), Some(suf), Some(mid)) => Some(FimTokens {
            pre,
            suf,
            mid,
            rep: fim_rep,
            sep: fim_sep,
        }),
        _ => None,
    };

    let mut eog: Vec<u32> = texts
        .iter()
        .enumerate()
        .filter(|(_, t)| EOG_TEXTS.contains(t))
        .map(|(i, _)| i as u32)
        .collect();
    for id in eog.iter().copied().chain(
        [
            eot, eom, fim_pad, fim_rep, fim_sep, fim_pre, fim_suf, fim_mid,
        ]
        .into_iter()
        .flatten(),
    ) {
        kinds[id as usize] = TokenKind::Control;
    }
    eog.extend(
        [fim_pad, fim_rep, fim_sep, eos, eot, eom]
            .into_iter()
            .flatten(),
    );
    eog.sort_unstable();
    eog.dedup();

    // gpt-oss: with <|return|> and <|call|> ending generation, <|end|> only ends a message.
    let has = |text: &str| eog.iter().any(|&id| texts[id as usize] == text);
    if has("<|return|>") && has("<|call|>") {
        if let Some(end) = eog.iter().position(|&id| texts[id as usize] == "<|end|>") {
            let id = eog.remove(end);
            kinds[id as usize] = TokenKind::UserDefined;
        }
    }
    for (i, t) in texts.iter().enumerate() {
        if matches!(
            *t,
            "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
        ) {
            kinds[i] = TokenKind::UserDefined;
        }
    }

    Ok(SpecialIds {
        bos,
        eos,
        eot,
        eog,
        fim,
    })
}
