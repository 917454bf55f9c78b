//! How a topic's table is partitioned, as operators write it: a comma-separated list of
//! transforms of the table's columns, such as `day(timestamp)`, `hour(timestamp)`,
//! `identity(partition)`, `bucket(16, key)`, `truncate(4, topic)`, or combinations
//! (`day(timestamp), identity(partition)`). Parsing only: which columns exist and which
//! transforms apply to their types is checked when the spec is bound to the schema.

/// One partition field: a transform of a source column.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionField {
    /// The source column.
    pub column: String,
    /// The transform.
    pub transform: PartitionTransform,
}

/// A partition transform (the Iceberg spec's, minus `void`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartitionTransform {
    /// The value itself.
    Identity,
    /// Years since 1970.
    Year,
    /// Months since 1970.
    Month,
    /// Days since 1970.
    Day,
    /// Hours since 1970.
    Hour,
    /// A hash of the value modulo this many buckets.
    Bucket(u32),
    /// The value truncated to this width.
    Truncate(u32),
}

impl PartitionTransform {
    /// The transform in Iceberg's notation (`day`, `bucket[16]`).
    pub fn iceberg_name(&self) -> String {
        match self {
            Self::Identity => "identity".into(),
            Self::Year => "year".into(),
            Self::Month => "month".into(),
            Self::Day => "day".into(),
            Self::Hour => "hour".into(),
            Self::Bucket(n) => format!("bucket[{n}]"),
            Self::Truncate(w) => format!("truncate[{w}]"),
        }
    }
}

impl PartitionField {
    /// The partition field's name, as Spark and pyiceberg name it: the column for
    /// `identity`, else `{column}_{transform}` (`timestamp_day`, `key_bucket`).
    pub fn name(&self) -> String {
        let suffix = match self.transform {
            PartitionTransform::Identity => return self.column.clone(),
            PartitionTransform::Year => "year",
            PartitionTransform::Month => "month",
            PartitionTransform::Day => "day",
            PartitionTransform::Hour => "hour",
            PartitionTransform::Bucket(_) => "bucket",
            PartitionTransform::Truncate(_) => "trunc",
        };
        format!("{}_{suffix}", self.column)
    }
}

impl std::fmt::Display for PartitionField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.transform {
            PartitionTransform::Identity => write!(f, "identity({})", self.column),
            PartitionTransform::Year => write!(f, "year({})", self.column),
            PartitionTransform::Month => write!(f, "month({})", self.column),
            PartitionTransform::Day => write!(f, "day({})", self.column),
            PartitionTransform::Hour => write!(f, "hour({})", self.column),
            PartitionTransform::Bucket(n) => write!(f, "bucket({n}, {})", self.column),
            PartitionTransform::Truncate(w) => write!(f, "truncate({w}, {})", self.column),
        }
    }
}

/// A partition spec that cannot be read: where (byte position in the text) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("partition spec {text:?}, at byte {position}: {reason}")]
pub struct PartitionSpecError {
    /// The spec as written.
    pub text: String,
    /// Byte position of the problem.
    pub position: usize,
    /// What is wrong.
    pub reason: String,
}

