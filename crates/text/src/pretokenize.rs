//! Pre-tokenizers: how text is cut into words before BPE merges run, chosen by
//! `tokenizer.ggml.pre` exactly as llama.cpp chooses its split regexes.
//!
//! llama.cpp applies a list of regexes in turn; each one splits every piece that the previous
//! ones produced into matches and the gaps between them. That is the `tokenizers` crate's
//! `Split` with `Isolated` behaviour, so each regex becomes one `Split`, followed by a
//! `ByteLevel` step that only maps bytes to their byte-level characters.
//!
//! The regexes are llama.cpp's, not the ones in the original `tokenizer.json`: where Hugging
//! Face uses `(?i:'s|'t|...)`, llama.cpp spells out `'[sS]|'[tT]|...`. The two differ on
//! non-ASCII case folds (the long s `ſ` folds to `s`), and llama.cpp is the reference here.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::error::{Error, Result};

/// GPT-2's split regex. It is also what `ByteLevel` uses when asked to split by itself.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3's split regex as llama.cpp spells it (numbers in runs of up to three digits).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split regex as llama.cpp spells it: Llama 3's with every digit on its own.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's fallback list for `default`: punctuation runs first, then GPT-2's regex, then
/// number runs, then groups of three ASCII digits.
const DEFAULT: [&str; 4] = [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];

const SUPPORTED: &str =
    "default, gpt-2, smollm, starcoder, refact, codeshell, exaone, minerva-7b, command-r, \
qwen2, deepseek-r1-qwen, stablelm2, megrez, llama3, llama-v3, llama-bpe, falcon3, dbrx, smaug-bpe";

/// The pre-tokenizer families this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// llama.cpp's `default` (also used when `tokenizer.ggml.pre` is absent).
    Default,
    /// GPT-2's regex alone (`gpt-2`).
    Gpt2,
    /// Every digit on its own, then GPT-2's regex (`smollm`, `starcoder`, ...); Hugging Face
    /// writes this as `Digits(individual_digits)` followed by `ByteLevel` with its regex.
    DigitsGpt2,
    /// Qwen2's regex (`qwen2`, ...).
    Qwen2,
    /// Llama 3's regex (`llama3`, `llama-bpe`, `dbrx`, ...).
    Llama3,
}

/// What a `tokenizer.ggml.pre` name selects: the splitter and the vocabulary flags llama.cpp
/// ties to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PreTokenizerSpec {
    pub kind: PreTokenizer,
    /// A word that is itself a token is emitted whole, without running merges.
    pub ignore_merges: bool,
    /// Whether BOS is added when `tokenizer.ggml.add_bos_token` is absent.
    pub default_add_bos: bool,
}

impl PreTokenizerSpec {
    /// A SentencePiece vocabulary's: no splitting (the field is unused), BOS by default.
    pub const SENTENCEPIECE: Self = Self {
        kind: PreTokenizer::Default,
        ignore_merges: false,
        default_add_bos: true,
    };

    /// The spec for a `tokenizer.ggml.pre` value; `None` (key absent) means `default`.
    pub fn from_name(name: Option<&str>) -> Result<Self> {
        let spec = |kind, ignore_merges, default_add_bos| Self {
            kind,
            ignore_merges,
            default_add_bos,
        };
        Ok(match name.unwrap_or("default") {
            "default" => spec(PreTokenizer::Default, false, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "mellum" | "exaone4" => spec(PreTokenizer::Gpt2, false, false),
            "smollm" | "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b"
            | "command-r" => spec(PreTokenizer::DigitsGpt2, false, false),
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "megrez" => {
                spec(PreTokenizer::Qwen2, false, false)
            }
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" => {
                spec(PreTokenizer::Llama3, true, true)
            }
            "dbrx" | "smaug-bpe" => spec(PreTokenizer::Llama3, false, false),
            other => {
                return Err(Error::UnsupportedPreTokenizer {
                    name: other.to_string(),
                    supported: SUPPORTED,
                });
            }
        })
    }
}

impl PreTokenizer {
    /// The `tokenizers` pre-tokenizer that splits text the way llama.cpp does for this family.
    pub(crate) fn build(self) -> Result<PreTokenizerWrapper> {
        let bytes_only = || PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false));
        let steps = match self {
            PreTokenizer::Default => {
                let mut steps = DEFAULT
                    .iter()
                    .map(|r| split(r))
                    .collect::<Result<Vec<_>>>()?;
                steps.push(bytes_only());
                steps
            }
            PreTokenizer::Gpt2 => vec![split(GPT2)?, bytes_only()],
            PreTokenizer::DigitsGpt2 => {
                vec![
                    PreTokenizerWrapper::Digits(Digits::new(true)),
                    split(GPT2)?,
                    bytes_only(),
                ]
            }
            PreTokenizer::Qwen2 => vec![split(QWEN2)?, bytes_only()],
            PreTokenizer::Llama3 => vec![split(LLAMA3)?, bytes_only()],
        };
        Ok(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
    }
}

fn split(regex: &str) -> Result<PreTokenizerWrapper> {
    let split = Split::new(
        SplitPattern::Regex(regex.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| Error::Tokenizer(format!("split regex {regex:?}: {e}")))?;
    Ok(PreTokenizerWrapper::Split(split))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_name_is_named_in_the_error() {
        let err = PreTokenizerSpec::from_name(Some("klingon"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("'klingon'") && err.contains("qwen2"), "{err}");
    }

    #[test]
    fn every_family_builds() {
        for kind in [
            PreTokenizer::Default,
            PreTokenizer::Gpt2,
            PreTokenizer::DigitsGpt2,
            PreTokenizer::Qwen2,
            PreTokenizer::Llama3,
        ] {
            kind.build().unwrap();
        }
    }
}
