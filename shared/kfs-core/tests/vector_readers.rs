//! Which readers apply deletion vectors, measured: a table of ours upgraded to format
//! v3 (as another engine would), appended to, then a delete snapshot of one Puffin
//! file holding a deletion vector for each of its two data files (written by
//! `kfs_parquet::puffin_of_vectors`, the v3 delete manifest and manifest list of
//! iceberg-rust 0.10, row lineage carried). pyiceberg and DuckDB must read the rows
//! the vectors leave; Daft and ClickHouse (chDB) are measured when installed
//! (`check_deletes.py` prints their result: docs/design/upserts.md#readers).

use std::collections::{BTreeMap, BTreeSet};

use iceberg::Catalog;
use iceberg::spec::FormatVersion;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use kfs_core::{live_entries, table_ident};
use kfs_plan::naming::TableNaming;

use crate::local::{BoxError, Local};

type TestResult = Result<(), BoxError>;

const VALUES: [&str; 10] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];

/// Commits, as an engine writing deletion vectors would, one Puffin file of a vector
/// per data file of `vectors` (positions to delete) as a v3 delete snapshot.
async fn commit_vectors(
    local: &Local,
    table: &Table,
    vectors: &BTreeMap<String, BTreeSet<i64>>,
) -> TestResult {
    let metadata = table.metadata();
    let (bytes, blobs) = kfs_parquet::puffin_of_vectors(vectors)?;
    let (path, size) =
        crate::local::engine::write_file(table, "engine-vectors.puffin", bytes).await?;
    let spec_id = metadata.default_partition_spec_id();
    let mut deletes = Vec::new();
    for blob in &blobs {
        deletes.push(kfs_parquet::vector_delete_file(
            &path,
            size,
            blob,
            spec_id,
            iceberg::spec::Struct::empty(),
        )?);
    }
    crate::local::engine::commit_deletes(local, table, deletes).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_and_duckdb_apply_deletion_vectors() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let name = naming.table_for("orders");
    let ident = table_ident(&name);
    local.put("orders", 0, &VALUES, 1)?;
    local.run(&naming).await?;
    let table = local.catalog.load_table(&ident).await?;
    let tx = Transaction::new(&table);
    let tx = tx
        .upgrade_table_version()
        .set_format_version(FormatVersion::V3)
        .apply(tx)?;
    tx.commit(&local.catalog).await?;
    local.put("orders", 10, &VALUES, 1)?;
    local.run(&naming).await?;
    let table = local.catalog.load_table(&ident).await?;
    // The first commit's file holds offsets 0-9 at positions 0-9, the second's 10-19.
    let mut files: Vec<(i64, String)> = live_entries(&table)
        .await?
        .iter()
        .map(|e| (e.sequence_number().unwrap_or(0), e.file_path().to_owned()))
        .collect();
    files.sort();
    let [(_, first), (_, second)] = files.as_slice() else {
        return Err(format!("two data files expected: {files:?}").into());
    };
    let vectors = BTreeMap::from([
        (first.clone(), BTreeSet::from([1, 3])),
        (second.clone(), BTreeSet::from([0, 9])),
    ]);
    commit_vectors(&local, &table, &vectors).await?;
    let left = (0..20).filter(|o| ![1, 3, 10, 19].contains(o));
    crate::row_deltas::readers_see(&local, &name.to_string(), left).await
}
