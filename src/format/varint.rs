//! Zig-zag variable-length integers, as Kafka's `ByteUtils` writes them (FORMAT.md § Records).
//!
//! A varint is at most 5 bytes (32-bit) and a varlong at most 10 bytes (64-bit); longer encodings
//! are rejected as Kafka rejects them.

const VARINT_BYTES_MAX: usize = 5;
const VARLONG_BYTES_MAX: usize = 10;

/// Decodes a zig-zag varint; `None` if truncated or longer than 5 bytes.
pub fn decode_varint(bytes: &[u8]) -> Option<(i32, usize)> {
    let (raw, length) = decode_unsigned(bytes, VARINT_BYTES_MAX)?;
    let raw = u32::try_from(raw).ok()?;
    Some((((raw >> 1) as i32) ^ -((raw & 1) as i32), length))
}

/// Decodes a zig-zag varlong; `None` if truncated or longer than 10 bytes.
pub fn decode_varlong(bytes: &[u8]) -> Option<(i64, usize)> {
    let (raw, length) = decode_unsigned(bytes, VARLONG_BYTES_MAX)?;
    Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), length))
}

fn decode_unsigned(bytes: &[u8], length_max: usize) -> Option<(u64, usize)> {
    let mut value: u64 = 0;
    for (index, byte) in bytes.iter().take(length_max).enumerate() {
        let payload = u64::from(byte & 0x7f);
        let shift = 7 * index as u32;
        // The last permitted byte may only carry the bits that still fit.
        if shift == 63 && payload > 1 {
            return None;
        }
        value |= payload << shift;
        if byte & 0x80 == 0 {
            return Some((value, index + 1));
        }
    }
    None
}

/// Appends `value` as a zig-zag varint.
pub fn encode_varint(value: i32, out: &mut Vec<u8>) {
    encode_unsigned(u64::from(((value << 1) ^ (value >> 31)) as u32), out);
}

/// Appends `value` as a zig-zag varlong.
pub fn encode_varlong(value: i64, out: &mut Vec<u8>) {
    encode_unsigned(((value << 1) ^ (value >> 63)) as u64, out);
}

/// Bytes `value` takes as a zig-zag varint (`ByteUtils.sizeOfVarint`).
pub fn varint_size(value: i32) -> usize {
    unsigned_size(u64::from(((value << 1) ^ (value >> 31)) as u32))
}

/// Bytes `value` takes as a zig-zag varlong (`ByteUtils.sizeOfVarlong`).
pub fn varlong_size(value: i64) -> usize {
    unsigned_size(((value << 1) ^ (value >> 63)) as u64)
}

fn encode_unsigned(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn unsigned_size(value: u64) -> usize {
    let bits = 64 - value.leading_zeros().min(63) as usize;
    bits.div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings_match_protobuf_zigzag() {
        let cases: [(i32, &[u8]); 6] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (value, bytes) in cases {
            let mut out = Vec::new();
            encode_varint(value, &mut out);
            assert_eq!(out, bytes, "{value}");
            assert_eq!(decode_varint(bytes), Some((value, bytes.len())));
            assert_eq!(varint_size(value), bytes.len());
        }
    }

    #[test]
    fn overlong_and_truncated_inputs_are_rejected() {
        assert_eq!(decode_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]), None);
        assert_eq!(decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]), None);
        assert_eq!(decode_varint(&[0x80]), None);
        assert_eq!(decode_varint(&[]), None);
        assert_eq!(decode_varlong(&[0xff; 10]), None);
        assert_eq!(
            decode_varlong(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]),
            None
        );
    }

    proptest! {
        #[test]
        fn varint_round_trips(value: i32) {
            let mut out = Vec::new();
            encode_varint(value, &mut out);
            prop_assert_eq!(out.len(), varint_size(value));
            prop_assert_eq!(decode_varint(&out), Some((value, out.len())));
        }

        #[test]
        fn varlong_round_trips(value: i64) {
            let mut out = Vec::new();
            encode_varlong(value, &mut out);
            prop_assert_eq!(out.len(), varlong_size(value));
            prop_assert_eq!(decode_varlong(&out), Some((value, out.len())));
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes: Vec<u8>) {
            let _ = decode_varint(&bytes);
            let _ = decode_varlong(&bytes);
        }
    }
}
