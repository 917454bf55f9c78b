//! The workload (segments, registry values, the topics) and the invariant check.

use super::*;

/// The bucket of the simulated S3 events.
pub const BUCKET: &str = "segments";

/// What the brokers have written to etcd once every segment is uploaded.
pub fn etcd_caught_up() -> EtcdState {
    EtcdState::Read {
        topics: TOPICS.iter().map(|t| (*t).to_owned()).collect(),
        next_offsets: TOPICS
            .iter()
            .flat_map(|topic| {
                (0..PARTITIONS).map(move |p| (((*topic).to_owned(), p), SEGMENTS * RECORDS))
            })
            .collect(),
    }
}

/// The topics of the workload: `orders`, and the ones the simulation makes collide
/// with its table (sanitizing alike, or mapped to it by a rule).
pub const TOPICS: [&str; 3] = ["orders", "Orders", "orders-eu"];

/// Plain ticks until two in a row succeed (a retryable failure, such as a busy
/// database, is followed by the next tick, as the schedule would), then a maintenance
/// tick that also removes orphans; etcd has caught up.
pub async fn quiesce(
    dir: &Path,
    source: &MemorySource,
    ledger: &SqliteLedger,
    naming: &TableNaming,
) -> Result<(), String> {
    let mut process = Process::open(dir, source, ledger, Faults::none()).await?;
    process.naming = naming.clone();
    let (mut clean, mut attempts) = (0, 0);
    let mut policy = Some(MaintenancePolicy {
        orphan_age: Some(std::time::Duration::ZERO),
        force_orphan_age: true,
        orphan_interval: std::time::Duration::ZERO,
        ..MaintenancePolicy::default()
    });
    while clean < 2 {
        attempts += 1;
        let maintenance = if clean == 1 { policy.take() } else { None };
        match process
            .tick(
                &etcd_caught_up(),
                CrossCheckPolicy::default(),
                maintenance.as_ref(),
            )
            .await
        {
            Ok(()) => clean += 1,
            Err(e) if e.retryable && attempts < 8 => {
                clean = 0;
                policy = policy.or(maintenance);
            }
            Err(e) => return Err(format!("quiescence tick {attempts}: {}", e.message)),
        }
    }
    Ok(())
}

pub fn segment(base: i64) -> Result<Vec<u8>, kfs_segment::EncodeError> {
    segment_of(0, base, Records::Plain)
}

/// Which records the workload's segments hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    /// A key of its own per record ([`value`]s).
    Plain,
    /// Four keys per partition ([`mirror_key`]) with [`mirror_value`]s: updates within
    /// a segment and across segments, tombstones, keys inserted again.
    Keyed,
    /// [`Records::Keyed`]'s changes in JSON, for a mirror keyed by the value field
    /// `id` ([`field_key_naming`]): each value `{"id": key, "v": offset}`, its record
    /// key `{"id": key}` as Debezium keys its events (a tombstone's key from it).
    FieldKeyed,
}

/// `count` records from `base` of `partition`, of `kind`.
pub fn records_of(
    partition: i32,
    base: i64,
    count: i64,
    kind: Records,
) -> Vec<kfs_segment::OwnedRecord> {
    match kind {
        Records::Plain => simple_records(base, count, |offset| Some(value(offset).into_bytes())),
        Records::Keyed => {
            let mut records = simple_records(base, count, mirror_value);
            for record in &mut records {
                record.key = Some(mirror_key(partition, record.offset).into_bytes());
            }
            records
        }
        Records::FieldKeyed => {
            let key = |offset| serde_json::json!({"id": mirror_key(partition, offset)});
            let mut records = simple_records(base, count, |offset| {
                let mut value = key(offset);
                value["v"] = serde_json::json!(offset);
                mirror_value(offset).map(|_| value.to_string().into_bytes())
            });
            for record in &mut records {
                record.key = Some(key(record.offset).to_string().into_bytes());
            }
            records
        }
    }
}

/// The `.kfs` of the segment of `partition` at `base`, of `kind`.
pub fn segment_of(
    partition: i32,
    base: i64,
    kind: Records,
) -> Result<Vec<u8>, kfs_segment::EncodeError> {
    let records = records_of(partition, base, RECORDS, kind);
    Ok(encode_records(records, Compression::Snappy)?.kfs)
}

/// The value of the record at `offset`: a JSON object, except at every third offset
/// (which a JSON table sends to its dead-letter table).
pub fn value(offset: i64) -> String {
    if offset % 3 == 0 {
        format!("v{offset}")
    } else {
        format!("{{\"n\":{offset},\"even\":{}}}", offset % 2 == 0)
    }
}

