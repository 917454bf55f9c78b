//! Records a Kafka broker accepts and a careless or hostile producer sends: header
//! keys that are not UTF-8, CreateTimes at both ends of i64, huge and empty keys,
//! tombstones, JSON field names that collide after mapping or that catalogs refuse
//! (empty, over 255 bytes, control characters, dots, case), values that are not JSON.
//! Every segment converts; every record is in the table or its dead-letter table
//! exactly once, with its reason; no partition is held. On the real SQL catalog
//! (SQLite) and ledger.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::table_ident;
use kfs_plan::layout::parse_partition_spec;
use kfs_plan::naming::{TableName, TableNaming, ValueFormat};
use kfs_segment::OwnedRecord;

use crate::local::{BoxError, Local, offsets};

type TestResult = Result<(), BoxError>;

/// A record at `offset` with an ordinary timestamp, key `k`, value `value`.
fn record(offset: i64, value: Option<&[u8]>) -> OwnedRecord {
    OwnedRecord {
        offset,
        timestamp_ms: 1_700_000_000_000 + offset,
        key: Some(b"k".to_vec()),
        value: value.map(<[u8]>::to_vec),
        headers: Vec::new(),
    }
}

/// Makes a record at an offset.
type MakeRecord = Box<dyn Fn(i64) -> OwnedRecord>;

/// The poison corpus: each record with the reason it is there, and whether a JSON
/// table sends it to the dead-letter table.
fn corpus() -> Vec<(OwnedRecord, &'static str, bool)> {
    let long_name = format!(r#"{{"{}": 1}}"#, "n".repeat(300));
    let cases: Vec<(MakeRecord, &'static str, bool)> = vec![
        (
            Box::new(|o| record(o, Some(br#"{"a": 1}"#))),
            "ordinary",
            false,
        ),
        (
            Box::new(|o| {
                let mut r = record(o, Some(br#"{"a": 2}"#));
                r.headers = vec![
                    (b"\xff\xfe-bin".to_vec(), Some(b"v".to_vec())),
                    (b"ok".to_vec(), None),
                ];
                r
            }),
            "header key not UTF-8",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                timestamp_ms: 9_300_000_000_000_000,
                ..record(o, Some(br#"{"a": 3}"#))
            }),
            "CreateTime beyond microseconds",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                timestamp_ms: i64::MAX,
                ..record(o, Some(br#"{"a": 4}"#))
            }),
            "CreateTime i64::MAX",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                timestamp_ms: i64::MIN,
                ..record(o, Some(br#"{"a": 5}"#))
            }),
            "CreateTime i64::MIN",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                timestamp_ms: -1,
                ..record(o, Some(br#"{"a": 6}"#))
            }),
            "no timestamp (-1)",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                key: Some(vec![b'K'; 1 << 20]),
                ..record(o, Some(br#"{"a": 7}"#))
            }),
            "1 MiB key",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                key: Some(Vec::new()),
                ..record(o, Some(br#"{"a": 8}"#))
            }),
            "empty key",
            false,
        ),
        (
            Box::new(|o| OwnedRecord {
                key: None,
                ..record(o, None)
            }),
            "tombstone with a null key",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"n": {"b": 1}}"#))),
            "nested n.b",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"n.b": 2}"#))),
            "dotted n.b",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"n_b": 3}"#))),
            "n_b after n.b took it",
            true,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"": 1}"#))),
            "empty field name",
            false,
        ),
        (
            Box::new(move |o| record(o, Some(long_name.as_bytes()))),
            "300-byte field name",
            false,
        ),
        (
            Box::new(|o| record(o, Some(b"{\"ctl\\u0001x\": 1}"))),
            "control character in a name",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"Case": 1}"#))),
            "Case",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"case": 2}"#))),
            "case after Case",
            true,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"Offset": 2}"#))),
            "metadata name in another case",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"x.y": 1, "x_y": 2}"#))),
            "two fields, one column",
            true,
        ),
        (
            Box::new(|o| record(o, Some("{\"名前\": \"x\"}".as_bytes()))),
            "non-ASCII name",
            false,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"a": "text"}"#))),
            "type mismatch",
            true,
        ),
        (
            Box::new(|o| record(o, Some(b"\xff not json"))),
            "not JSON",
            true,
        ),
        (
            Box::new(|o| record(o, Some(b"[1, 2]"))),
            "not an object",
            true,
        ),
        (
            Box::new(|o| record(o, Some(br#"{"a": 99999999999999999999}"#))),
            "integer beyond long",
            true,
        ),
    ];
    cases
        .into_iter()
        .zip(0..)
        .map(|((make, why, dead), offset)| (make(offset), why, dead))
        .collect()
}

fn table(text: &str) -> TableName {
    TableName::parse(text).unwrap_or_else(|| panic!("{text}"))
}

/// Rows of `name`: offset → (timestamp_ms, timestamp is null, header keys, their bytes).
type HeaderRow = (i64, bool, Vec<String>, Vec<Option<Vec<u8>>>);

/// Rows of `name` from offset `from` on (files wholly below it are not read:
/// iceberg-rust 0.10 cannot read a struct that gained a field since its file was
/// written, apache/iceberg-rust#2617; Java, pyiceberg and DuckDB can).
async fn header_rows(
    catalog: &dyn Catalog,
    name: &TableName,
    from: i64,
) -> Result<BTreeMap<i64, HeaderRow>, BoxError> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMicrosecondType};
    let table = catalog.load_table(&table_ident(name)).await?;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "timestamp_ms", "timestamp", "headers"])
        .with_filter(
            iceberg::expr::Reference::new("offset")
                .greater_than_or_equal_to(iceberg::spec::Datum::long(from)),
        )
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut rows = BTreeMap::new();
    for batch in batches {
        let offsets = batch.column(0).as_primitive::<Int64Type>();
        let millis = batch.column(1).as_primitive::<Int64Type>();
        let micros = batch.column(2).as_primitive::<TimestampMicrosecondType>();
        let headers = batch.column(3).as_list::<i32>();
        for row in 0..batch.num_rows() {
            let entries = headers.value(row);
            let entries = entries.as_struct();
            let keys = entries
                .column_by_name("key")
                .ok_or("no header key column")?
                .as_string::<i32>();
            let bytes = entries
                .column_by_name("key_bytes")
                .ok_or("no header key_bytes column")?
                .as_binary::<i64>();
            rows.insert(
                offsets.value(row),
                (
                    millis.value(row),
                    micros.is_null(row),
                    (0..keys.len()).map(|i| keys.value(i).to_owned()).collect(),
                    (0..bytes.len())
                        .map(|i| (!bytes.is_null(i)).then(|| bytes.value(i).to_vec()))
                        .collect(),
                ),
            );
        }
    }
    Ok(rows)
}

