//! A table whose partition source column another engine promoted (`partition`, int
//! to long, as Iceberg's schema evolution allows, and as our JSON widening does to a
//! declared int column): the files written before hold int partition values that the
//! current schema types long. Compaction removing them counts them in the snapshot's
//! summary without formatting those values for the current schema (iceberg-rust's
//! summary collector panics on them), and writes the merged file's value as a long
//! (iceberg-rust refuses an int in a long field); every row reads once. Our own
//! `partition` column promoted: the converter writes it as a long from then on and
//! every reader of our columns takes either type.

use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{Catalog, TableUpdate};
use kfs_core::{TableSwap, table_ident};
use kfs_plan::naming::{TableName, TableNaming, ValueFormat};

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

/// Partitions the table `name` by `identity(column)` (a new default spec), as another
/// engine would.
async fn partition_by(local: &Local, name: &TableName, column: &str) -> TestResult {
    let table = local.catalog.load_table(&table_ident(name)).await?;
    let source = table
        .metadata()
        .current_schema()
        .field_by_name(column)
        .ok_or(format!("no {column} column"))?
        .id;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(source, column, Transform::Identity)?
        .build();
    let updates = vec![
        TableUpdate::AddSpec { spec },
        TableUpdate::SetDefaultSpec { spec_id: -1 },
    ];
    local.swap.commit(&table, vec![], updates).await?;
    Ok(())
}

/// Unpartitions the table `name` and drops its column `column`, as another engine
/// would: the older spec's source column is gone from the current schema.
async fn drop_partitioning(local: &Local, name: &TableName, column: &str) -> TestResult {
    let table = local.catalog.load_table(&table_ident(name)).await?;
    let current = table.metadata().current_schema();
    let fields: Vec<iceberg::spec::NestedFieldRef> = current
        .as_struct()
        .fields()
        .iter()
        .filter(|field| field.name != column)
        .cloned()
        .collect();
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()?;
    let updates = vec![
        TableUpdate::AddSpec {
            spec: UnboundPartitionSpec::builder().build(),
        },
        TableUpdate::SetDefaultSpec { spec_id: -1 },
        TableUpdate::AddSchema { schema },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    local.swap.commit(&table, vec![], updates).await?;
    Ok(())
}

/// A JSON mirror another engine partitioned by a value field, then unpartitioned and
/// stripped of that field: our commits that delete rows of the files of the older
/// spec write its delete manifests with the schema it binds (iceberg-rust refuses the
/// current one), and compaction removes those files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_whose_older_spec_lost_its_source_column_updates_its_rows() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        mode: kfs_plan::mode::ModeSetting::parse("upsert", Some("id"))?,
        ..TableNaming::default()
    };
    let name = naming.table_for("orders");
    let value = |id: &str, region: &str| format!(r#"{{"id":"{id}","region":"{region}"}}"#);
    let first = vec![keyed(0, "a", Some(&value("a", "eu")))];
    local.put_records_at("orders", 0, first)?;
    local.run(&naming).await?;
    partition_by(&local, &name, "region").await?;
    let second = vec![
        keyed(1, "b", Some(&value("b", "eu"))),
        keyed(2, "c", Some(&value("c", "us"))),
    ];
    local.put_records_at("orders", 0, second)?;
    local.run(&naming).await?;
    drop_partitioning(&local, &name, "region").await?;
    // Updates of keys whose rows are in the files of the spec by region.
    let third = vec![keyed(3, "b", Some(&value("b", "ap"))), keyed(4, "c", None)];
    local.put_records_at("orders", 0, third)?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    let live = |table: Table| async move {
        let rows = crate::local::read::live_rows(&table).await?;
        let mut rows: Vec<(i32, i64)> = rows.into_iter().map(|(at, _)| at).collect();
        rows.sort();
        Ok::<_, BoxError>(rows)
    };
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    assert_eq!(live(table).await?, vec![(0, 0), (0, 3)]);
    let compacted = local.compact(&name).await?;
    assert!(compacted.delete_files_folded > 0, "{compacted:?}");
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    assert_eq!(live(table).await?, vec![(0, 0), (0, 3)]);
    Ok(())
}

/// Our own `partition` column promoted to long by another engine (Iceberg cannot
/// narrow it back): the segments after it are written with the column as a long,
/// every reader of our columns (the offsets a commit checks, the mirror's rows, a
/// rewrite) takes either type, and every reader reads each change once; for an append
/// table partitioned by it, a mirror, and a mirror in v3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_partition_column_promoted_by_another_engine_keeps_the_pipeline_going() -> TestResult {
    let by_partition = TableNaming {
        partition_by: kfs_plan::layout::parse_partition_spec("identity(partition)")?,
        partition_by_given: true,
        ..TableNaming::default()
    };
    let mirror = crate::vector_mirrors::naming(None)?;
    let v3_mirror = crate::vector_mirrors::naming(Some("3"))?;
    for (naming, keyed_rows) in [(by_partition, false), (mirror, true), (v3_mirror, true)] {
        let local = Local::open().await?;
        let name = naming.table_for("orders");
        let mut reference = std::collections::BTreeMap::new();
        let mut expected = Vec::new();
        for (at, round) in crate::vector_mirrors::rounds().into_iter().enumerate() {
            if at == 2 {
                promote(&local, &naming, "partition").await?;
            }
            expected = match keyed_rows {
                true => crate::vector_mirrors::fold(&mut reference, &round)
                    .into_keys()
                    .map(|(_, offset)| offset)
                    .collect(),
                false => (0..=round.last().map_or(0, |r| r.offset)).collect(),
            };
            local.put_records_at("orders", 0, round)?;
            let report = local.run(&naming).await?;
            assert!(!report.left_work(), "{report:?}");
        }
        let found: Vec<i64> = crate::local::offsets(&local.catalog, &name)
            .await?
            .into_keys()
            .map(|(_, offset)| offset)
            .collect();
        assert_eq!(found, expected, "{naming:?}");
        crate::row_deltas::readers_see(&local, &name.to_string(), expected.iter().copied()).await?;
        local.compact(&name).await?;
        crate::row_deltas::readers_see(&local, &name.to_string(), expected.into_iter()).await?;
    }
    Ok(())
}