/// Uploads segment `index` of `partition` (its `.kfs` and `.index`), as the broker does.
pub fn put_segment(
    source: &MemorySource,
    partition: i32,
    index: i64,
) -> Result<(), kfs_segment::EncodeError> {
    put_feed_segment(source, "ns", "orders", partition, index, Records::Plain)
}

/// [`put_segment`] for the topic `topic` of the KafScale namespace `namespace`, its
/// records of `kind`.
pub fn put_feed_segment(
    source: &MemorySource,
    namespace: &str,
    topic: &str,
    partition: i32,
    index: i64,
    kind: Records,
) -> Result<(), kfs_segment::EncodeError> {
    let key = SegmentKey {
        namespace: namespace.into(),
        topic: topic.into(),
        partition,
        base_offset: index * RECORDS,
    };
    source.put(
        &key.object_key(SegmentFile::Data),
        segment_of(partition, index * RECORDS, kind)?,
    );
    source.put(&key.object_key(SegmentFile::Index), Vec::new());
    Ok(())
}

/// The Avro schema of the registry workload's values (schema id [`REGISTRY_SCHEMA_ID`]).
pub const REGISTRY_SCHEMA: &str = r#"{"type": "record", "name": "V", "fields": [
    {"name": "n", "type": "long"}, {"name": "even", "type": "boolean"}]}"#;

/// The id the registry holds [`REGISTRY_SCHEMA`] under.
pub const REGISTRY_SCHEMA_ID: u32 = 1;

/// The registry of the registry workload.
pub fn registry() -> Arc<kfs_core::MemoryRegistry> {
    let registry = kfs_core::MemoryRegistry::default();
    registry.register(
        kfs_core::SchemaId::Confluent(REGISTRY_SCHEMA_ID),
        kfs_core::RegisteredSchema::new(kfs_core::SchemaKind::Avro, REGISTRY_SCHEMA),
    );
    Arc::new(registry)
}

/// The registry-framed value of the record at `offset`: an Avro record of schema
/// [`REGISTRY_SCHEMA_ID`], except at every third offset, which names a schema id the
/// registry does not hold (a dead letter).
pub fn registry_value(offset: i64) -> Result<Vec<u8>, String> {
    use apache_avro::types::Value;
    let schema = apache_avro::Schema::parse_str(REGISTRY_SCHEMA).map_err(|e| e.to_string())?;
    let id = if offset % 3 == 0 {
        77
    } else {
        REGISTRY_SCHEMA_ID
    };
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    let record = Value::Record(vec![
        ("n".into(), Value::Long(offset)),
        ("even".into(), Value::Boolean(offset % 2 == 0)),
    ]);
    bytes.extend(apache_avro::to_avro_datum(&schema, record).map_err(|e| e.to_string())?);
    Ok(bytes)
}

/// Every segment of the registry workload (the layout of [`source`]).
pub fn registry_source() -> Result<MemorySource, String> {
    let source = MemorySource::default();
    for partition in 0..PARTITIONS {
        for index in 0..SEGMENTS {
            let key = SegmentKey {
                namespace: "ns".into(),
                topic: "orders".into(),
                partition,
                base_offset: index * RECORDS,
            };
            let values = (index * RECORDS..(index + 1) * RECORDS)
                .map(registry_value)
                .collect::<Result<Vec<_>, _>>()?;
            let records = simple_records(index * RECORDS, RECORDS, |offset| {
                values
                    .get(usize::try_from(offset - index * RECORDS).ok()?)
                    .cloned()
            });
            let segment =
                encode_records(records, Compression::Snappy).map_err(|e| e.to_string())?;
            source.put(&key.object_key(SegmentFile::Data), segment.kfs);
            source.put(&key.object_key(SegmentFile::Index), Vec::new());
        }
    }
    Ok(source)
}

/// Every segment of the workload.
pub fn source() -> Result<MemorySource, kfs_segment::EncodeError> {
    let source = MemorySource::default();
    for partition in 0..PARTITIONS {
        for index in 0..SEGMENTS {
            put_segment(&source, partition, index)?;
        }
    }
    Ok(source)
}

/// The table's watermarks, if the table exists yet.
pub async fn watermarks(catalog: &dyn Catalog) -> Result<kfs_plan::offsets::OffsetMap, String> {
    let ident = table_ident(&TableNaming::default().table_for("orders"));
    match catalog.load_table(&ident).await {
        Ok(table) => table_watermarks(&table).map_err(|e| e.to_string()),
        Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(Default::default()),
        Err(e) => Err(e.to_string()),
    }
}

