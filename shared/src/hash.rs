//! sha256 helpers and the delta hash chain that agent and central both compute.
//!
//! The chain over a source's accepted deltas is
//! `chain_0 = sha256(delta_0)`, `chain_n = sha256(chain_{n-1} (hex) || sha256(delta_n) (hex))`.
//! Either side extends it from the last link alone, so neither has to re-read
//! the whole transcript to prove that a delta continues what was accepted.

use sha2::{Digest, Sha256};

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The next link of a source's hash chain, given the previous link (none for
/// the delta that starts at byte 0) and the delta's own sha256 (hex).
pub fn chain_next(prev: Option<&str>, delta_sha256: &str) -> String {
    match prev {
        None => delta_sha256.to_owned(),
        Some(prev) => {
            let mut h = Sha256::new();
            h.update(prev.as_bytes());
            h.update(delta_sha256.as_bytes());
            hex::encode(h.finalize())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input_is_the_known_constant() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn chain_depends_on_every_link_and_its_order() {
        let a = sha256_hex(b"a\n");
        let b = sha256_hex(b"b\n");
        let ab = chain_next(Some(&chain_next(None, &a)), &b);
        let ba = chain_next(Some(&chain_next(None, &b)), &a);
        assert_eq!(chain_next(None, &a), a);
        assert_ne!(ab, ba);
        assert_ne!(ab, b);
    }
}
