//! The tokenizer: byte-level BPE built from GGUF metadata on the `tokenizers` crate, or a
//! SentencePiece vocabulary ([`crate::spm`]), with llama.cpp's handling of special tokens
//! around either.

use gguf::Metadata;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::Tokenizer as HfTokenizer;

use crate::byte_level;
use crate::error::{Error, Result};
use crate::pretokenize::{PreTokenizer, PreTokenizerSpec};
use crate::special::{self, SpecialIds, TokenKind};
use crate::spm::{self, Spm};

/// Whether control tokens (`<|im_end|>`) appear in decoded text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControlTokens {
    /// Control tokens decode to nothing (what a chat user should see).
    #[default]
    Skip,
    /// Control tokens decode to their text.
    Render,
}

/// What replaces an id outside the vocabulary when decoding: U+FFFD.
const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// A token that is cut out of text before BPE runs.
#[derive(Debug, Clone)]
struct AddedToken {
    id: u32,
    text: String,
    kind: TokenKind,
}

/// A piece of input after special tokens are cut out.
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// How the pieces between added tokens become ids.
enum Model {
    /// `gpt2`: pre-tokenized and BPE-merged by the `tokenizers` crate.
    Bpe(Box<HfTokenizer>),
    /// `llama`: SentencePiece; a space is put before a piece that starts the text or
    /// follows an added token when `add_space_prefix`.
    Spm {
        spm: Box<Spm>,
        add_space_prefix: bool,
    },
}