/// Checks the invariants; returns how many segments were quarantined as late, or a
/// description of the first violation. The table belongs to one feed (whichever
/// created it, when others collide with it): only that feed's entries are checked
/// against it; another feed's entries may only be pending (a converter that claimed
/// the table in a race), never committed.
///
/// Every segment is in the table exactly once, or quarantined because it arrived after
/// the table moved past it (below its partition's start, or inside a recorded gap):
/// the live files hold exactly the other segments' records, no file is registered
/// twice, every referenced file exists, every partition stands at its end, and every
/// ledger entry is committed (in a snapshot the table has, or one expiry removed, below
/// the watermark) or quarantined as late.
pub async fn check(catalog: &dyn Catalog, ledger: &SqliteLedger) -> Result<i64, String> {
    let fail = |e: &dyn std::fmt::Display| e.to_string();
    let ident = table_ident(&TableNaming::default().table_for("orders"));
    let table = catalog.load_table(&ident).await.map_err(|e| fail(&e))?;
    let progress = table_progress(&table).map_err(|e| fail(&e))?;
    let watermarks = &progress.watermarks;
    for partition in 0..PARTITIONS {
        if watermarks.get(&partition) != Some(&(SEGMENTS * RECORDS)) {
            let entries = ledger.list(None, None).await.map_err(|e| fail(&e))?;
            let open: Vec<String> = entries
                .iter()
                .filter(|e| !matches!(e.state, EntryState::Committed { .. }))
                .map(|e| {
                    format!(
                        "{} {}-{} {:?}",
                        e.segment, e.base_offset, e.last_offset, e.state
                    )
                })
                .collect();
            return Err(format!(
                "watermarks {watermarks:?}, gaps {:?}; not committed: {open:?}",
                progress.gaps
            ));
        }
    }
    // Segments whose first, shorter upload was converted before the broker wrote the
    // key again: one record fewer each (the rewrite is quarantined or unseen).
    // (A segment may be in more than one committed entry: converted alone and in a
    // run, one of them recovered as covered.)
    let (mut late, mut skipped, mut short) = (0, 0, BTreeSet::new());
    // The offsets of the owner's segments that are not in the table (late, skipped,
    // the record a short first upload lacks).
    let mut absent: BTreeSet<(i32, i64)> = BTreeSet::new();
    let owner = (
        table.metadata().properties().get("kfs.topic").cloned(),
        table
            .metadata()
            .properties()
            .get(kfs_core::SOURCE_NAMESPACE_PROPERTY)
            .cloned(),
    );
    for entry in ledger.list(None, None).await.map_err(|e| fail(&e))? {
        // A rewrite's entry is keyed `{segment}#rewritten-{version}` (or `#overlap-`).
        let segment = entry.segment.split('#').next().unwrap_or_default();
        let namespace = SegmentKey::parse(segment).map(|(key, _)| key.namespace);
        if owner.0.as_deref() != Some(entry.topic.as_str()) || owner.1 != namespace {
            if !matches!(entry.state, EntryState::Pending) {
                return Err(format!(
                    "{}: an entry of a feed that does not own the table ({owner:?}) is {:?}",
                    entry.segment, entry.state
                ));
            }
            continue;
        }
        let below_watermark = watermarks
            .get(&entry.partition)
            .is_some_and(|&next| entry.last_offset < next);
        match &entry.state {
            EntryState::Committed { snapshot_id }
                if table.metadata().snapshot_by_id(*snapshot_id).is_some() || below_watermark =>
            {
                let first_last = entry.members.first().map_or(entry.last_offset, |m| {
                    m.gap_from.unwrap_or(m.base_offset) - 1
                });
                let ends = std::iter::once((entry.base_offset, first_last))
                    .chain(entry.members.iter().map(|m| (m.base_offset, m.last_offset)));
                short.extend(
                    ends.filter(|(base, last)| last - base + 1 == RECORDS - 1)
                        .map(|(base, _)| (entry.partition, base)),
                );
            }
            // A version of a key other than the one in the table: quarantined beside it.
            EntryState::Quarantined { error }
                if error.contains("was rewritten")
                    || error.contains("overlaps what the table holds") => {}
            EntryState::Quarantined { error }
                if error.contains("not ingested behind the watermark") =>
            {
                // Late: below its partition's start, or inside a recorded gap.
                let accounted = matches!(
                    progress.classify(entry.partition, entry.base_offset),
                    ListedSegment::LateBeforeStart { .. } | ListedSegment::LateAfterGap(_)
                );
                if !accounted {
                    return Err(format!(
                        "{}: quarantined as late, but neither below the start {:?} nor in a recorded gap {:?}",
                        entry.segment, progress.starts, progress.gaps
                    ));
                }
                late += 1;
                absent.extend((0..RECORDS).map(|o| (entry.partition, entry.base_offset + o)));
            }
            // Broken bytes, skipped by the operator: its offsets are a skipped gap.
            EntryState::Skipped { .. } => {
                skipped += 1;
                absent.extend((0..RECORDS).map(|o| (entry.partition, entry.base_offset + o)));
            }
            other => return Err(format!("{}: ledger says {other:?}", entry.segment)),
        }
    }
    let snapshot = table
        .metadata()
        .current_snapshot()
        .ok_or("no snapshot")?
        .clone();
    let list = table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .map_err(|e| fail(&e))?;
    let (mut records, mut paths) = (0, BTreeSet::new());
    for manifest in list.entries() {
        let manifest = manifest
            .load_manifest(table.file_io())
            .await
            .map_err(|e| fail(&e))?;
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            let path = entry.data_file().file_path().to_owned();
            if !table.file_io().exists(&path).await.map_err(|e| fail(&e))? {
                return Err(format!("{path} is referenced but missing"));
            }
            // A mirror's delete files count the rows they delete, not records.
            if entry.data_file().content_type() == iceberg::spec::DataContentType::Data {
                records += entry.data_file().record_count();
            }
            // One Puffin file holds the deletion vectors of many data files: each
            // vector is registered once, by the file it deletes from.
            let referenced = entry.data_file().referenced_data_file();
            if !paths.insert((path.clone(), referenced.clone())) {
                return Err(format!("{path} ({referenced:?}) registered twice"));
            }
        }
    }
    absent.extend(
        short
            .iter()
            .map(|(partition, base)| (*partition, base + RECORDS - 1)),
    );
    let short = short.len() as i64;
    let expected = ((PARTITIONS as i64 * SEGMENTS - late - skipped) * RECORDS - short) as u64;
    let mirror = table
        .metadata()
        .properties()
        .get(kfs_plan::mode::TABLE_MODE_PROPERTY)
        .is_some_and(|mode| mode == "upsert");
    if mirror {
        // Compaction leaves a mirror's deleted rows out: it holds the fold, not the log.
        check_mirror(catalog, &absent).await?;
        let logged = table
            .metadata()
            .properties()
            .get(kfs_plan::mode::CHANGE_LOG_PROPERTY);
        if logged.is_some_and(|on| on == "true") {
            check_change_log(catalog, &absent).await?;
        }
    } else if records != expected {
        return Err(format!(
            "{records} records, expected {expected} ({late} segments quarantined as late, {skipped} skipped, {short} short first uploads)"
        ));
    }
    Ok(late)
}

