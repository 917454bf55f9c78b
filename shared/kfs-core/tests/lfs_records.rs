//! Large-file (LFS) claim-check records in every mode: each record lands in the table
//! or the dead-letter table exactly once (a skipped claim check in neither, by
//! configuration), resolved values are the blobs' bytes, and a blob that is missing,
//! too large, corrupt, in another bucket or under another topic is a dead letter
//! with the reason. A store that fails for a while is retried: nothing is quarantined
//! for it.

use crate::local;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::TryStreamExt;
use iceberg::Catalog;
use kfs_core::{ErrorKind, MemorySource, SegmentSource, SegmentStream, SourceError, SourceObject};
use kfs_core::{PipelineConfig, run_pass, table_ident};
use kfs_plan::lfs::{BlobOrigin, LfsMode};
use kfs_plan::naming::{TableName, TableNaming};
use local::{BoxError, Local, offsets};

/// A claim check's envelope for `body` stored at `key`, its checksum by `alg`.
fn envelope(bucket: &str, key: &str, body: &[u8], alg: &str) -> String {
    use sha2::Digest;
    let sha256: String = sha2::Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let checksum = match alg {
        "md5" => {
            use md5::Digest;
            md5::Md5::digest(body)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }
        "crc32" => format!("{:08x}", crc32fast::hash(body)),
        _ => sha256.clone(),
    };
    format!(
        r#"{{"kfs_lfs":1,"bucket":"{bucket}","key":"{key}","size":{},"sha256":"{sha256}","checksum":"{checksum}","checksum_alg":"{alg}","content_type":"application/octet-stream","proxy_id":"p1"}}"#,
        body.len()
    )
}