#[tokio::test]
async fn raw_table_stores_every_poison_record_losslessly() -> TestResult {
    let local = Local::open().await?;
    let corpus = corpus();
    let count = corpus.len() as i64;
    local.put_records("poison", corpus.iter().map(|(r, _, _)| r.clone()).collect())?;
    // Partitioned by the key, so the 1 MiB key is also a partition value.
    let naming = TableNaming {
        partition_by: parse_partition_spec("identity(key)")?,
        partition_by_given: true,
        ..TableNaming::default()
    };
    let report = local.run(&naming).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    assert!(
        report.failed_tables.is_empty(),
        "{:?}",
        report.failed_tables
    );
    let name = naming.table_for("poison");
    let found = offsets(&local.catalog, &name).await?;
    let expected: BTreeMap<(i32, i64), usize> = (0..count).map(|o| ((0, o), 1)).collect();
    assert_eq!(found, expected);
    let rows = header_rows(&local.catalog, &name, 0).await?;
    // The header key as Kafka's Java consumer reads it, its bytes kept.
    let (_, _, keys, bytes) = &rows[&1];
    assert_eq!(
        keys,
        &vec!["\u{fffd}\u{fffd}-bin".to_owned(), "ok".to_owned()]
    );
    assert_eq!(bytes, &vec![Some(b"\xff\xfe-bin".to_vec()), None]);
    // Timestamps beyond microseconds: exact in timestamp_ms, null in timestamp.
    for (offset, millis) in [(2, 9_300_000_000_000_000), (3, i64::MAX), (4, i64::MIN)] {
        assert_eq!(rows[&offset].0, millis);
        assert!(rows[&offset].1, "timestamp of offset {offset} is not null");
    }
    assert_eq!(rows[&5], (-1, false, Vec::new(), Vec::new()));
    // Every object key stays within what S3 accepts.
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    for entry in kfs_core::live_entries(&table).await? {
        let path = entry.data_file().file_path();
        assert!(path.len() < 1024, "{} bytes: {}", path.len(), &path[..200]);
    }
    Ok(())
}