/// Parses `day(timestamp), bucket(16, key)`; an empty text means unpartitioned.
pub fn parse_partition_spec(text: &str) -> Result<Vec<PartitionField>, PartitionSpecError> {
    let error = |position: usize, reason: String| PartitionSpecError {
        text: text.to_owned(),
        position,
        reason,
    };
    let mut fields: Vec<PartitionField> = Vec::new();
    let mut rest = text;
    loop {
        let start = text.len() - rest.len();
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            if fields.is_empty() {
                return Ok(fields);
            }
            return Err(error(start, "expected a transform after ','".into()));
        }
        let at = text.len() - trimmed.len();
        let open = trimmed
            .find('(')
            .ok_or_else(|| error(at, "expected `transform(column)`".into()))?;
        let close = trimmed
            .find(')')
            .ok_or_else(|| error(at + open, "unclosed '('".into()))?;
        if close < open {
            return Err(error(at + close, "')' before '('".into()));
        }
        let name = trimmed[..open].trim().to_ascii_lowercase();
        let arguments: Vec<&str> = trimmed[open + 1..close].split(',').map(str::trim).collect();
        let width = |position: usize, what: &str| -> Result<u32, PartitionSpecError> {
            let argument = arguments.first().copied().unwrap_or_default();
            match argument.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(error(
                    position,
                    format!("{name} needs a positive {what} first, not {argument:?}"),
                )),
            }
        };
        let (transform, column) = match (name.as_str(), arguments.as_slice()) {
            ("identity", [column]) => (PartitionTransform::Identity, *column),
            ("year" | "years", [column]) => (PartitionTransform::Year, *column),
            ("month" | "months", [column]) => (PartitionTransform::Month, *column),
            ("day" | "days", [column]) => (PartitionTransform::Day, *column),
            ("hour" | "hours", [column]) => (PartitionTransform::Hour, *column),
            ("bucket", [_, column]) => (
                PartitionTransform::Bucket(width(at + open + 1, "bucket count")?),
                *column,
            ),
            ("truncate", [_, column]) => (
                PartitionTransform::Truncate(width(at + open + 1, "width")?),
                *column,
            ),
            (
                "identity" | "year" | "years" | "month" | "months" | "day" | "days" | "hour"
                | "hours",
                _,
            ) => {
                return Err(error(at + open + 1, format!("{name} takes one column")));
            }
            ("bucket" | "truncate", _) => {
                return Err(error(
                    at + open + 1,
                    format!("{name} takes a number and a column: {name}(N, column)"),
                ));
            }
            _ => {
                return Err(error(
                    at,
                    format!(
                        "unknown transform {name:?} (identity, year, month, day, hour, bucket, truncate)"
                    ),
                ));
            }
        };
        if column.is_empty() {
            return Err(error(at + open + 1, "missing column".into()));
        }
        let field = PartitionField {
            column: column.to_owned(),
            transform,
        };
        if fields.iter().any(|f| f.name() == field.name()) {
            return Err(error(at, format!("{field} is given twice")));
        }
        fields.push(field);
        let after = trimmed[close + 1..].trim_start();
        let after_at = text.len() - after.len();
        rest = match after.strip_prefix(',') {
            Some(next) => next,
            None if after.is_empty() => return Ok(fields),
            None => return Err(error(after_at, "expected ',' between transforms".into())),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_transforms_and_combinations() {
        let fields = parse_partition_spec("day(timestamp), bucket(16, key),identity(partition)");
        assert_eq!(
            fields,
            Ok(vec![
                PartitionField {
                    column: "timestamp".into(),
                    transform: PartitionTransform::Day,
                },
                PartitionField {
                    column: "key".into(),
                    transform: PartitionTransform::Bucket(16),
                },
                PartitionField {
                    column: "partition".into(),
                    transform: PartitionTransform::Identity,
                },
            ])
        );
        let names: Vec<String> = fields
            .unwrap_or_default()
            .iter()
            .map(PartitionField::name)
            .collect();
        assert_eq!(names, ["timestamp_day", "key_bucket", "partition"]);
        assert_eq!(parse_partition_spec("  "), Ok(vec![]));
        assert_eq!(
            parse_partition_spec("HOUR(timestamp)").map(|f| f[0].transform.iceberg_name()),
            Ok("hour".into())
        );
    }

    #[test]
    fn errors_say_where_and_why() {
        for (text, position, reason) in [
            ("week(timestamp)", 0, "unknown transform"),
            ("day(timestamp) hour(timestamp)", 15, "expected ','"),
            ("bucket(key)", 7, "takes a number and a column"),
            ("bucket(0, key)", 7, "positive bucket count"),
            ("day(timestamp), ", 15, "expected a transform"),
            ("day(timestamp", 3, "unclosed"),
            ("day(a, b)", 4, "takes one column"),
            ("day(timestamp), day(timestamp)", 16, "given twice"),
        ] {
            match parse_partition_spec(text) {
                Err(e) => {
                    assert_eq!(e.position, position, "{text}: {e}");
                    assert!(e.reason.contains(reason), "{text}: {e}");
                }
                Ok(fields) => panic!("{text} parsed as {fields:?}"),
            }
        }
    }
}