/// A tokenizer that gives the same ids as llama.cpp for the same GGUF: byte-level BPE or
/// SentencePiece.
///
/// Encoding runs in two stages, as in llama.cpp: added tokens (control tokens when special
/// parsing is on, user-defined tokens always) are cut out of the text, longest token text first;
/// each remaining piece is tokenized by the vocabulary's [`Model`].
/// The tokenizer is `Send + Sync`; encoding takes `&self`.
pub struct Tokenizer {
    model: Model,
    pre: PreTokenizer,
    kinds: Vec<TokenKind>,
    /// Bytes of every token's piece, back to back; token `i` is `pieces[ends[i-1]..ends[i]]`.
    pieces: Vec<u8>,
    piece_ends: Vec<u32>,
    /// Added tokens, longest text first (ties by id).
    added: Vec<AddedToken>,
    ids: SpecialIds,
    add_bos: bool,
    add_eos: bool,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.n_vocab())
            .field("pre", &self.pre)
            .field("bos", &self.ids.bos)
            .field("eos", &self.ids.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` metadata: `gpt2` (byte-level BPE, whose
    /// `tokenizer.ggml.pre` selects the pre-tokenizer, see [`PreTokenizer`]) or `llama`
    /// (SentencePiece, with `tokenizer.ggml.scores` and `add_space_prefix`, default true).
    /// BOS/EOS are added per `tokenizer.ggml.add_bos_token` / `add_eos_token`, defaulting as
    /// llama.cpp does (BOS for SentencePiece and the Llama 3 family, and only when the
    /// vocabulary names one); a flag that is set without its token id is an error.
    pub fn from_gguf(md: &Metadata) -> Result<Self> {
        let model = md.str("tokenizer.ggml.model")?;
        let sentencepiece = match model {
            "gpt2" => false,
            "llama" => true,
            other => return Err(Error::UnsupportedModel(other.to_string())),
        };
        let spec = if sentencepiece {
            PreTokenizerSpec::SENTENCEPIECE
        } else {
            PreTokenizerSpec::from_name(md.opt_str("tokenizer.ggml.pre")?)?
        };
        let texts = md.str_array("tokenizer.ggml.tokens")?;
        let n = texts.len();
        // llama.cpp renames empty tokens so that every text is unique and non-empty.
        let empty_names: Vec<(usize, String)> = texts
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_empty())
            .map(|(i, _)| (i, format!("[EMPTY_{i}]")))
            .collect();
        let mut texts = texts;
        for (i, name) in &empty_names {
            texts[*i] = name.as_str();
        }

        let mut kinds = match md.get("tokenizer.ggml.token_type") {
            None => vec![TokenKind::Normal; n],
            Some(_) => {
                let codes = md.i64_array("tokenizer.ggml.token_type")?;
                if codes.len() != n {
                    return Err(Error::LengthMismatch {
                        key: "token_type",
                        found: codes.len(),
                        expected: n,
                    });
                }
                codes.into_iter().map(TokenKind::from_gguf).collect()
            }
        };
        let ids = special::read(md, &texts, &mut kinds)?;

        // The pre-tokenizer's default only applies when the vocabulary has a BOS to add.
        let add_bos = md
            .opt_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(spec.default_add_bos && ids.bos.is_some());
        let add_eos = md
            .opt_bool("tokenizer.ggml.add_eos_token")?
            .unwrap_or(false);
        if add_bos && ids.bos.is_none() {
            return Err(Error::MissingSpecialToken {
                flag: "add_bos_token",
                id_key: "bos_token_id",
            });
        }
        if add_eos && ids.eos.is_none() {
            return Err(Error::MissingSpecialToken {
                flag: "add_eos_token",
                id_key: "eos_token_id",
            });
        }

        let model = if sentencepiece {
            let unk = md.opt_u32("tokenizer.ggml.unknown_token_id")?;
            let scores = md.f32_array("tokenizer.ggml.scores")?;
            Model::Spm {
                spm: Box::new(Spm::new(&texts, scores, unk)?),
                add_space_prefix: md
                    .opt_bool("tokenizer.ggml.add_space_prefix")?
                    .unwrap_or(true),
            }
        } else {
            Model::Bpe(Box::new(bpe(md, &texts, spec)?))
        };

        let mut pieces = Vec::with_capacity(n * 6);
        let mut piece_ends = Vec::with_capacity(n);
        for (text, kind) in texts.iter().zip(&kinds) {
            match (kind, sentencepiece) {
                (TokenKind::Normal, false) => byte_level::decode_into(text, &mut pieces),
                (TokenKind::Normal, true) => {
                    pieces.extend_from_slice(text.replace(spm::SPACE, " ").as_bytes())
                }
                (TokenKind::Byte, true) => pieces.extend(Spm::byte_of(text)),
                (TokenKind::Byte, false) => {}
                _ => pieces.extend_from_slice(text.as_bytes()),
            }
            piece_ends.push(pieces.len() as u32);
        }

        let mut added: Vec<AddedToken> = kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| k.matched_in_text(true))
            .map(|(i, &kind)| AddedToken {
                id: i as u32,
                text: texts[i].to_string(),
                kind,
            })
            .collect();
        added.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));

        Ok(Self {
            model,
            pre: spec.kind,
            kinds,
            pieces,
            piece_ends,
            added,
            ids,
            add_bos,
            add_eos,
        })
    }

    /// Token ids for `text`. `add_special` adds BOS/EOS where the model asks for them
    /// ([`Tokenizer::add_bos`], [`Tokenizer::add_eos`]); `parse_special` lets control-token text
    /// such as `<|im_start|>` become the control token, otherwise it is tokenized as plain text.
    /// User-defined added tokens are matched either way, as in llama.cpp.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.ids.bos);
        }
        let mut after_token = true;
        for fragment in self.partition(text, parse_special) {
            after_token = match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    true
                }
                Fragment::Text(s) => {
                    self.encode_piece(s, after_token, &mut out)?;
                    false
                }
            };
        }
        if add_special && self.add_eos {
            out.extend(self.ids.eos);
        }
        Ok(out)
    }

    /// Appends the ids of `s`, a piece of text between added tokens (`after_token`: it
    /// starts the text or follows an added token).
    fn encode_piece(&self, s: &str, after_token: bool, out: &mut Vec<u32>) -> Result<()> {
        match &self.model {
            Model::Bpe(bpe) => {
                let encoding = bpe.encode_fast(s, false).map_err(|e| {
                    Error::Tokenizer(format!("encoding {} bytes of text: {e}", s.len()))
                })?;
                out.extend_from_slice(encoding.get_ids());
                Ok(())
            }
            Model::Spm {
                spm,
                add_space_prefix,
            } => {
                let prefix = if *add_space_prefix && after_token {
                    spm::SPACE
                } else {
                    ""
                };
                spm.encode_into(&(prefix.to_string() + &s.replace(' ', spm::SPACE)), out)
            }
        }
    }

    /// Cuts added tokens out of `text` in llama.cpp's order: for each added token, longest text
    /// first, every occurrence in the text that is still raw becomes that token.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut fragments = vec![Fragment::Text(text)];
        for token in self
            .added
            .iter()
            .filter(|t| t.kind.matched_in_text(parse_special))
        {
            let needle = token.text.as_str();
            let found = fragments
                .iter()
                .any(|f| matches!(f, Fragment::Text(s) if s.contains(needle)));
            if !found {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                match fragment {
                    Fragment::Text(mut s) => {
                        while let Some(at) = s.find(needle) {
                            if at > 0 {
                                next.push(Fragment::Text(&s[..at]));
                            }
                            next.push(Fragment::Token(token.id));
                            s = &s[at + needle.len()..];
                        }
                        if !s.is_empty() {
                            next.push(Fragment::Text(s));
                        }
                    }
                    token => next.push(token),
                }
            }
            fragments = next;
        }
        fragments
    }

    /// The first token whose piece, control tokens rendered, is exactly `text` (llama.cpp's
    /// mtmd `lookup_token`): a scan of the vocabulary.
    pub fn lookup(&self, text: &str) -> Option<u32> {
        (0..self.n_vocab() as u32).find(|&id| self.token_to_piece(id) == text.as_bytes())
    }

    /// The bytes token `id` stands for, with control tokens rendered as their text. Unused
    /// tokens give no bytes; an id outside the vocabulary gives U+FFFD.
    pub fn token_to_piece(&self, id: u32) -> &[u8] {
        self.piece(id, ControlTokens::Render)
    }

    /// The bytes token `id` contributes to decoded text: normal and user-defined tokens always,
    /// control and unknown tokens only with [`ControlTokens::Render`], other kinds never.
    /// An id outside the vocabulary gives U+FFFD.
    pub fn piece(&self, id: u32, control: ControlTokens) -> &[u8] {
        let Some(&kind) = self.kinds.get(id as usize) else {
            return REPLACEMENT;
        };
        let shown = match kind {
            TokenKind::Normal | TokenKind::UserDefined | TokenKind::Byte => true,
            TokenKind::Control | TokenKind::Unknown => control == ControlTokens::Render,
            TokenKind::Unused | TokenKind::Undefined => false,
        };
        if !shown {
            return &[];
        }
        let i = id as usize;
        let start = if i == 0 {
            0
        } else {
            self.piece_ends[i - 1] as usize
        };
        &self.pieces[start..self.piece_ends[i] as usize]
    }

    /// Text of `ids` with control tokens left out; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.decode_with(ids, ControlTokens::Skip)
    }

    /// Text of `ids`; invalid UTF-8 becomes U+FFFD.
    pub fn decode_with(&self, ids: &[u32], control: ControlTokens) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            bytes.extend_from_slice(self.piece(id, control));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn n_vocab(&self) -> usize {
        self.kinds.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }

    /// The end-of-turn token (`tokenizer.ggml.eot_token_id`, else found by its text).
    pub fn eot(&self) -> Option<u32> {
        self.ids.eot
    }

    /// Whether `encode` with `add_special` puts BOS first.
    /// The fill-in-the-middle tokens, when the vocabulary has prefix, suffix and middle
    /// markers (by GGUF key, or by their text as llama.cpp finds them).
    pub fn fim(&self) -> Option<crate::FimTokens> {
        self.ids.fim
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode` with `add_special` puts EOS last.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether generation stops at `id`: EOS, EOT, EOM, the FIM pad/repo/separator tokens and
    /// the control tokens llama.cpp treats as ends (`<|im_end|>`, `<|endoftext|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.ids.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.ids.eog
    }

    pub fn is_control(&self, id: u32) -> bool {
        self.token_kind(id) == Some(TokenKind::Control)
    }

    /// The kind of token `id`, or `None` outside the vocabulary.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// The pre-tokenizer family chosen from `tokenizer.ggml.pre`.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }
}

/// The byte-level BPE of a `gpt2` vocabulary of `texts`, with its merges and pre-tokenizer.
fn bpe(md: &Metadata, texts: &[&str], spec: PreTokenizerSpec) -> Result<HfTokenizer> {
    let merges = md
        .str_array("tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(index, m)| {
            // llama.cpp splits at the first space after the first byte, so a merge may start with a space.
            let at = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
            match at {
                Some(p) => Ok((m[..p].to_string(), m[p + 1..].to_string())),
                None => Err(Error::BadMerge {
                    index,
                    merge: m.to_string(),
                }),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let vocab: Vocab = texts
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(spec.ignore_merges)
        .build()
        .map_err(|e| {
            Error::Tokenizer(format!(
                "building BPE from tokenizer.ggml.tokens/merges: {e}"
            ))
        })?;
    let mut hf = HfTokenizer::new(bpe);
    hf.with_pre_tokenizer(Some(spec.kind.build()?));
    Ok(hf)
}