/// The blobs, and one segment of topic `docs` whose values are claim checks of every
/// kind. Returns the values by offset.
fn corpus(local: &Local) -> Result<Vec<Option<String>>, BoxError> {
    let blob = |n: usize, len: usize| -> Vec<u8> { (0..len).map(|i| (i * 7 + n) as u8).collect() };
    let key = |n: usize| format!("ns/docs/lfs/2026/12/02/obj-{n}");
    for (n, len) in [(1, 10), (2, 20), (3, 30), (5, 12), (7, 9), (8, 100)] {
        local.source.put(&key(n), blob(n, len));
    }
    local
        .source
        .put("ns/other/lfs/2026/12/02/obj-7", blob(7, 9));
    let values = vec![
        Some("plain value".to_owned()),
        Some(envelope("seg", &key(1), &blob(1, 10), "sha256")),
        Some(envelope("seg", &key(2), &blob(2, 20), "md5")),
        Some(envelope("seg", &key(3), &blob(3, 30), "crc32")),
        // Missing blob.
        Some(envelope("seg", &key(4), &blob(4, 11), "sha256")),
        // Wrong checksum: the envelope describes other bytes of the same size.
        Some(envelope("seg", &key(5), &blob(50, 12), "sha256")),
        // Another bucket.
        Some(envelope("elsewhere", &key(1), &blob(1, 10), "sha256")),
        // Another topic's blob.
        Some(envelope(
            "seg",
            "ns/other/lfs/2026/12/02/obj-7",
            &blob(7, 9),
            "sha256",
        )),
        // Above the inline limit (64 bytes in these tests).
        Some(envelope("seg", &key(8), &blob(8, 100), "sha256")),
        // Claims to be an envelope, does not decode.
        Some(r#"{"kfs_lfs":1,"bucket":"seg","key":"#.to_owned()),
        // A tombstone.
        None,
    ];
    let records = kfs_workload::simple_records(0, values.len() as i64, |offset| {
        values[usize::try_from(offset).ok()?]
            .as_ref()
            .map(|v| v.as_bytes().to_vec())
    });
    local.put_records("docs", records)?;
    Ok(values)
}

/// The naming of these tests: `mode` for every topic, blobs of bucket `seg` only, 64
/// bytes inline at most.
fn naming(mode: LfsMode) -> TableNaming {
    let mut naming = TableNaming::default();
    naming.lfs.policy.mode = mode;
    naming.lfs.policy.max_inline_size = 64;
    naming.lfs.policy.origin = BlobOrigin {
        bucket: Some("seg".into()),
        prefix: String::new(),
    };
    naming
}

/// One row of the table: value, `lfs_resolved`, `lfs_key` (the last two `None` where
/// the table has no such column).
type Row = (Option<Vec<u8>>, Option<bool>, Option<String>);

/// The rows of table `name` by offset.
async fn rows(local: &Local, name: &TableName) -> Result<BTreeMap<i64, Row>, BoxError> {
    use arrow_array::cast::AsArray;
    let table = local.catalog.load_table(&table_ident(name)).await?;
    let described = table
        .metadata()
        .current_schema()
        .field_by_name("lfs_key")
        .is_some();
    let mut columns = vec!["offset", "value"];
    if described {
        columns.extend(["lfs_resolved", "lfs_key"]);
    }
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(columns)
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = BTreeMap::new();
    for batch in batches {
        let offsets = batch
            .column(0)
            .as_primitive::<arrow_array::types::Int64Type>();
        let values = arrow_cast::cast(batch.column(1), &arrow_schema::DataType::LargeBinary)?;
        let values = values.as_binary::<i64>();
        for row in 0..batch.num_rows() {
            let value =
                (!arrow_array::Array::is_null(values, row)).then(|| values.value(row).to_vec());
            let (resolved, key) = if described {
                let resolved = batch.column(2).as_boolean();
                let keys = batch.column(3).as_string::<i32>();
                (
                    (!arrow_array::Array::is_null(resolved, row)).then(|| resolved.value(row)),
                    (!arrow_array::Array::is_null(keys, row)).then(|| keys.value(row).to_owned()),
                )
            } else {
                (None, None)
            };
            found.insert(offsets.value(row), (value, resolved, key));
        }
    }
    Ok(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_accounts_for_every_claim_check_once() -> Result<(), BoxError> {
    // (mode, offsets in the table, offsets in the dead-letter table); the others are
    // skipped claim checks.
    let expected: [(LfsMode, &[i64], &[i64]); 5] = [
        (LfsMode::Off, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], &[]),
        (LfsMode::Reference, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], &[]),
        (LfsMode::Skip, &[0, 9, 10], &[]),
        (LfsMode::Resolve, &[0, 1, 2, 3, 10], &[4, 5, 6, 7, 8, 9]),
        (LfsMode::Hybrid, &[0, 1, 2, 3, 8, 10], &[4, 5, 6, 7, 9]),
    ];
    for (mode, in_table, in_dead) in expected {
        let local = Local::open().await?;
        let values = corpus(&local)?;
        let naming = naming(mode);
        let report = local.run(&naming).await?;
        assert!(
            report.quarantined.is_empty(),
            "{mode:?}: {:?}",
            report.quarantined
        );
        assert!(
            report.failed_tables.is_empty(),
            "{mode:?}: {:?}",
            report.failed_tables
        );
        let name = naming.table_for("docs");
        let table = offsets(&local.catalog, &name).await?;
        let dead = offsets(&local.catalog, &name.dead_letters()).await?;
        let once = |list: &[i64]| -> BTreeMap<(i32, i64), usize> {
            list.iter().map(|o| ((0, *o), 1)).collect()
        };
        assert_eq!(table, once(in_table), "{mode:?}: table");
        assert_eq!(dead, once(in_dead), "{mode:?}: dead letters");

        let found = rows(&local, &name).await?;
        for (offset, (value, resolved, key)) in &found {
            let sent = values[usize::try_from(*offset)?]
                .as_ref()
                .map(|v| v.as_bytes().to_vec());
            match (mode, *offset) {
                (LfsMode::Resolve | LfsMode::Hybrid, o @ 1..=3) => {
                    let blob = local
                        .source
                        .read(&format!("ns/docs/lfs/2026/12/02/obj-{o}"))
                        .await?;
                    assert_eq!(value.as_deref(), Some(blob.as_slice()));
                    assert_eq!(*resolved, Some(true), "offset {o}");
                    assert_eq!(
                        key.as_deref(),
                        Some(format!("ns/docs/lfs/2026/12/02/obj-{o}").as_str())
                    );
                }
                (LfsMode::Reference | LfsMode::Hybrid, 1..=8) => {
                    assert_eq!(value, &sent, "{mode:?} offset {offset}");
                    assert_eq!(*resolved, Some(false), "{mode:?} offset {offset}");
                    assert!(key.is_some(), "{mode:?} offset {offset}");
                }
                _ => {
                    assert_eq!(value, &sent, "{mode:?} offset {offset}");
                    assert_eq!((resolved, key), (&None, &None), "{mode:?} offset {offset}");
                }
            }
        }
        if mode.fetches() {
            let why = crate::local::dead_letter_reasons(&local.catalog, &name).await?;
            for (offset, needle) in [
                (4, "does not exist"),
                (5, "fails its sha256 checksum"),
                (6, "not in the segment bucket seg"),
                (7, "read only its own blobs"),
                (9, "does not decode"),
            ] {
                assert!(
                    why[&offset].contains(needle),
                    "{mode:?} {offset}: {}",
                    why[&offset]
                );
            }
            if mode == LfsMode::Resolve {
                assert!(why[&8].contains("above the inline limit"), "{}", why[&8]);
            }
        }
        let described = local
            .catalog
            .load_table(&table_ident(&name))
            .await?
            .metadata()
            .current_schema()
            .field_by_name("lfs_resolved")
            .is_some();
        assert_eq!(described, mode.has_columns(), "{mode:?}: lfs columns");
    }
    Ok(())
}

/// The memory source, its blob reads failing (throttled) `failures` times.
struct FlakyBlobs<'a> {
    inner: &'a MemorySource,
    failures: AtomicUsize,
}

