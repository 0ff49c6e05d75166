//! llama.cpp's GBNF grammars, converted to llguidance's Lark dialect.

use crate::grammar::GrammarError;

/// The Lark grammar equivalent to the GBNF grammar `src` (start rule `root`).
pub fn to_lark(src: &str) -> Result<String, GrammarError> {
    Err(GrammarError(format!(
        "GBNF is not converted yet ({} bytes given)",
        src.len()
    )))
}
