//! Text held back from a stream while it may still become something else: the end of the
//! text so far that could begin a reasoning tag or a tool-call marker. The server's stages
//! of the output chain hold back through this one function; the engine's stop strings hold
//! back the same way, reading the bytes off their automaton ([`crate::StopMatcher`]).

/// Bytes at the end of `s` that are a proper prefix of `needle`, cut on character
/// boundaries of both.
///
/// ```
/// assert_eq!(text::partial_suffix("plan <thi", "<think>"), 4);
/// assert_eq!(text::partial_suffix("plan <think>", "<think>"), 0);
/// assert_eq!(text::partial_suffix("plan", "<think>"), 0);
/// ```
pub fn partial_suffix(s: &str, needle: &str) -> usize {
    (1..needle.len().min(s.len() + 1))
        .rev()
        .find(|&n| {
            s.is_char_boundary(s.len() - n)
                && needle.is_char_boundary(n)
                && s.ends_with(&needle[..n])
        })
        .unwrap_or(0)
}
