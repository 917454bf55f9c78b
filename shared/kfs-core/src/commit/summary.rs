//! The summary of the snapshots built here (`replace`, `row_delta`): the files, rows
//! and bytes a snapshot adds and removes, the partitions it changes, and its totals.
//! Counted as Java's `SnapshotSummary` counts them, so every engine reads the same
//! figures: a deletion vector is a delete file and a DV (not a position-delete file),
//! its bytes its blob's (its Puffin file holds other files' vectors too). Counts
//! saturate: another engine's files and totals may carry any number.
//!
//! iceberg-rust's collector is not used: it counts a Puffin file's whole size once per
//! vector, adds unchecked, and names each partition by formatting its values for the
//! current schema, which panics on values another engine may have left (a file of an
//! older spec whose source column was dropped, a source column promoted since, a date
//! past chrono's range).

use std::collections::{HashMap, HashSet};

use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, Literal, PrimitiveLiteral, PrimitiveType,
    SnapshotRef, Struct,
};

/// What a summary counts of some files.
#[derive(Debug, Clone, Copy)]
enum Count {
    DataFiles,
    Records,
    Bytes,
    DeleteFiles,
    PositionDeleteFiles,
    Vectors,
    PositionDeletes,
    EqualityDeleteFiles,
    EqualityDeletes,
}

/// Each count's properties: (added, removed, and the total where a snapshot carries one).
const PROPERTIES: [(Count, &str, &str, Option<&str>); 9] = [
    (
        Count::DataFiles,
        "added-data-files",
        "deleted-data-files",
        Some("total-data-files"),
    ),
    (
        Count::Records,
        "added-records",
        "deleted-records",
        Some("total-records"),
    ),
    (
        Count::Bytes,
        "added-files-size",
        "removed-files-size",
        Some("total-files-size"),
    ),
    (
        Count::DeleteFiles,
        "added-delete-files",
        "removed-delete-files",
        Some("total-delete-files"),
    ),
    (
        Count::PositionDeleteFiles,
        "added-position-delete-files",
        "removed-position-delete-files",
        None,
    ),
    (Count::Vectors, "added-dvs", "removed-dvs", None),
    (
        Count::PositionDeletes,
        "added-position-deletes",
        "removed-position-deletes",
        Some("total-position-deletes"),
    ),
    (
        Count::EqualityDeleteFiles,
        "added-equality-delete-files",
        "removed-equality-delete-files",
        None,
    ),
    (
        Count::EqualityDeletes,
        "added-equality-deletes",
        "removed-equality-deletes",
        Some("total-equality-deletes"),
    ),
];

/// The property naming the changed partitions' count.
const CHANGED_PARTITION_COUNT: &str = "changed-partition-count";

/// Sums of some files, by what a summary counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileCounts([u64; PROPERTIES.len()]);

impl FileCounts {
    /// Counts `file`.
    pub(crate) fn count(&mut self, file: &DataFile) {
        let vector = file.file_format() == DataFileFormat::Puffin;
        let bytes = match (vector, file.content_size_in_bytes()) {
            (true, Some(size)) => u64::try_from(size).unwrap_or(0),
            _ => file.file_size_in_bytes(),
        };
        self.add(Count::Bytes, bytes);
        let rows = file.record_count();
        match file.content_type() {
            DataContentType::Data => {
                self.add(Count::DataFiles, 1);
                self.add(Count::Records, rows);
            }
            DataContentType::PositionDeletes => {
                self.add(Count::DeleteFiles, 1);
                let kind = match vector {
                    true => Count::Vectors,
                    false => Count::PositionDeleteFiles,
                };
                self.add(kind, 1);
                self.add(Count::PositionDeletes, rows);
            }
            DataContentType::EqualityDeletes => {
                self.add(Count::DeleteFiles, 1);
                self.add(Count::EqualityDeleteFiles, 1);
                self.add(Count::EqualityDeletes, rows);
            }
        }
    }

    fn add(&mut self, count: Count, n: u64) {
        let sum = &mut self.0[count as usize];
        *sum = sum.saturating_add(n);
    }

    fn get(&self, count: Count) -> u64 {
        self.0[count as usize]
    }

    /// The totals of a snapshot whose live files these are, every one (0 included).
    pub(crate) fn totals(&self) -> impl Iterator<Item = (String, String)> + '_ {
        PROPERTIES.iter().filter_map(|(count, _, _, total)| {
            total.map(|total| (total.to_owned(), self.get(*count).to_string()))
        })
    }
}

/// The files a snapshot adds and removes, and the partitions they change.
#[derive(Debug, Default)]
pub(crate) struct FileSummary {
    added: FileCounts,
    removed: FileCounts,
    partitions: HashSet<(i32, Struct)>,
}

