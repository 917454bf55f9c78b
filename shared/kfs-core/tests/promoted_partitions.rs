//! A table whose partition source column another engine promoted (`partition`, int
//! to long, as Iceberg's schema evolution allows, and as our JSON widening does to a
//! declared int column): the files written before hold int partition values that the
//! current schema types long. Compaction removing them counts them in the snapshot's
//! summary without formatting those values for the current schema (iceberg-rust's
//! summary collector panics on them), and writes the merged file's value as a long
//! (iceberg-rust refuses an int in a long field); every row reads once.

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{Catalog, TableUpdate};
use kfs_core::{TableSwap, table_ident};
use kfs_plan::naming::TableNaming;

use crate::local::{BoxError, Local};
use crate::row_deltas::keyed;

type TestResult = Result<(), BoxError>;

/// Promotes the column `column` of the table `name` from int to long, as another
/// engine would: the schema added with the same field id, made current.
async fn promote(local: &Local, naming: &TableNaming, column: &str) -> TestResult {
    let ident = table_ident(&naming.table_for("orders"));
    let table = local.catalog.load_table(&ident).await?;
    let current = table.metadata().current_schema();
    let fields: Vec<iceberg::spec::NestedFieldRef> = current
        .as_struct()
        .fields()
        .iter()
        .map(|field| match field.name == column {
            true => std::sync::Arc::new(NestedField::new(
                field.id,
                &field.name,
                Type::Primitive(PrimitiveType::Long),
                field.required,
            )),
            false => field.clone(),
        })
        .collect();
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()?;
    local
        .swap
        .commit(
            &table,
            vec![],
            vec![
                TableUpdate::AddSchema { schema },
                TableUpdate::SetCurrentSchema { schema_id: -1 },
            ],
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_whose_partition_column_was_promoted_compacts_its_old_files() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        partition_by: kfs_plan::layout::parse_partition_spec("identity(partition)")?,
        partition_by_given: true,
        ..TableNaming::default()
    };
    let name = naming.table_for("orders");
    for base in [0, 3, 6] {
        let records = (base..base + 3).map(|o| keyed(o, "k", Some("v"))).collect();
        local.put_records_at("orders", 0, records)?;
        local.run(&naming).await?;
    }
    promote(&local, &naming, "partition").await?;
    let compacted = local.compact(&name).await?;
    assert_eq!(compacted.files_removed, 3, "{compacted:?}");
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let summary = &table
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?
        .summary()
        .additional_properties;
    assert_eq!(
        summary.get("changed-partition-count").map(String::as_str),
        Some("1"),
        "{summary:?}"
    );
    // The compacted file's partition value is written as the long it now is.
    let entries = kfs_core::live_entries(&table).await?;
    let [entry] = entries.as_slice() else {
        return Err(format!("{} live files", entries.len()).into());
    };
    assert_eq!(
        entry.data_file().partition().fields(),
        &[Some(iceberg::spec::Literal::long(0))]
    );
    let offsets: Vec<i64> = (0..9).collect();
    crate::row_deltas::readers_see(&local, &name.to_string(), offsets.into_iter()).await
}
