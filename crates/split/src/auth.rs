//! The link's shared key and its challenge-response. On every connection the box speaks
//! first with a [`crate::frame::Message::Challenge`] (a fresh nonce, nothing about the
//! model); the head's hello carries its own nonce and an HMAC-SHA256 under the key of
//! both nonces and everything the hello says; the box's welcome carries an HMAC of both
//! nonces the other way round, so each side has proved the key to the other before either
//! reveals or believes anything. Without a key on both sides the proofs are empty and the
//! link is open to whoever reaches the port.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Error, Result};

/// Bytes of a nonce and of a proof.
pub const NONCE_BYTES: usize = 32;

pub type Nonce = [u8; NONCE_BYTES];
pub type Proof = [u8; NONCE_BYTES];

/// A link's shared key (`--box-key`, `--box-key-file`), the same on the head and the box.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from its text, which must not be blank or have whitespace around it (`from`
    /// names where it came from in the error).
    pub fn new(text: &str, from: &str) -> Result<Key> {
        if text.trim().is_empty() {
            return Err(Error::Key(format!(
                "{from} gives an empty box key; leave it out to run the link without one"
            )));
        }
        if text.trim() != text {
            return Err(Error::Key(format!(
                "{from} gives a box key with whitespace around it; remove the whitespace"
            )));
        }
        Ok(Key(text.as_bytes().to_vec()))
    }

    /// The key in the first line of `path` that is not blank.
    pub fn from_file(path: &std::path::Path) -> Result<Key> {
        let from = format!("--box-key-file {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| Error::Key(format!("{from}: {e}")))?;
        let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Key::new(line.trim_end_matches('\r'), &from)
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        parts.iter().for_each(|p| mac.update(p));
        mac
    }

    /// The proof over `parts` (a domain tag first).
    pub(crate) fn prove(&self, parts: &[&[u8]]) -> Proof {
        self.mac(parts).finalize().into_bytes().into()
    }

    /// Whether `proof` is the proof over `parts`, compared in constant time.
    pub(crate) fn verify(&self, parts: &[&[u8]], proof: &Proof) -> bool {
        self.mac(parts).verify_slice(proof).is_ok()
    }
}

/// A fresh random nonce.
pub(crate) fn nonce() -> Result<Nonce> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(|e| Error::Key(format!("no randomness for a nonce: {e}")))?;
    Ok(n)
}

/// Which side proves: the head in its hello, the box in its welcome.
#[derive(Clone, Copy)]
pub(crate) enum Prover {
    Head,
    Box,
}

/// What a proof covers: a tag naming the prover, both nonces (the prover's peer's first)
/// and the fields of the frame that carries it.
pub(crate) fn covered<'a>(
    prover: Prover,
    challenge: &'a Nonce,
    nonce: &'a Nonce,
    fields: &'a [u8],
) -> [&'a [u8]; 4] {
    match prover {
        Prover::Head => [b"tandem head hello", challenge, nonce, fields],
        Prover::Box => [b"tandem box welcome", nonce, challenge, fields],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_only_for_its_key_and_parts() {
        let (a, b) = (
            Key::new("alpha", "t").unwrap(),
            Key::new("beta", "t").unwrap(),
        );
        let (c, n) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(c, n);
        let head = |c, n, f| covered(Prover::Head, c, n, f);
        let p = a.prove(&head(&c, &n, b"fields"));
        assert!(a.verify(&head(&c, &n, b"fields"), &p));
        assert!(!b.verify(&head(&c, &n, b"fields"), &p));
        assert!(!a.verify(&head(&c, &n, b"other"), &p));
        assert!(!a.verify(&head(&n, &c, b"fields"), &p));
        assert!(!a.verify(&covered(Prover::Box, &c, &n, b"fields"), &p));
    }

    #[test]
    fn blank_keys_and_keys_with_whitespace_are_refused() {
        for bad in ["", "  ", "key ", " key", "\tkey"] {
            let err = Key::new(bad, "--box-key").unwrap_err().to_string();
            assert!(err.contains("--box-key"), "{err}");
        }
        assert!(Key::new("k e y", "--box-key").is_ok());
    }
}
