//! Coalescing a commit's small files into target-size files before they are appended,
//! and writing files of an older partition spec again in the current one.

use iceberg::table::Table;
use std::collections::{BTreeSet, HashMap};

/// Writes the files of an older partition spec again in the table's default spec
/// (named after the commit, unique to this attempt). Returns the files to commit and
/// the paths written again.
pub(crate) async fn relayout(
    table: &Table,
    files: Vec<(iceberg::spec::DataFile, i32)>,
    commit_id: &str,
) -> Result<(Vec<iceberg::spec::DataFile>, Vec<String>), iceberg::Error> {
    let default_spec = table.metadata().default_partition_spec_id();
    let (mut current, mut relaid) = (Vec::new(), Vec::new());
    for (index, (file, spec_id)) in files.into_iter().enumerate() {
        if spec_id == default_spec {
            current.push(file);
            continue;
        }
        let stem = format!(
            "relaid-{commit_id}-{index}-{}",
            crate::convert::write_token()
        );
        let all = std::collections::BTreeSet::new();
        current.extend(crate::convert::rewrite_in_default_spec(table, &file, stem, &all).await?);
        relaid.push(file.file_path().to_owned());
    }
    Ok((current, relaid))
}

/// Merges small files, per partition value and in offset order, into files of about
/// `target` bytes named after the commit (and unique to this attempt). Returns the
/// files to commit and the paths merged away.
pub(crate) async fn coalesce(
    table: &Table,
    files: Vec<iceberg::spec::DataFile>,
    target: u64,
    commit_id: &str,
) -> Result<(Vec<iceberg::spec::DataFile>, Vec<String>), iceberg::Error> {
    use kfs_plan::compaction::{CompactionPolicy, plan_compaction};
    let stats: Vec<_> = files.iter().map(crate::table::file_stat).collect();
    let policy = CompactionPolicy::for_target(target);
    let groups = plan_compaction(&stats, &policy);
    let by_path: HashMap<&str, &iceberg::spec::DataFile> =
        files.iter().map(|f| (f.file_path(), f)).collect();
    let mut merged_away = Vec::new();
    let mut out = Vec::new();
    for (n, group) in groups.iter().enumerate() {
        let inputs: Vec<&iceberg::spec::DataFile> = group
            .files
            .iter()
            .filter_map(|f| by_path.get(f.path.as_str()).copied())
            .collect();
        let (merged, _) = kfs_parquet::merge_data_files(
            table,
            &inputs,
            &format!(
                "coalesced-{commit_id}-{n}-{}",
                crate::convert::write_token()
            ),
            policy.copy_row_group_min_bytes,
        )
        .await?;
        out.push(merged);
        merged_away.extend(group.files.iter().map(|f| f.path.clone()));
    }
    let gone: BTreeSet<&str> = merged_away.iter().map(String::as_str).collect();
    out.extend(
        files
            .iter()
            .filter(|f| !gone.contains(f.file_path()))
            .cloned(),
    );
    Ok((out, merged_away))
}