impl FlakyBlobs<'_> {
    fn fail(&self, key: &str) -> Result<(), SourceError> {
        let failing = key.contains("/lfs/")
            && self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if failing {
            return Err(SourceError {
                location: key.to_owned(),
                message: "SlowDown".into(),
                kind: ErrorKind::Transient,
            });
        }
        Ok(())
    }
}

impl SegmentSource for FlakyBlobs<'_> {
    async fn list(&self) -> Result<Vec<SourceObject>, SourceError> {
        self.inner.list().await
    }
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        self.inner.list_dirs(dir).await
    }
    async fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> Result<kfs_core::ObjectStream, SourceError> {
        self.inner.list_files(dir, start_after).await
    }
    async fn read(&self, key: &str) -> Result<Vec<u8>, SourceError> {
        self.inner.read(key).await
    }
    async fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, SourceError> {
        self.inner.read_range(key, range).await
    }
    async fn open(&self, key: &str, etag: Option<&str>) -> Result<SegmentStream, SourceError> {
        self.fail(key)?;
        self.inner.open(key, etag).await
    }
    async fn stat(&self, key: &str) -> Result<Option<SourceObject>, SourceError> {
        self.fail(key)?;
        self.inner.stat(key).await
    }
    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_blob_store_is_retried_never_quarantined() -> Result<(), BoxError> {
    let local = Local::open().await?;
    corpus(&local)?;
    let source = FlakyBlobs {
        inner: &local.source,
        failures: AtomicUsize::new(3),
    };
    let config = PipelineConfig {
        naming: naming(LfsMode::Hybrid),
        ..PipelineConfig::default()
    };
    let name = config.naming.table_for("docs");
    let mut passes = 0;
    loop {
        passes += 1;
        let report = run_pass(
            &source,
            &local.catalog,
            &local.swap,
            &local.ledger,
            &config,
            &|_| {},
        )
        .await?;
        assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
        if !offsets(&local.catalog, &name).await?.is_empty() {
            break;
        }
        assert!(passes < 10, "the segment was never converted");
    }
    // Retried within the pass (a transient failure) or by the next one.
    assert_eq!(
        source.failures.load(Ordering::SeqCst),
        0,
        "the store never failed"
    );
    let table = offsets(&local.catalog, &name).await?;
    let dead = offsets(&local.catalog, &name.dead_letters()).await?;
    assert_eq!(table.len() + dead.len(), 11, "{table:?} {dead:?}");
    assert_eq!(dead.len(), 5, "{dead:?}");
    Ok(())
}

