//! llama.cpp's GBNF grammars, converted to llguidance's Lark dialect.
//!
//! llguidance lexes greedily: a terminal ends only where the next byte cannot extend it.
//! A GBNF expression may therefore become a Lark terminal (one regex, fast) only if it is
//! regular and prefix-free (no string it matches is a proper prefix of another), such as
//! `"true"`, `[0-9]{4}` or a JSON string `"\"" [^"]* "\""`; elsewhere the conversion keeps
//! GBNF's character-level meaning with rules over single literals and classes.
//! Prefix-free rules become terminals (`NAME`), the other rules stay rules, and
//! prefix-free runs inside them are hoisted into terminals named after their rule:
//!
//! ```text
//! root ::= "[" ws (item ("," ws item)*)? "]"     start: root
//! item ::= "\"" [^"]* "\"" | [0-9]+ ws | root    root: "[" ws (item ("," ws item)*)? "]"
//! ws   ::= [ \t\n]*                               item: ITEM_1 | /[0-9]/+ ws | root
//!                                                ITEM_1: "\"" /[^"]/* "\""
//!                                                ws: /[ \t\n]/*
//! ```
//! Here `[0-9]+ ws` stays a rule: as one terminal it would swallow a newline that a
//! following `"\n"` needs.

mod emit;
mod parse;
#[cfg(test)]
mod tests;

use crate::grammar::GrammarError;

use emit::Emitter;
use parse::Parser;

/// The Lark grammar equivalent to the GBNF grammar `src` (start rule `root`).
///
/// Accepts llama.cpp's syntax, plus `{,n}`, `_` in names, and a line starting with `|`
/// continuing the rule above. Errors name the line and column (1-based, in characters).
/// Token references `<[id]>`, `!<[id]>` and `<text>` pass through as Lark special tokens;
/// `!<text>` is refused because it needs the vocabulary.
pub fn to_lark(src: &str) -> Result<String, GrammarError> {
    let mut p = Parser {
        src: src.chars().collect(),
        ..Parser::default()
    };
    let bodies = p.grammar()?;
    Ok(Emitter::new(&p, &bodies).emit(&p, &bodies))
}

#[derive(Debug, Clone)]
enum Node {
    Lit(String),
    /// Negated, and inclusive ranges; `[^]` is `(true, [])`.
    Class(bool, Vec<(char, char)>),
    Any,
    /// Already in Lark syntax: `<[12]>`, `<[^12]>`, `<|eot|>`.
    Token(String),
    Ref(usize),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Rep(Box<Node>, u32, Option<u32>),
}
