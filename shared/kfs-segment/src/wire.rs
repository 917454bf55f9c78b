//! Bounds-checked reading of big-endian integers and Kafka zigzag varints.
//!
//! A [`Cursor`] walks a byte slice and knows the absolute file position of its first
//! byte, so every error it raises names the exact byte where decoding stopped.

use crate::error::{DecodeError, DecodeErrorKind};

/// A forward-only reader over a byte slice that reports absolute positions.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Absolute file position of `data[0]`.
    origin: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], origin: u64) -> Self {
        Self {
            data,
            pos: 0,
            origin,
        }
    }

    /// Absolute file position of the next unread byte.
    pub(crate) fn position(&self) -> u64 {
        self.origin + self.pos as u64
    }

    /// Bytes left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub(crate) fn error(&self, kind: DecodeErrorKind) -> DecodeError {
        DecodeError::at(self.position(), kind)
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.error(DecodeErrorKind::Truncated {
                what,
                needed: n as u64,
                available: self.remaining() as u64,
            }));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.array(what).map(u16::from_be_bytes)
    }

    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, DecodeError> {
        self.array(what).map(i16::from_be_bytes)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.array(what).map(u32::from_be_bytes)
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        self.array(what).map(i32::from_be_bytes)
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        self.array(what).map(i64::from_be_bytes)
    }

    pub(crate) fn magic(&mut self, what: &'static str) -> Result<[u8; 4], DecodeError> {
        self.array(what)
    }

    /// Reads an unsigned LEB128 of at most `max_bytes` bytes.
    fn uvarint(&mut self, field: &'static str, max_bytes: usize) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for i in 0..max_bytes {
            let Some(&byte) = self.data.get(self.pos) else {
                self.pos = start;
                return Err(self.error(DecodeErrorKind::Truncated {
                    what: field,
                    needed: (i + 1) as u64,
                    available: i as u64,
                }));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        self.pos = start;
        Err(self.error(DecodeErrorKind::VarintOverflow { field, max_bytes }))
    }

    /// Reads a zigzag varint (Kafka `varint`, at most 5 bytes) as i32.
    pub(crate) fn varint(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        let start = self.pos;
        let raw = self.uvarint(field, 5)?;
        let Ok(raw) = u32::try_from(raw) else {
            self.pos = start;
            return Err(self.error(DecodeErrorKind::VarintOverflow {
                field,
                max_bytes: 5,
            }));
        };
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// Reads a zigzag varlong (Kafka `varlong`, at most 10 bytes) as i64.
    pub(crate) fn varlong(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let raw = self.uvarint(field, 10)?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// Reads a varint length and the bytes it covers; -1 means null.
    pub(crate) fn nullable_bytes(
        &mut self,
        field: &'static str,
    ) -> Result<Option<&'a [u8]>, DecodeError> {
        let at = self.position();
        let len = self.varint(field)?;
        match len {
            -1 => Ok(None),
            len if len < 0 => Err(DecodeError::at(
                at,
                DecodeErrorKind::InvalidLength {
                    field,
                    length: i64::from(len),
                    reason: "negative (only -1, for null, is allowed)",
                },
            )),
            len => {
                let len = len as usize;
                if len > self.remaining() {
                    return Err(DecodeError::at(
                        at,
                        DecodeErrorKind::InvalidLength {
                            field,
                            length: len as i64,
                            reason: "points past the end of the record",
                        },
                    ));
                }
                self.take(len, field).map(Some)
            }
        }
    }
}

/// Appends a zigzag varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, value: i32) {
    put_uvarint(out, ((value << 1) ^ (value >> 31)) as u32 as u64);
}

/// Appends a zigzag varlong.
pub(crate) fn put_varlong(out: &mut Vec<u8>, value: i64) {
    put_uvarint(out, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_uvarint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_round_trips_extremes() {
        for v in [0, 1, -1, 63, -64, 64, i32::MAX, i32::MIN] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(Cursor::new(&buf, 0).varint("v").ok(), Some(v));
        }
        for v in [0, 1, -1, i64::MAX, i64::MIN, 1_700_000_000_000] {
            let mut buf = Vec::new();
            put_varlong(&mut buf, v);
            assert_eq!(Cursor::new(&buf, 0).varlong("v").ok(), Some(v));
        }
    }

    #[test]
    fn overlong_varint_is_an_error_with_position() {
        let bytes = [0u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let mut cur = Cursor::new(&bytes, 100);
        assert_eq!(cur.u8("pad").ok(), Some(0));
        let err = cur.varint("key length").err();
        assert!(matches!(
            err,
            Some(DecodeError {
                position: 101,
                kind: DecodeErrorKind::VarintOverflow { .. },
                ..
            })
        ));
    }

    #[test]
    fn varint_wider_than_32_bits_is_an_error() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(Cursor::new(&bytes, 0).varint("x").is_err());
    }
}