impl FileSummary {
    /// Counts `file` (of the partition spec `spec_id`), added or (`added` false)
    /// removed.
    pub(crate) fn count(&mut self, file: &DataFile, spec_id: i32, added: bool) {
        match added {
            true => self.added.count(file),
            false => self.removed.count(file),
        }
        if !file.partition().fields().is_empty() {
            // A value of a promoted source column is the same partition in either
            // type: the key holds ints as longs, floats as doubles.
            let key = file.partition().fields().iter().map(|value| {
                widened(value).map_or_else(|| value.clone(), |(wider, _)| Some(wider))
            });
            self.partitions.insert((spec_id, Struct::from_iter(key)));
        }
    }

    /// The summary's properties: each count above 0, the changed partitions' count.
    pub(crate) fn build(&self) -> HashMap<String, String> {
        let mut properties = HashMap::new();
        for (count, added, removed, _) in PROPERTIES {
            for (name, sum) in [(added, &self.added), (removed, &self.removed)] {
                if sum.get(count) > 0 {
                    properties.insert(name.to_owned(), sum.get(count).to_string());
                }
            }
        }
        if !self.partitions.is_empty() {
            properties.insert(
                CHANGED_PARTITION_COUNT.to_owned(),
                self.partitions.len().to_string(),
            );
        }
        properties
    }

    /// The summary's properties with the totals after `parent`: the parent's plus
    /// what this adds, less what it removes; a total the parent does not carry
    /// (another engine's snapshot without it), or one that would fall below zero, is
    /// left out rather than guessed.
    pub(crate) fn build_after(&self, parent: Option<&SnapshotRef>) -> HashMap<String, String> {
        let mut properties = self.build();
        let previous = parent.map(|p| &p.summary().additional_properties);
        for (count, _, _, total) in PROPERTIES {
            let Some(total) = total else { continue };
            let before = match previous {
                Some(previous) => previous.get(total).and_then(|v| v.parse::<u64>().ok()),
                None => Some(0),
            };
            // Below zero (another engine's total was wrong): left out, as Java does.
            let after = before.and_then(|before| {
                before
                    .saturating_add(self.added.get(count))
                    .checked_sub(self.removed.get(count))
            });
            if let Some(after) = after {
                properties.insert(total.to_owned(), after.to_string());
            }
        }
        properties
    }
}

/// `value` in the type its own is promoted to (an int as a long, a float as a
/// double), with that type; `None` for any other value.
pub(crate) fn widened(value: &Option<Literal>) -> Option<(Literal, PrimitiveType)> {
    match value {
        Some(Literal::Primitive(PrimitiveLiteral::Int(v))) => {
            Some((Literal::long(i64::from(*v)), PrimitiveType::Long))
        }
        Some(Literal::Primitive(PrimitiveLiteral::Float(v))) => {
            Some((Literal::double(f64::from(v.0)), PrimitiveType::Double))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataFileBuilder, Literal};

    fn file(content: DataContentType, format: DataFileFormat, rows: u64) -> DataFile {
        let mut builder = DataFileBuilder::default();
        builder
            .content(content)
            .file_path(format!("s3://t/{rows}"))
            .file_format(format)
            .partition(Struct::from_iter([Some(Literal::int(7))]))
            .record_count(rows)
            .file_size_in_bytes(1_000);
        if format == DataFileFormat::Puffin {
            builder
                .referenced_data_file(Some("s3://t/data".into()))
                .content_offset(Some(4))
                .content_size_in_bytes(Some(40));
        }
        builder.build().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_vector_counts_its_blob_and_counts_as_a_dv() {
        let mut summary = FileSummary::default();
        let vector = file(DataContentType::PositionDeletes, DataFileFormat::Puffin, 3);
        summary.count(&vector, 0, true);
        summary.count(&vector, 0, true);
        let parquet = file(DataContentType::PositionDeletes, DataFileFormat::Parquet, 2);
        summary.count(&parquet, 0, false);
        let built = summary.build();
        let get = |name: &str| built.get(name).map(String::as_str);
        assert_eq!(get("added-files-size"), Some("80"));
        assert_eq!(get("added-dvs"), Some("2"));
        assert_eq!(get("added-delete-files"), Some("2"));
        assert_eq!(get("added-position-deletes"), Some("6"));
        assert_eq!(get("added-position-delete-files"), None);
        assert_eq!(get("removed-position-delete-files"), Some("1"));
        assert_eq!(get("removed-files-size"), Some("1000"));
        assert_eq!(get(CHANGED_PARTITION_COUNT), Some("1"));
    }

    #[test]
    fn counts_saturate_on_another_engines_numbers() {
        let mut summary = FileSummary::default();
        let huge = file(DataContentType::Data, DataFileFormat::Parquet, u64::MAX);
        summary.count(&huge, 0, true);
        summary.count(&huge, 0, true);
        let built = summary.build_after(None);
        assert_eq!(built.get("added-records"), Some(&u64::MAX.to_string()));
        assert_eq!(built.get("total-records"), Some(&u64::MAX.to_string()));
        let mut removing = FileSummary::default();
        removing.count(&huge, 0, false);
        assert_eq!(removing.build_after(None).get("total-records"), None);
    }
}
