//! An Avro datum walked against its writer schema before apache-avro decodes it,
//! without allocating: apache-avro 0.21 reserves an array's or map's declared block
//! count, and a string's declared length, before reading them (a 9-byte value can
//! make it ask for gigabytes). The walk checks every block count against the bytes
//! left (an item that takes at least one byte needs one each) and counts every item,
//! those that take no byte (`null`, an empty record, `fixed(0)`) included, against
//! [`MAX_ITEMS_PER_VALUE`](crate::bounds::MAX_ITEMS_PER_VALUE); every length against
//! the bytes left. A datum it accepts decodes within memory linear in its bytes.

use crate::bounds::ItemBudget;
use apache_avro::Schema;
use apache_avro::schema::{Name, Namespace};
use std::collections::HashMap;

/// Named types of a writer schema and the schemas it references, by full name.
pub type AvroNames = HashMap<Name, Schema>;

/// Deepest nesting walked (a writer schema is refused beyond 32 levels already).
const MAX_DEPTH: usize = 64;

/// Walks `payload`, one datum of `schema`; the items it holds, or why it is refused
/// (with the byte position).
pub fn check_avro(schema: &Schema, names: &AvroNames, payload: &[u8]) -> Result<u64, String> {
    let mut walk = Walk {
        payload,
        at: 0,
        budget: ItemBudget::default(),
        names,
        empty: HashMap::new(),
    };
    walk.datum(schema, &None, 0)?;
    Ok(walk.budget.items())
}

/// The named type `name` refers to in `namespace`, and its namespace.
fn resolve<'n>(
    names: &'n AvroNames,
    name: &Name,
    namespace: &Namespace,
) -> Result<(&'n Schema, Namespace), String> {
    let full = name.fully_qualified_name(namespace);
    match names.get(&full) {
        Some(schema) => Ok((schema, full.namespace)),
        None => Err(format!("Avro schema refers to unknown type {full}")),
    }
}

struct Walk<'a> {
    payload: &'a [u8],
    at: usize,
    budget: ItemBudget,
    names: &'a AvroNames,
    /// Whether a schema (by address) may take no byte, once known.
    empty: HashMap<usize, bool>,
}

