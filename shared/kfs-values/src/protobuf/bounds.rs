//! A Protobuf message walked against its descriptor before prost-reflect decodes it,
//! without allocating: every length it declares against the bytes left, its nesting
//! depth, and its items (each field occurrence, each element of a packed field,
//! each map entry) against [`MAX_ITEMS_PER_VALUE`](crate::bounds::MAX_ITEMS_PER_VALUE).
//! prost-reflect reserves nothing by a declared count, but a decoded item takes a
//! few dozen bytes however few encode it (a packed `bool` one byte, an empty
//! message two): a message it accepts decodes within memory linear in its bytes.

use crate::bounds::ItemBudget;
use prost_reflect::{Kind, MessageDescriptor};

/// Deepest nesting walked (prost's own recursion limit is 100).
const MAX_DEPTH: usize = 100;

/// Walks `bytes`, one message of `message`; the items it holds, or why it is refused
/// (with the byte position within `bytes`).
pub fn check_protobuf(message: &MessageDescriptor, bytes: &[u8]) -> Result<u64, String> {
    let mut walk = Walk {
        bytes,
        at: 0,
        budget: ItemBudget::default(),
    };
    walk.message(Some(message), bytes.len(), (0, None))?;
    Ok(walk.budget.items())
}

struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    budget: ItemBudget,
}

impl Walk<'_> {
    fn varint(&mut self, end: usize) -> Result<u64, String> {
        let start = self.at;
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            if self.at >= end {
                return Err(format!(
                    "Protobuf message is cut short at byte {end} (a varint from byte {start})"
                ));
            }
            let byte = self.bytes[self.at];
            self.at += 1;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "Protobuf varint at byte {start} is longer than 10 bytes"
        ))
    }

    fn skip(&mut self, n: u64, end: usize, what: &str) -> Result<(), String> {
        let left = end - self.at;
        match usize::try_from(n).ok().filter(|n| *n <= left) {
            Some(n) => {
                self.at += n;
                Ok(())
            }
            None => Err(format!(
                "Protobuf {what} at byte {} declares {n} bytes, {left} are left",
                self.at
            )),
        }
    }

    /// The fields of one message (`None`: a group or message the schema does not
    /// describe, skipped) up to `end`; `group`: the number of the group it is, which
    /// ends at its end-group tag.
    fn message(
        &mut self,
        message: Option<&MessageDescriptor>,
        end: usize,
        (depth, group): (usize, Option<u64>),
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "Protobuf message nests deeper than {MAX_DEPTH} levels at byte {}",
                self.at
            ));
        }
        while self.at < end {
            let at = self.at;
            let key = self.varint(end)?;
            let (number, wire) = (key >> 3, key & 7);
            if number == 0 || number > u64::from(u32::MAX) {
                return Err(format!("Protobuf field number {number} at byte {at}"));
            }
            self.budget.take(1, "Protobuf", at)?;
            let field = message.and_then(|m| m.get_field(number as u32));
            match wire {
                0 => self.varint(end).map(drop)?,
                1 => self.skip(8, end, "fixed64")?,
                5 => self.skip(4, end, "fixed32")?,
                2 => {
                    let length = self.varint(end)?;
                    let start = self.at;
                    self.skip(length, end, "length-delimited field")?;
                    let inner_end = self.at;
                    match field.as_ref().map(|f| (f.kind(), f.is_list())) {
                        Some((Kind::Message(inner), _)) => {
                            self.at = start;
                            self.message(Some(&inner), inner_end, (depth + 1, None))?;
                        }
                        Some((kind, true)) => self.packed(&kind, start, inner_end)?,
                        _ => {}
                    }
                }
                3 => self.message(None, end, (depth + 1, Some(number)))?,
                4 if group == Some(number) => return Ok(()),
                other => {
                    return Err(format!(
                        "Protobuf field {number} at byte {at} has wire type {other}, unexpected here"
                    ));
                }
            }
        }
        match group {
            Some(number) => Err(format!(
                "Protobuf group {number} does not end before byte {end}"
            )),
            None => Ok(()),
        }
    }

    /// Counts the elements of a packed repeated field of `kind` in `start..end`.
    fn packed(&mut self, kind: &Kind, start: usize, end: usize) -> Result<(), String> {
        let bytes = &self.bytes[start..end];
        let elements = match kind {
            Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => bytes.len() / 8,
            Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => bytes.len() / 4,
            // Varints: one ends at each byte without its high bit.
            _ => bytes.iter().filter(|b| **b & 0x80 == 0).count(),
        };
        self.budget.take(elements as u64, "Protobuf", start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::MAX_ITEMS_PER_VALUE;

    fn descriptor() -> Result<MessageDescriptor, String> {
        let writer = crate::protobuf::ProtobufWriter::parse(
            r#"syntax = "proto3"; message E {}
               message M { repeated bool flags = 1; repeated E empties = 2; map<string, E> m = 3; string s = 4; }"#,
            &[],
        )?;
        writer.message(&crate::protobuf::MessageSelector::Path(vec![1]))
    }

    #[test]
    fn items_lengths_and_depth_are_bounded() -> Result<(), String> {
        let m = descriptor()?;
        // flags: packed [true, false]; s: "ab".
        assert_eq!(
            check_protobuf(&m, &[0x0A, 2, 1, 0, 0x22, 2, b'a', b'b']),
            Ok(4)
        );
        // A string declaring more bytes than there are.
        assert!(
            check_protobuf(&m, &[0x22, 0xFF, 0xFF, 0x03]).is_err_and(|e| e.contains("declares"))
        );
        // 2^20 + 1 packed booleans.
        let n = MAX_ITEMS_PER_VALUE as usize + 1;
        let mut packed = vec![0x0A, 0x81, 0x80, 0x40];
        packed.extend(std::iter::repeat_n(1u8, n));
        assert!(check_protobuf(&m, &packed).is_err_and(|e| e.contains("items")));
        // Empty messages, two bytes each.
        let empties: Vec<u8> = std::iter::repeat_n([0x12u8, 0], n).flatten().collect();
        assert!(check_protobuf(&m, &empties).is_err_and(|e| e.contains("items")));
        // Unknown groups nested past the limit.
        let groups: Vec<u8> = std::iter::repeat_n(0x2Bu8, MAX_DEPTH + 2).collect();
        assert!(check_protobuf(&m, &groups).is_err_and(|e| e.contains("deeper")));
        Ok(())
    }
}
