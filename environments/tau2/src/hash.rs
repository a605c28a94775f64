//! sha256 in hex, the digest tau2's `get_dict_hash` uses. Nothing else lives here.

use sha2::{Digest, Sha256};

pub fn sha256_hex(text: &str) -> String {
    sha256_hex_of(|out| out(text))
}

/// The digest of a text handed over in pieces (`text` calls its argument with each in order),
/// for a text too large to be worth building.
pub fn sha256_hex_of(text: impl FnOnce(&mut dyn FnMut(&str))) -> String {
    let mut hasher = Sha256::new();
    text(&mut |piece| hasher.update(piece.as_bytes()));
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_digest() {
        assert_eq!(super::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(super::sha256_hex_of(|out| ["a", "", "bc"].into_iter().for_each(out)), super::sha256_hex("abc"));
    }
}