#[tokio::test]
async fn json_table_sends_what_it_cannot_hold_to_dead_letters_once() -> TestResult {
    let local = Local::open().await?;
    let corpus = corpus();
    local.put_records("poison", corpus.iter().map(|(r, _, _)| r.clone()).collect())?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        ..TableNaming::default()
    };
    let report = local.run(&naming).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    assert!(
        report.failed_tables.is_empty(),
        "{:?}",
        report.failed_tables
    );
    // A second pass finds nothing new and changes nothing.
    let again = local.run(&naming).await?;
    assert_eq!(again.converted, 0);
    let name = naming.table_for("poison");
    let in_table = offsets(&local.catalog, &name).await?;
    let in_dead = offsets(&local.catalog, &name.dead_letters()).await?;
    for (offset, (_, why, dead)) in (0..).zip(&corpus) {
        let (here, there) = (
            in_table.get(&(0, offset)).copied().unwrap_or(0),
            in_dead.get(&(0, offset)).copied().unwrap_or(0),
        );
        let expected = if *dead { (0, 1) } else { (1, 0) };
        assert_eq!((here, there), expected, "offset {offset} ({why})");
    }
    assert_eq!(in_table.len() + in_dead.len(), corpus.len());
    // The table's columns are names every catalog accepts, the originals in docs.
    let table = local.catalog.load_table(&table_ident(&name)).await?;
    let schema = table.metadata().current_schema();
    for field in schema.as_struct().fields() {
        assert!(
            !field.name.is_empty()
                && field.name.len() <= 255
                && field
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "column {:?}",
            field.name
        );
    }
    for column in [
        "n",
        "n_b",
        "_",
        "ctl_x",
        "Case",
        "value_Offset",
        "_u540d_u524d",
    ] {
        assert!(schema.field_by_name(column).is_some(), "no column {column}");
    }
    let doc = schema
        .field_by_name("n_b")
        .and_then(|f| f.doc.clone())
        .unwrap_or_default();
    assert!(doc.contains(r#""n.b""#), "{doc}");
    // Each dead letter says why.
    let reasons = crate::local::dead_letter_reasons(&local.catalog, &name).await?;
    assert!(
        reasons[&11].contains("holds another field"),
        "{}",
        reasons[&11]
    );
    assert!(reasons[&16].contains("only in case"), "{}", reasons[&16]);
    assert!(reasons[&21].contains("not JSON"), "{}", reasons[&21]);
    Ok(())
}

#[tokio::test]
async fn tables_of_an_older_layout_are_upgraded_and_take_every_record() -> TestResult {
    // A table created with a required timestamp and no header key bytes, as before.
    let local = Local::open().await?;
    let name = table("ns.legacy_poison");
    let naming = TableNaming {
        overrides: BTreeMap::from([("legacy".to_owned(), name.clone())]),
        ..TableNaming::default()
    };
    local.put_records("legacy", vec![record(0, Some(b"first"))])?;
    local.run(&naming).await?;
    let created = local.catalog.load_table(&table_ident(&name)).await?;
    let old = kfs_core::testing::legacy_record_schema(created.metadata().current_schema())?;
    let downgraded = kfs_core::testing::evolve_schema(&local.swap, &created, old).await?;
    assert!(
        downgraded
            .metadata()
            .current_schema()
            .field_by_name("timestamp")
            .is_some_and(|f| f.required)
    );
    let corpus = corpus();
    let records: Vec<OwnedRecord> = corpus
        .iter()
        .map(|(r, _, _)| OwnedRecord {
            offset: r.offset + 1,
            ..r.clone()
        })
        .collect();
    local.put_records("legacy", records)?;
    let report = local.run(&naming).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    let found = offsets(&local.catalog, &name).await?;
    let expected: BTreeMap<(i32, i64), usize> =
        (0..=corpus.len() as i64).map(|o| ((0, o), 1)).collect();
    assert_eq!(found, expected);
    let rows = header_rows(&local.catalog, &name, 1).await?;
    assert_eq!(rows[&2].3, vec![Some(b"\xff\xfe-bin".to_vec()), None]);
    assert!(rows[&3].1);
    Ok(())
}

#[tokio::test]
async fn a_segment_in_many_partition_values_keeps_its_ledger_item_small() -> TestResult {
    use kfs_core::{OrphanRule, S3Settings, remove_orphans};
    let local = Local::open().await?;
    // One record per key, partitioned by the key: one data file (and one description
    // of a kilobyte or more) per record.
    let count = 400;
    let records: Vec<OwnedRecord> = (0..count)
        .map(|offset| OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000,
            key: Some(format!("customer-{offset:05}").into_bytes()),
            value: Some(b"v".to_vec()),
            headers: vec![],
        })
        .collect();
    let key = local.put_records("wide", records)?;
    let naming = TableNaming {
        partition_by: parse_partition_spec("identity(key)")?,
        partition_by_given: true,
        ..TableNaming::default()
    };
    let entry = local.convert(&naming, &key).await?;
    // The item holds one pointer, far below DynamoDB's 400 KB.
    let stored = serde_json::to_string(&entry)?;
    assert!(stored.len() < 4_096, "{} bytes", stored.len());
    let pointer = kfs_core::testing::spilled_to(&entry.data_files).ok_or("not spilled")?;
    assert!(pointer.contains("/data/kfs-descriptions/"), "{pointer}");
    // Orphan cleanup reads the pointer: no pending file is an orphan.
    let name = naming.table_for("wide");
    let rule = OrphanRule {
        older_than: std::time::Duration::ZERO,
        now_ms: kfs_core::now_ms() + 60_000,
        force: true,
        dry_run: true,
    };
    let ident = table_ident(&name);
    let s3 = kfs_core::MaintenanceStorage {
        s3: S3Settings::default(),
        warehouse: kfs_core::Warehouse::Local(local.dir.path().join("wh")),
    };
    let report = remove_orphans(&local.catalog, &local.ledger, &ident, &s3, &rule).await?;
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
    // The commit reads the descriptions back: every record lands once.
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    let expected: BTreeMap<(i32, i64), usize> = (0..count).map(|o| ((0, o), 1)).collect();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    // Committed, the spilled descriptions are an orphan like any unreferenced file.
    let report = remove_orphans(&local.catalog, &local.ledger, &ident, &s3, &rule).await?;
    assert!(
        report.orphans.iter().any(|o| o == pointer),
        "{:?}",
        report.orphans
    );
    Ok(())
}

/// A table's first dead letter can come long after its first commit: its dead-letter
/// table, created then, starts with no progress of its own (not the table's stored
/// progress, which would make it look rolled back past commits it never had).
#[tokio::test]
async fn a_dead_letter_table_created_after_the_tables_commits_starts_its_own_progress() -> TestResult
{
    let local = Local::open().await?;
    let naming = TableNaming {
        value_format: ValueFormat::Json,
        ..TableNaming::default()
    };
    local.put_records("orders", vec![record(0, Some(br#"{"n": 0}"#))])?;
    local.run(&naming).await?;
    local.put_records(
        "orders",
        vec![
            record(1, Some(b"not json")),
            record(2, Some(br#"{"n": 2}"#)),
        ],
    )?;
    let report = local.run(&naming).await?;
    assert!(!report.left_work(), "{report:?}");
    let name = table("kafscale.orders");
    let expected: BTreeMap<(i32, i64), usize> = [((0, 0), 1), ((0, 2), 1)].into();
    assert_eq!(offsets(&local.catalog, &name).await?, expected);
    let letters = crate::local::dead_letter_reasons(&local.catalog, &name).await?;
    assert_eq!(letters.keys().copied().collect::<Vec<_>>(), [1]);
    Ok(())
}
