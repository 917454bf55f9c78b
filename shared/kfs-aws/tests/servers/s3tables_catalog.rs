//! Topic tables in an Amazon S3 Tables table bucket (moto): a JSON table and its
//! dead-letter table created in the bucket (S3 Tables chooses their storage), appended
//! to with the offset map, a column added by a later field through the service's
//! version-token swap, and a compaction committed through the same swap; every offset
//! ends in exactly one of the two tables.

use kfs_core::compact_table;
use kfs_core::table_ident;
use kfs_core::table_watermarks;
use kfs_core::{PipelineConfig, now_ms, run_pass};
use kfs_plan::naming::{TableNaming, ValueFormat};
use kfs_segment::Compression;
use kfs_testkit::{LocalStack, table_contents};
use kfs_workload::{encode_records, simple_records};

/// Uploads segment `base..base + 9` of `orders` partition 0: JSON objects, except at
/// every third offset; `later` values carry one more field.
fn put_segment(stack: &LocalStack, base: i64, later: bool) {
    let mut records = simple_records(base, 9, |offset| {
        let value = if offset % 3 == 0 {
            format!("not json {offset}")
        } else if later {
            format!(r#"{{"n": {offset}, "region": "eu"}}"#)
        } else {
            format!(r#"{{"n": {offset}}}"#)
        };
        Some(value.into_bytes())
    });
    for record in &mut records {
        record.key = None;
    }
    let segment =
        encode_records(records, Compression::Zstd).unwrap_or_else(|e| panic!("encode: {e}"));
    let key = format!("default/orders/0/segment-{base:020}");
    stack.put(&[
        (&format!("{key}.kfs"), &segment.kfs),
        (&format!("{key}.index"), &segment.index),
    ]);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_tables_their_dead_letters_and_compactions_live_in_a_table_bucket() {
    let stack = LocalStack::start();
    let handle = stack.s3tables_catalog_handle("lake").await;
    let catalog = handle.catalog.as_ref();
    let config = PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Json,
            ..TableNaming::default()
        },
        ..PipelineConfig::default()
    };
    let (source, ledger) = (stack.source(), stack.ledger());
    let pass = || async {
        run_pass(
            &source,
            catalog,
            handle.swap.as_ref(),
            &ledger,
            &config,
            &|_| {},
        )
        .await
        .unwrap_or_else(|e| panic!("pass: {e}"))
    };
    put_segment(&stack, 0, false);
    let first = pass().await;
    assert_eq!(first.converted, 1, "{first:?}");
    put_segment(&stack, 9, true);
    put_segment(&stack, 18, true);
    let second = pass().await;
    assert_eq!(second.converted, 2, "{second:?}");
    assert!(
        second.tables.values().all(|o| o.dead_letters == 6),
        "{second:?}"
    );

    // 27 offsets: 18 rows in the table, 9 in the dead-letter table.
    assert_eq!(table_contents(catalog, "kafscale.orders").await.0, 18);
    assert_eq!(table_contents(catalog, "kafscale.orders__dlq").await.0, 9);
    let name = TableNaming::default().table_for("orders");
    for table in [name.clone(), name.dead_letters()] {
        let loaded = catalog
            .load_table(&table_ident(&table))
            .await
            .unwrap_or_else(|e| panic!("load {table}: {e}"));
        assert_eq!(
            table_watermarks(&loaded)
                .ok()
                .and_then(|w| w.get(&0).copied()),
            Some(27),
            "{table}"
        );
        assert!(
            loaded.metadata().location().ends_with("--table-s3"),
            "{table}: {}",
            loaded.metadata().location()
        );
    }
    let table = catalog
        .load_table(&table_ident(&name))
        .await
        .unwrap_or_else(|e| panic!("load: {e}"));
    assert!(
        table
            .metadata()
            .current_schema()
            .field_by_name("region")
            .is_some(),
        "the later field is a column"
    );

    // Compaction through the table bucket's swap.
    let (_, files_before) = table_contents(catalog, "kafscale.orders").await;
    let report = compact_table(
        catalog,
        handle.swap.as_ref(),
        &table_ident(&name),
        None,
        None,
        now_ms(),
    )
    .await
    .unwrap_or_else(|e| panic!("compact: {e}"));
    assert!(report.files_removed >= 2, "{report:?}");
    let (records, files_after) = table_contents(catalog, "kafscale.orders").await;
    assert_eq!(records, 18);
    assert!(files_after < files_before, "{files_before} → {files_after}");
}
