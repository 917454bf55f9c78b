//! What decoding one registry value, and taking in one writer schema, may cost: the
//! bounds every format's decoder checks before it allocates anything a value's bytes
//! declare (an Avro block count, a string's length), and the bound on a schema's
//! table form while it is computed.
//!
//! A value's decoded form takes a few dozen bytes per item (every field, element and
//! map entry is a decoder's value and a [`Cell`](super::cells::Cell)) however few
//! bytes encode it: an Avro `null` takes none, a Protobuf `bool` one. So a value is
//! walked first, without allocating, counting its items against
//! [`MAX_ITEMS_PER_VALUE`] and every length it declares against the bytes left; only
//! then is it decoded. A value beyond the bounds is a dead letter with the reason.

/// Most items (fields, list elements, map entries, scalars) one decoded value may
/// hold: about 100 MiB of decoded values and cells at [`ITEM_BYTES`] each.
pub const MAX_ITEMS_PER_VALUE: u64 = 1 << 20;

/// Bytes one decoded item is counted for while its row waits for its batch (the
/// decoder's value, its cell, its Arrow slot): what a batch's memory estimate adds
/// per item, besides the value's bytes.
pub const ITEM_BYTES: usize = 96;

/// Deepest nesting of a JSON value taken in (serde_json's own recursion limit is 128).
pub const MAX_JSON_DEPTH: usize = 64;

/// Most fields (Iceberg field ids: columns, nested fields, list elements, map keys
/// and values) the table form of one writer schema may have, counted while it is
/// computed: a small schema reusing one named type many times per level expands
/// exponentially, and must be refused before its expansion is built.
pub const MAX_SHAPE_FIELDS: usize = 10_000;

/// The count of a value's items against [`MAX_ITEMS_PER_VALUE`].
#[derive(Debug, Default)]
pub struct ItemBudget {
    items: u64,
}

impl ItemBudget {
    /// Counts `n` more items; `Err` once the value holds more than the bound
    /// (`format`: the value's format, `at`: the byte position, for the message).
    pub fn take(&mut self, n: u64, format: &str, at: usize) -> Result<(), String> {
        self.items = self.items.saturating_add(n);
        if self.items > MAX_ITEMS_PER_VALUE {
            return Err(format!(
                "{format} payload holds more than {MAX_ITEMS_PER_VALUE} items (fields, elements, entries) by byte {at}: more than one value may hold"
            ));
        }
        Ok(())
    }

    /// The items counted.
    pub fn items(&self) -> u64 {
        self.items
    }
}

/// The fields a schema's table form may still take, counted down while it is
/// computed ([`MAX_SHAPE_FIELDS`]).
#[derive(Debug)]
pub struct ShapeBudget {
    left: usize,
    format: &'static str,
}

impl ShapeBudget {
    /// A budget of [`MAX_SHAPE_FIELDS`] for a schema of `format`.
    pub fn new(format: &'static str) -> Self {
        Self {
            left: MAX_SHAPE_FIELDS,
            format,
        }
    }

    /// Takes one field of the table form; `Err` once there are more than the bound.
    pub fn field(&mut self) -> Result<(), String> {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(format!(
                "{} schema expands to more than {MAX_SHAPE_FIELDS} fields in its table form (a type reused many times per level): no table holds it",
                self.format
            )),
        }
    }
}

/// Walks a JSON text without allocating: its items (an upper bound: every value,
/// key and separator) and nesting depth against the bounds; `Err` names the byte.
/// Strings are skipped with their escapes; what is not JSON is left to the parser.
pub fn check_json(text: &[u8]) -> Result<u64, String> {
    let mut budget = ItemBudget::default();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // Items counted in blocks: one check per 4096 separators, not one per byte.
    let mut pending = 1u64;
    for (at, byte) in text.iter().enumerate() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(format!(
                        "JSON payload nests deeper than {MAX_JSON_DEPTH} levels at byte {at}"
                    ));
                }
                pending += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            // A separator starts one more item (`:` a key's value).
            b',' | b':' => pending += 1,
            _ => continue,
        }
        if pending >= 4096 {
            budget.take(pending, "JSON", at)?;
            pending = 0;
        }
    }
    budget.take(pending, "JSON", text.len())?;
    Ok(budget.items())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_items_and_depth_are_bounded() {
        assert!(check_json(br#"{"a": [1, 2, {"b": "[[[[,,,,"}]}"#).is_ok_and(|n| n < 20));
        let deep = "[".repeat(MAX_JSON_DEPTH + 1);
        assert!(check_json(deep.as_bytes()).is_err_and(|e| e.contains("deeper")));
        let wide = format!("[{}0]", "0,".repeat(MAX_ITEMS_PER_VALUE as usize));
        assert!(check_json(wide.as_bytes()).is_err_and(|e| e.contains("items")));
        // Separators inside strings are not items.
        let quoted = format!("[\"{}\"]", ",".repeat(2 * MAX_ITEMS_PER_VALUE as usize));
        assert!(check_json(quoted.as_bytes()).is_ok());
    }

    #[test]
    fn shapes_are_bounded() {
        let mut budget = ShapeBudget::new("Avro");
        for _ in 0..MAX_SHAPE_FIELDS {
            assert!(budget.field().is_ok());
        }
        assert!(budget.field().is_err_and(|e| e.contains("expands")));
    }
}
