//! GPT-2's byte-to-unicode map: byte-level BPE vocabularies spell every byte as one printable
//! character, so `"Ġhello"` is the token for the bytes `" hello"`.

/// The character that stands for each byte: printable Latin-1 bytes stand for themselves, the
/// other 68 bytes map in order onto U+0100.. (so `b' '` is `'Ġ'`, U+0120, and `b'\n'` is `'Ċ'`).
const fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    let mut b = 0usize;
    while b < 256 {
        let printable =
            (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        let cp = if printable {
            b as u32
        } else {
            let cp = next;
            next += 1;
            cp
        };
        table[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => '\0',
        };
        b += 1;
    }
    table
}

const BYTE_TO_CHAR: [char; 256] = byte_to_char_table();

/// Inverse of the map for U+0100..=U+0143: entry `n` is the byte that U+0100 + n stands for.
const fn high_char_to_byte_table() -> [u8; 68] {
    let mut table = [0u8; 68];
    let mut b = 0usize;
    while b < 256 {
        let cp = BYTE_TO_CHAR[b] as u32;
        if cp >= 0x100 {
            table[(cp - 0x100) as usize] = b as u8;
        }
        b += 1;
    }
    table
}

const HIGH_CHAR_TO_BYTE: [u8; 68] = high_char_to_byte_table();

/// The byte that `c` stands for, or `None` when `c` is not one of the 256 byte characters.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    match cp {
        0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(cp as u8),
        0x100..=0x143 => Some(HIGH_CHAR_TO_BYTE[(cp - 0x100) as usize]),
        _ => None,
    }
}

/// Decodes a byte-level token spelling into the bytes it stands for. Characters outside the map
/// (never produced by a well-formed vocabulary) are kept as their own UTF-8.
pub(crate) fn decode_into(spelling: &str, out: &mut Vec<u8>) {
    for c in spelling.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(
                char_to_byte(BYTE_TO_CHAR[b as usize]),
                Some(b),
                "byte {b:#04x}"
            );
        }
        assert_eq!(BYTE_TO_CHAR[b' ' as usize], 'Ġ');
        assert_eq!(BYTE_TO_CHAR[b'\n' as usize], 'Ċ');
        assert_eq!(char_to_byte('中'), None);
    }

    #[test]
    fn decodes_spelling() {
        let mut out = Vec::new();
        decode_into("Ġhello", &mut out);
        assert_eq!(out, b" hello");
    }
}
