//! A JSON table's declared columns, as operators write them: a comma-separated list of
//! `name type` pairs, such as `order_id long, customer string, amount double, paid
//! boolean`. Types are those a JSON scalar takes: `boolean`, `int`, `long`, `float`,
//! `double`, `string`. Parsing only; errors give the byte position and the reason.

/// The type of a declared column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// `true` / `false`.
    Boolean,
    /// A 32-bit integer (widened to long by a value beyond it).
    Int,
    /// A 64-bit integer.
    Long,
    /// A 32-bit float (widened to double by a value beyond it).
    Float,
    /// A 64-bit float.
    Double,
    /// A string.
    String,
}

impl ColumnType {
    fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "boolean" | "bool" => Self::Boolean,
            "int" | "integer" => Self::Int,
            "long" | "bigint" => Self::Long,
            "float" => Self::Float,
            "double" => Self::Double,
            "string" => Self::String,
            _ => return None,
        })
    }
}

/// A declared column: a top-level field of the values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValueColumn {
    /// The field's name in the values.
    pub name: String,
    /// Its type.
    pub column_type: ColumnType,
}

/// A column list that cannot be parsed: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("value columns {text:?}, at byte {position}: {reason}")]
pub struct ValueColumnsError {
    /// The list as given.
    pub text: String,
    /// Byte position of the problem.
    pub position: usize,
    /// What is wrong.
    pub reason: String,
}

/// Parses `name type, name type, ...`; an empty list declares nothing.
pub fn parse_value_columns(text: &str) -> Result<Vec<ValueColumn>, ValueColumnsError> {
    let error = |position: usize, reason: String| ValueColumnsError {
        text: text.to_owned(),
        position,
        reason,
    };
    let mut columns: Vec<ValueColumn> = Vec::new();
    let mut start = 0;
    for part in text.split(',') {
        let position = start + (part.len() - part.trim_start().len());
        start += part.len() + 1;
        let entry = part.trim();
        if entry.is_empty() {
            if text.trim().is_empty() {
                return Ok(Vec::new());
            }
            return Err(error(position, "empty entry".into()));
        }
        let mut words = entry.split_whitespace();
        let (Some(name), Some(type_name), None) = (words.next(), words.next(), words.next()) else {
            return Err(error(
                position,
                format!("expected `name type`, found {entry:?}"),
            ));
        };
        let column_type = ColumnType::parse(type_name).ok_or_else(|| {
            error(
                position + entry.find(type_name).unwrap_or(0),
                format!(
                    "unknown type {type_name:?} (expected boolean, int, long, float, double or string)"
                ),
            )
        })?;
        if columns.iter().any(|c| c.name == name) {
            return Err(error(position, format!("column {name:?} declared twice")));
        }
        columns.push(ValueColumn {
            name: name.to_owned(),
            column_type,
        });
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_columns_and_says_where_a_list_is_wrong() {
        let columns =
            parse_value_columns("order_id long, customer string,amount DOUBLE").unwrap_or_default();
        assert_eq!(
            columns,
            vec![
                ValueColumn {
                    name: "order_id".into(),
                    column_type: ColumnType::Long
                },
                ValueColumn {
                    name: "customer".into(),
                    column_type: ColumnType::String
                },
                ValueColumn {
                    name: "amount".into(),
                    column_type: ColumnType::Double
                },
            ]
        );
        assert_eq!(parse_value_columns(" "), Ok(Vec::new()));
        let error = |text: &str| {
            parse_value_columns(text)
                .err()
                .map(|e| (e.position, e.reason))
        };
        assert_eq!(
            error("a long, b decimal").map(|e| e.0),
            Some(10),
            "the type's position"
        );
        assert!(error("a long,, b int").is_some_and(|e| e.0 == 7 && e.1 == "empty entry"));
        assert!(error("a").is_some_and(|e| e.1.contains("name type")));
        assert!(error("a long, a int").is_some_and(|e| e.1.contains("twice")));
    }
}