/// The key of segment `index` of `partition` of the table's own feed.
pub fn orders_key(partition: i32, index: i64) -> SegmentKey {
    SegmentKey {
        namespace: "ns".into(),
        topic: "orders".into(),
        partition,
        base_offset: index * RECORDS,
    }
}

/// The first, half-failed upload of segment `index` of `partition` (see `rewritten`):
/// a `.kfs` one record short, with other values, beside the `.index` already there.
pub fn put_first_version(
    source: &MemorySource,
    partition: i32,
    index: i64,
    kind: Records,
) -> Result<(), kfs_segment::EncodeError> {
    let base = index * RECORDS;
    let mut records = records_of(partition, base, RECORDS - 1, kind);
    for record in &mut records {
        if let Some(value) = &mut record.value {
            value.splice(0..0, b"first upload ".iter().copied());
        }
    }
    let bytes = encode_records(records, Compression::None)?.kfs;
    source.put(
        &orders_key(partition, index).object_key(SegmentFile::Data),
        bytes,
    );
    Ok(())
}

/// Uploads segment `index` of `partition` of `feed` (namespace, topic) again with one
/// byte of its body flipped: its checksum no longer matches.
pub fn break_segment(
    source: &MemorySource,
    (namespace, topic): (&str, &str),
    partition: i32,
    index: i64,
    kind: Records,
) -> Result<(), kfs_segment::EncodeError> {
    let mut bytes = segment_of(partition, index * RECORDS, kind)?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    let key = SegmentKey {
        namespace: namespace.into(),
        topic: topic.into(),
        partition,
        base_offset: index * RECORDS,
    };
    source.put(&key.object_key(SegmentFile::Data), bytes);
    Ok(())
}
