//! The column names of JSON fields: names every supported catalog accepts (Glue, the SQL and
//! REST catalogs, S3 Tables, and the engines reading them: Athena, Spark, Trino, DuckDB),
//! and which column holds a field.
//!
//! The rule, applied to each field name at every level:
//! - ASCII letters, digits and `_` are kept, case included;
//! - any other ASCII character (the dot, space, `-`, control characters...) becomes `_`;
//! - any other character becomes `_u` and its code point in hex (`名` → `_u540d`);
//! - an empty name becomes `_`;
//! - a top-level name that is a Kafka metadata column (`offset`, `timestamp`...) is
//!   prefixed `value_` ([`super::column_name`]);
//! - a name longer than [`MAX_COLUMN_NAME_BYTES`] keeps its first bytes and ends with
//!   `_` and a 16-digit hash of the original name.
//!
//! A column whose name differs from its field's records the field's name in its doc
//! ([`field_doc`]). A field belongs to a column when the column has its mapped name and
//! either records that field in its doc, or records none and the field's name needed no
//! mapping. Any other column of that name, or one differing from it only in case (Glue
//! and Hive-style engines do not tell `Id` from `id`), belongs to another field: the
//! record is a dead letter with the reason, never a failed schema change.
//!
//! The rule is [`place`], for the fields of JSON values and of registry schemas (Avro,
//! Protobuf, JSON Schema) alike: `a-b`, `a_b`, `a.b` and `a b` never share a column.

use std::borrow::Cow;

use iceberg::spec::NestedFieldRef;

/// Longest column name written, in bytes (Glue's limit is 255).
pub const MAX_COLUMN_NAME_BYTES: usize = 255;

/// Longest part of a field's name kept in its column's doc (Glue limits comments to
/// 255 bytes); the hash in the doc identifies the whole name.
const DOC_NAME_CHARS: usize = 160;

/// Prefix of the doc of a column whose name differs from its field's.
const DOC_PREFIX: &str = "kfs: JSON field ";

/// The column name of the field `name` (top-level or nested), by the module's rule.
pub fn column_for(name: &str, top: bool) -> Cow<'_, str> {
    let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let mut column: Cow<'_, str> = if plain {
        Cow::Borrowed(name)
    } else if name.is_empty() {
        Cow::Borrowed("_")
    } else {
        let mut mapped = String::with_capacity(name.len());
        for c in name.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                mapped.push(c);
            } else if c.is_ascii() {
                mapped.push('_');
            } else {
                mapped.push_str(&format!("_u{:x}", u32::from(c)));
            }
        }
        Cow::Owned(mapped)
    };
    if top {
        let renamed = super::column_name(&column);
        if renamed != column {
            column = Cow::Owned(renamed);
        }
    }
    if column.len() > MAX_COLUMN_NAME_BYTES {
        // The mapped name is ASCII: any byte boundary is a character boundary.
        let hash = kfs_plan::hash::fnv1a(name.as_bytes());
        column = Cow::Owned(format!(
            "{}_{hash:016x}",
            &column[..MAX_COLUMN_NAME_BYTES - 17]
        ));
    }
    column
}

/// The doc of a column holding the field `name` whose column name differs from it:
/// the name (escaped, its first characters) and a hash of the whole name.
pub fn field_doc(name: &str) -> String {
    let escaped: String = format!("{name:?}").chars().take(DOC_NAME_CHARS).collect();
    format!(
        "{DOC_PREFIX}{escaped} #{:016x}",
        kfs_plan::hash::fnv1a(name.as_bytes())
    )
}

/// Where the field `name` of an object goes among `fields` (the columns of the
/// object's struct, or the table's top-level columns when `top`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement<'a> {
    /// The column at this index holds it.
    Column(usize),
    /// No column holds it yet: a new one would be named so, with this doc.
    New {
        /// The column's name.
        name: Cow<'a, str>,
        /// The column's doc, when its name differs from the field's.
        doc: Option<String>,
    },
}

/// Which column of `fields` holds the field `name`, or the new column it needs; a
/// column of its name (or of its name in another case) that holds another field is an
/// error naming both (the record's reason for the dead-letter table).
pub fn place<'a>(
    fields: &[NestedFieldRef],
    name: &'a str,
    top: bool,
    path: &str,
) -> Result<Placement<'a>, String> {
    let column = column_for(name, top);
    let mapped = column != name && !(top && column == super::column_name(name));
    let doc = mapped.then(|| field_doc(name));
    if let Some(index) = fields.iter().position(|f| f.name == column) {
        let field = &fields[index];
        let recorded = field.doc.as_deref().filter(|d| d.starts_with(DOC_PREFIX));
        // Registry tables recorded a renamed metadata field's name too (`offset` in
        // `value_offset`): that column holds the field alike.
        let legacy = || doc.is_none() && recorded == Some(field_doc(name).as_str());
        if recorded == doc.as_deref() || legacy() {
            return Ok(Placement::Column(index));
        }
        return Err(format!(
            "field {path:?} maps to column {column:?}, which holds another field ({})",
            recorded.unwrap_or("its own name")
        ));
    }
    if let Some(other) = fields.iter().find(|f| f.name.eq_ignore_ascii_case(&column)) {
        return Err(format!(
            "field {path:?} maps to column {column:?}, which differs only in case from column {:?}: catalogs such as Glue do not tell them apart",
            other.name
        ));
    }
    Ok(Placement::New { name: column, doc })
}