impl Walk<'_> {
    fn left(&self) -> usize {
        self.payload.len() - self.at
    }

    fn cut_short(&self, what: &str) -> String {
        format!(
            "Avro payload is cut short at byte {} (in {what})",
            self.payload.len()
        )
    }

    /// Skips `n` bytes of `what`.
    fn skip(&mut self, n: u64, what: &str) -> Result<(), String> {
        match usize::try_from(n).ok().filter(|n| *n <= self.left()) {
            Some(n) => {
                self.at += n;
                Ok(())
            }
            None => Err(format!(
                "Avro {what} at byte {} declares {n} bytes, {} are left",
                self.at,
                self.left()
            )),
        }
    }

    /// A zig-zag varint (an int, long, length or count).
    fn long(&mut self, what: &str) -> Result<i64, String> {
        let start = self.at;
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.payload.get(self.at) else {
                return Err(self.cut_short(what));
            };
            self.at += 1;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(format!(
            "Avro {what} at byte {start} is a varint longer than 10 bytes"
        ))
    }

    /// A length (of bytes, a string) or a block's item count: never negative.
    fn length(&mut self, what: &str) -> Result<u64, String> {
        let at = self.at;
        let n = self.long(what)?;
        u64::try_from(n).map_err(|_| format!("Avro {what} at byte {at} has length {n}"))
    }

    fn datum(
        &mut self,
        schema: &Schema,
        namespace: &Namespace,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("Avro value nests deeper than {MAX_DEPTH} levels"));
        }
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => self.skip(1, "boolean"),
            Schema::Int
            | Schema::Long
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.long("number").map(drop),
            Schema::Enum(symbols) => {
                let at = self.at;
                let index = self.long("enum")?;
                match usize::try_from(index) {
                    Ok(i) if i < symbols.symbols.len() => Ok(()),
                    _ => Err(format!(
                        "Avro enum at byte {at} has index {index} of {} symbols",
                        symbols.symbols.len()
                    )),
                }
            }
            Schema::Float => self.skip(4, "float"),
            Schema::Double => self.skip(8, "double"),
            Schema::Duration => self.skip(12, "duration"),
            Schema::Bytes | Schema::String | Schema::BigDecimal | Schema::Uuid => {
                let n = self.length("length")?;
                self.skip(n, "string or bytes")
            }
            Schema::Fixed(fixed) => self.skip(fixed.size as u64, "fixed"),
            Schema::Decimal(decimal) => self.datum(&decimal.inner, namespace, depth + 1),
            Schema::Union(union) => {
                let at = self.at;
                let index = self.long("union index")?;
                let variant = usize::try_from(index)
                    .ok()
                    .and_then(|i| union.variants().get(i))
                    .ok_or_else(|| {
                        format!(
                            "Avro union at byte {at} has branch {index} of {}",
                            union.variants().len()
                        )
                    })?;
                self.datum(variant, namespace, depth + 1)
            }
            Schema::Record(record) => {
                self.budget
                    .take(record.fields.len() as u64, "Avro", self.at)?;
                let inner = record.name.fully_qualified_name(namespace).namespace;
                for field in &record.fields {
                    self.datum(&field.schema, &inner, depth + 1)?;
                }
                Ok(())
            }
            Schema::Array(array) => self.blocks(&array.items, false, namespace, depth),
            Schema::Map(map) => self.blocks(&map.types, true, namespace, depth),
            Schema::Ref { name } => {
                let (named, inner) = resolve(self.names, name, namespace)?;
                self.datum(named, &inner, depth + 1)
            }
        }
    }

    /// The blocks of an array (`map`: a map, whose entries start with a string key).
    fn blocks(
        &mut self,
        items: &Schema,
        map: bool,
        namespace: &Namespace,
        depth: usize,
    ) -> Result<(), String> {
        let what = if map { "map" } else { "array" };
        loop {
            let at = self.at;
            let count = self.long(what)?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                // A negative count is followed by the block's size in bytes.
                self.length(what)?;
            }
            let n = count.unsigned_abs();
            self.budget.take(n, "Avro", at)?;
            let takes_a_byte = map || !self.may_be_empty(items, namespace, depth)?;
            if takes_a_byte && n > self.left() as u64 {
                return Err(format!(
                    "Avro {what} block at byte {at} declares {n} items, and only {} bytes are left",
                    self.left()
                ));
            }
            for _ in 0..n {
                if map {
                    let length = self.length("map key")?;
                    self.skip(length, "map key")?;
                }
                self.datum(items, namespace, depth + 1)?;
            }
        }
    }

    /// Whether a datum of `schema` may take no byte at all.
    fn may_be_empty(
        &mut self,
        schema: &Schema,
        namespace: &Namespace,
        depth: usize,
    ) -> Result<bool, String> {
        if depth > MAX_DEPTH {
            return Err(format!("Avro value nests deeper than {MAX_DEPTH} levels"));
        }
        let key = std::ptr::from_ref(schema) as usize;
        if let Some(known) = self.empty.get(&key) {
            return Ok(*known);
        }
        let empty = match schema {
            Schema::Null => true,
            Schema::Fixed(fixed) => fixed.size == 0,
            Schema::Decimal(decimal) => self.may_be_empty(&decimal.inner, namespace, depth + 1)?,
            Schema::Record(record) => {
                let inner = record.name.fully_qualified_name(namespace).namespace;
                let mut all = true;
                for field in &record.fields {
                    all &= self.may_be_empty(&field.schema, &inner, depth + 1)?;
                }
                all
            }
            Schema::Ref { name } => {
                let (named, inner) = resolve(self.names, name, namespace)?;
                self.may_be_empty(named, &inner, depth + 1)?
            }
            // A union's branch index, a block count and a number take a byte at least.
            _ => false,
        };
        self.empty.insert(key, empty);
        Ok(empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(schema: &str, payload: &[u8]) -> Result<u64, String> {
        let schema = Schema::parse_str(schema).map_err(|e| e.to_string())?;
        check_avro(&schema, &AvroNames::new(), payload)
    }

    #[test]
    fn declared_counts_and_lengths_are_checked_against_the_bytes_left() {
        let longs = r#"{"type": "array", "items": "long"}"#;
        // 2 items (zig-zag 4), 1 and 2, end.
        assert_eq!(walk(longs, &[4, 2, 4, 0]), Ok(2));
        // A block of 0x7000_0000 longs in 9 bytes: refused before any allocation.
        let bomb = [0x80, 0x80, 0x80, 0x80, 0x0E, 2, 2, 2, 0];
        assert!(walk(longs, &bomb).is_err_and(|e| e.contains("items") && e.contains("byte 0")));
        // 1000 longs (zig-zag 2000) in 4 bytes.
        assert!(walk(longs, &[0xD0, 0x0F, 2, 0]).is_err_and(|e| e.contains("declares 1000 items")));
        // A negative count with its block size.
        assert_eq!(walk(longs, &[3, 2, 2, 4, 0]), Ok(2));
        let strings = r#"{"type": "map", "values": "string"}"#;
        assert!(
            walk(strings, &[2, 2, b'k', 0xFE, 0xFF, 0x7F]).is_err_and(|e| e.contains("declares"))
        );
        assert!(walk(r#""string""#, &[0x80]).is_err_and(|e| e.contains("cut short")));
        assert!(walk(r#""string""#, &[1]).is_err_and(|e| e.contains("length -1")));
    }

    #[test]
    fn items_that_take_no_byte_are_counted() {
        let nulls = r#"{"type": "array", "items": "null"}"#;
        assert_eq!(walk(nulls, &[8, 0]), Ok(4));
        // 2^30 nulls in 6 bytes.
        assert!(
            walk(nulls, &[0x80, 0x80, 0x80, 0x80, 0x08, 0]).is_err_and(|e| e.contains("items"))
        );
        let empty = r#"{"type": "array", "items": {"type": "record", "name": "E", "fields": [
            {"name": "n", "type": "null"}, {"name": "f", "type": {"type": "fixed", "name": "Z", "size": 0}}]}}"#;
        assert!(walk(empty, &[0x80, 0x80, 0x40, 0]).is_err_and(|e| e.contains("items")));
        assert_eq!(walk(empty, &[2, 0]), Ok(3));
    }
}