/// `lfs_checksum_alg` and `lfs_checksum` of table `name`'s rows by offset.
async fn checksums(
    local: &Local,
    name: &TableName,
) -> Result<BTreeMap<i64, (Option<String>, Option<String>)>, BoxError> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let table = local.catalog.load_table(&table_ident(name)).await?;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["offset", "lfs_checksum", "lfs_checksum_alg"])
        .build()?
        .to_arrow()
        .await?
        .try_collect()
        .await?;
    let mut found = BTreeMap::new();
    for batch in batches {
        let offsets = batch
            .column(0)
            .as_primitive::<arrow_array::types::Int64Type>();
        let text = |column: &str, row: usize| {
            let strings = batch.column_by_name(column)?.as_string::<i32>();
            (!strings.is_null(row)).then(|| strings.value(row).to_owned())
        };
        for row in 0..batch.num_rows() {
            found.insert(
                offsets.value(row),
                (text("lfs_checksum_alg", row), text("lfs_checksum", row)),
            );
        }
    }
    Ok(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_cannot_lower_the_verification_the_operator_asked_for() -> Result<(), BoxError>
{
    use sha2::Digest;
    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
    let body = b"the blob's bytes".to_vec();
    let key = |n: usize| format!("ns/docs/lfs/2026/12/03/obj-{n}");
    let sha256 = hex(&sha2::Sha256::digest(&body));
    let wrong = hex(&sha2::Sha256::digest(b"other bytes"));
    let crc = format!("{:08x}", crc32fast::hash(&body));
    let md5 = {
        use md5::Digest;
        hex(&md5::Md5::digest(&body))
    };
    let envelope = |n: usize, fields: &str| {
        format!(
            r#"{{"kfs_lfs":1,"bucket":"seg","key":"{}","size":{}{fields}}}"#,
            key(n),
            body.len()
        )
    };
    let values = [
        // 0: "none", and a sha256 that does not match: still checked.
        envelope(0, &format!(r#","sha256":"{wrong}","checksum_alg":"none""#)),
        // 1: "none" and nothing else: below the minimum.
        envelope(1, r#","checksum_alg":"none""#),
        // 2: crc32 only: below the minimum (sha256 by default).
        envelope(2, &format!(r#","checksum":"{crc}","checksum_alg":"crc32""#)),
        // 3: md5 and sha256: both checked, sha256 recorded.
        envelope(
            3,
            &format!(r#","sha256":"{sha256}","checksum":"{md5}","checksum_alg":"md5""#),
        ),
        // 4: sha256 right, the md5 beside it wrong: the envelope does not hold.
        envelope(
            4,
            &format!(
                r#","sha256":"{sha256}","checksum":"{crc}00000000000000000000000","checksum_alg":"md5""#
            ),
        ),
    ];
    let run = |naming: TableNaming| {
        let values = values.clone();
        let body = body.clone();
        async move {
            let local = Local::open().await?;
            for n in 0..values.len() {
                local.source.put(&key(n), body.clone());
            }
            let records = kfs_workload::simple_records(0, values.len() as i64, |offset| {
                Some(values[usize::try_from(offset).ok()?].as_bytes().to_vec())
            });
            local.put_records("docs", records)?;
            let report = local.run(&naming).await?;
            assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
            let name = naming.table_for("docs");
            let rows = checksums(&local, &name).await?;
            let why = crate::local::dead_letter_reasons(&local.catalog, &name).await?;
            Ok::<_, BoxError>((rows, why))
        }
    };

    let (rows, why) = run(naming(LfsMode::Resolve)).await?;
    assert_eq!(
        rows.keys().copied().collect::<Vec<_>>(),
        vec![3],
        "{rows:?} {why:?}"
    );
    assert_eq!(rows[&3], (Some("sha256".into()), Some(sha256.clone())));
    assert!(why[&0].contains("fails its sha256 checksum"), "{}", why[&0]);
    for offset in [1, 2] {
        assert!(
            why[&offset].contains("minimum") && why[&offset].contains("sha256"),
            "{offset}: {}",
            why[&offset]
        );
    }
    assert!(why[&4].contains("fails its md5 checksum"), "{}", why[&4]);

    // The operator accepts crc32: the crc32-only envelope is verified so, and says so.
    let mut lower = naming(LfsMode::Resolve);
    lower.lfs.policy.min_checksum = kfs_plan::lfs::ChecksumAlg::Crc32;
    let (rows, why) = run(lower).await?;
    assert_eq!(
        rows.keys().copied().collect::<Vec<_>>(),
        vec![2, 3],
        "{why:?}"
    );
    assert_eq!(rows[&2], (Some("crc32".into()), Some(crc.clone())));
    assert!(why[&1].contains("minimum crc32"), "{}", why[&1]);
    // Verification off: the size only, and the rows say nothing was verified.
    let mut off = naming(LfsMode::Resolve);
    off.lfs.policy.min_checksum = kfs_plan::lfs::ChecksumAlg::None;
    let (rows, why) = run(off).await?;
    assert_eq!(rows.len(), 5, "{why:?}");
    assert!(
        rows.values().all(|r| *r == (Some("none".into()), None)),
        "{rows:?}"
    );
    Ok(())
}
