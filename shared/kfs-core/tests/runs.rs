//! Runs: small segments of a partition that continue one another become one set of
//! data files and one ledger entry; a broken segment inside a run is quarantined on
//! its own and cuts the run, the others still convert; the sweep knows the segments
//! a pending run holds; a run overlapping what another run committed is dropped and
//! its segments past the watermark are converted again. On the real SQL catalog and
//! ledger, every offset checked once.

use std::collections::{BTreeMap, BTreeSet};

use kfs_core::testing::{Probe, Probed};
use kfs_core::{EntryState, Ledger, LedgerEntry, LedgerError, SegmentSource, SqliteLedger};
use kfs_plan::keys::{SegmentFile, SegmentKey};
use kfs_plan::naming::TableNaming;

use crate::local::{BoxError, Local, offsets};

type TestResult = Result<(), BoxError>;

const VALUES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Offsets `from..to` of partition 0, once each.
fn once(from: i64, to: i64) -> BTreeMap<(i32, i64), usize> {
    (from..to).map(|o| ((0, o), 1)).collect()
}

/// Ten segments of five records of `topic`, each starting where the one before ended.
fn put_ten(local: &Local, topic: &str) -> Result<Vec<SegmentKey>, BoxError> {
    (0..10)
        .map(|i| local.put(topic, i * 5, &VALUES, 1))
        .collect()
}

#[tokio::test]
async fn a_run_is_one_file_and_a_broken_segment_inside_it_cuts_it() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let keys = put_ten(&local, "clicks")?;
    // The fifth segment's body is damaged (its CRC no longer matches).
    let broken = keys[4].object_key(SegmentFile::Data);
    let mut bytes = local.source.read(&broken).await?;
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    local.source.put(&broken, bytes);

    let report = local.run(&naming).await?;
    assert_eq!(report.converted, 9, "{report:?}");
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].0, broken);
    assert!(
        report.quarantined[0].1.contains(&broken),
        "the error names the object: {}",
        report.quarantined[0].1
    );
    // Two runs around the broken segment, each one entry listing its segments.
    let entries = local.ledger.list(None, None).await?;
    let shape: Vec<(i64, usize, &str)> = entries
        .iter()
        .map(|e| (e.base_offset, e.segments(), e.state.name()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 4, "committed"),
            (20, 1, "quarantined"),
            (25, 5, "pending")
        ]
    );
    let run = &entries[2];
    assert_eq!(run.last_offset, 49);
    assert_eq!(run.records, 25);
    assert_eq!(
        run.members
            .iter()
            .map(|m| m.base_offset)
            .collect::<Vec<_>>(),
        vec![30, 35, 40, 45]
    );
    // The first run is in the table as one data file; the partition waits at the
    // broken segment.
    let table = naming.table_for("clicks");
    assert_eq!(offsets(&local.catalog, &table).await?, once(0, 20));
    let outcome = &report.tables[&table.to_string()];
    assert_eq!((outcome.segments, outcome.files), (4, 1), "{outcome:?}");

    // The next pass converts nothing again: the sweep knows what the pending run holds.
    let report = local.run(&naming).await?;
    assert_eq!(report.converted, 0, "{report:?}");
    assert!(report.failed_segments.is_empty(), "{report:?}");

    // The operator skips the broken segment: the rest lands, once, past a skipped gap.
    assert!(local.ledger.skip_quarantined(&broken, 1).await?);
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    let mut expected = once(0, 20);
    expected.extend(once(25, 50));
    assert_eq!(offsets(&local.catalog, &table).await?, expected);
    Ok(())
}

/// The segments `keys` as the sweep hands them to runs, each listed right after the
/// one before it.
async fn listed(
    local: &Local,
    keys: &[SegmentKey],
) -> Result<Vec<kfs_core::testing::NewSegment>, BoxError> {
    let mut segments = Vec::new();
    for key in keys {
        let object = local
            .source
            .stat(&key.object_key(SegmentFile::Data))
            .await?
            .ok_or("no segment")?;
        segments.push(kfs_core::testing::NewSegment {
            key: key.clone(),
            object,
            follows: true,
        });
    }
    Ok(segments)
}

/// The topic's table, opened as a converter opens it.
async fn topic_table(
    local: &Local,
    naming: &TableNaming,
    topic: &str,
) -> Result<kfs_core::testing::TopicTable, BoxError> {
    Ok(kfs_core::testing::TopicTable::open(
        local.access(),
        naming,
        kfs_core::Feed {
            namespace: "ns",
            topic,
        },
        &local.ledger.identity(),
    )
    .await?)
}

/// Puts segments of five records of `topic` at `bases`, and converts them in runs as
/// a sweep listing them would, without committing them; returns their keys and the
/// table as it was opened for the conversion.
async fn pending_run(
    local: &Local,
    naming: &TableNaming,
    topic: &str,
    bases: &[i64],
) -> Result<(Vec<SegmentKey>, kfs_core::testing::TopicTable), BoxError> {
    let keys = bases
        .iter()
        .map(|&base| local.put(topic, base, &VALUES, 1))
        .collect::<Result<Vec<_>, _>>()?;
    let target = topic_table(local, naming, topic).await?;
    convert_in_runs(local, &target, &listed(local, &keys).await?).await?;
    Ok((keys, target))
}

/// Converts `segments` in runs, as the sweep does, without committing them.
async fn convert_in_runs(
    local: &Local,
    target: &kfs_core::testing::TopicTable,
    segments: &[kfs_core::testing::NewSegment],
) -> Result<kfs_core::testing::RunsOutcome, BoxError> {
    let limits = kfs_core::testing::RunLimits {
        decode: kfs_segment::DecodeLimits::default(),
        max_segments: 1000,
    };
    Ok(kfs_core::testing::ingest_runs(
        &local.source,
        target,
        &local.ledger,
        segments,
        limits,
        &kfs_core::RetryPolicy::default(),
        &|| false,
    )
    .await?)
}

#[tokio::test]
async fn a_run_spans_a_gap_no_segment_was_listed_in_and_commits_it_as_a_gap() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let table = naming.table_for("gappy");
    // Offsets 5-9 were never uploaded (a failed upload): one run, one file.
    local.put("gappy", 0, &VALUES, 1)?;
    local.put("gappy", 10, &VALUES, 1)?;
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    let outcome = &report.tables[&table.to_string()];
    assert_eq!((outcome.segments, outcome.files), (2, 1), "{outcome:?}");
    assert_eq!(
        outcome
            .gaps
            .iter()
            .map(|g| (g.from, g.to))
            .collect::<Vec<_>>(),
        vec![(5, 9)]
    );
    let mut expected = once(0, 5);
    expected.extend(once(10, 15));
    assert_eq!(offsets(&local.catalog, &table).await?, expected);
    // The segment turns up after the commit: quarantined as late, never ingested.
    local.put("gappy", 5, &VALUES, 1)?;
    let report = local.run(&naming).await?;
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert!(report.quarantined[0].1.contains("gap"), "{report:?}");
    assert_eq!(offsets(&local.catalog, &table).await?, expected);

    // Before the commit, the segment turning up in a run's gap drops the run: all
    // three land, with no gap.
    let naming = TableNaming::default();
    let table = naming.table_for("filled");
    let first = local.put("filled", 0, &VALUES, 1)?;
    let last = local.put("filled", 10, &VALUES, 1)?;
    let target = topic_table(&local, &naming, "filled").await?;
    let runs = convert_in_runs(&local, &target, &listed(&local, &[first, last]).await?).await?;
    assert_eq!(runs.recorded.len(), 1, "{runs:?}");
    assert_eq!(runs.recorded[0].inner_gaps(), vec![(5, 9)]);
    local.put("filled", 5, &VALUES, 1)?;
    let report = local.run(&naming).await?;
    assert_eq!(
        report.tables[&table.to_string()].runs_dropped,
        1,
        "{report:?}"
    );
    assert!(offsets(&local.catalog, &table).await?.is_empty());
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    assert_eq!(report.converted, 3, "{report:?}");
    assert!(
        report.tables[&table.to_string()].gaps.is_empty(),
        "{report:?}"
    );
    assert_eq!(offsets(&local.catalog, &table).await?, once(0, 15));
    Ok(())
}

#[tokio::test]
async fn a_run_overlapping_a_committed_run_is_dropped_and_converted_again() -> TestResult {
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let keys = put_ten(&local, "views")?;
    // Two converters took overlapping runs: segments 0-2, and segments 1-6.
    let target = topic_table(&local, &naming, "views").await?;
    for range in [0..3, 1..7] {
        let runs = convert_in_runs(&local, &target, &listed(&local, &keys[range]).await?).await?;
        assert_eq!(runs.recorded.len(), 1, "{runs:?}");
    }

    // The pass converts segments 7-9 (the sweep knows 0-6 are in runs). The first run
    // commits; the second can never commit whole: it is dropped, and the segments it
    // held past the watermark (3-6) are converted again by the next pass.
    let table = naming.table_for("views");
    let report = local.run(&naming).await?;
    assert_eq!(report.converted, 3, "{report:?}");
    let outcome = &report.tables[&table.to_string()];
    assert_eq!(outcome.runs_dropped, 1, "{outcome:?}");
    assert_eq!(offsets(&local.catalog, &table).await?, once(0, 15));
    let report = local.run(&naming).await?;
    assert_eq!(report.converted, 4, "{report:?}");
    assert!(!report.has_failures(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &table).await?, once(0, 50));
    assert!(local.ledger.list(Some("pending"), None).await?.is_empty());
    Ok(())
}

/// A process's view of the ledger read before others changed it: its reads of the
/// entries it read then answer as they did (whatever is under their keys now); its
/// writes go to the ledger.
struct StaleReads {
    read_then: Vec<LedgerEntry>,
}

impl Probe<SqliteLedger> for StaleReads {
    async fn get(
        &self,
        inner: &SqliteLedger,
        segment: &str,
    ) -> Result<Option<LedgerEntry>, LedgerError> {
        match self.read_then.iter().find(|e| e.segment == segment) {
            Some(entry) => Ok(Some(entry.clone())),
            None => inner.get(segment).await,
        }
    }
    async fn get_many(
        &self,
        inner: &SqliteLedger,
        segments: &[String],
    ) -> Result<kfs_core::Listing, LedgerError> {
        let mut listing = inner.get_many(segments).await?;
        for entry in &mut listing.entries {
            if let Some(then) = self.read_then.iter().find(|e| e.segment == entry.segment) {
                *entry = then.clone();
            }
        }
        Ok(listing)
    }
}

/// One commit cycle of `table` (fed by `topic`) through `ledger`, on a listing of
/// partition 0 at `bases`.
async fn commit_listed(
    local: &Local,
    ledger: &impl Ledger,
    table: &kfs_plan::naming::TableName,
    topic: &str,
    bases: &[i64],
    settings: &kfs_core::CommitSettings,
) -> Result<kfs_core::CommitOutcome, BoxError> {
    let listing = BTreeMap::from([(0, bases.iter().copied().collect::<BTreeSet<_>>())]);
    Ok(kfs_core::testing::commit_table(
        local.access(),
        ledger,
        table,
        topic,
        &listing,
        settings,
        kfs_core::now_ms(),
    )
    .await?)
}

/// Runs passes until one quarantines something (at most three), returning what it
/// quarantined.
async fn quarantined_by_passes(
    local: &Local,
    naming: &TableNaming,
) -> Result<Vec<String>, BoxError> {
    for _ in 0..3 {
        let report = local.run(naming).await?;
        if !report.quarantined.is_empty() {
            return Ok(report.quarantined.into_iter().map(|(s, _)| s).collect());
        }
    }
    Ok(Vec::new())
}

#[tokio::test]
async fn a_run_landed_on_an_older_listing_never_marks_the_run_converted_again_after_it()
-> TestResult {
    // Process A reads a pending run spanning offsets 5-9, where nothing is listed.
    // The segment at 5 turns up; process B drops the run (a segment is in its gap)
    // and converts the three segments again as one run, under the same key. A, still
    // on its older listing, lands its run, recording 5-9 as a gap. A's marking must
    // not take B's run for its own: B's run holds offsets the table does not, so it
    // is dropped, and the segment at 5 is quarantined as late. Never lost silently.
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let table = naming.table_for("raced");
    let (keys, target) = pending_run(&local, &naming, "raced", &[0, 10]).await?;
    let (first, last) = (keys[0].clone(), keys[1].clone());
    let process_a = Probed {
        inner: &local.ledger,
        probe: StaleReads {
            read_then: local.ledger.list(Some("pending"), None).await?,
        },
    };
    let middle = local.put("raced", 5, &VALUES, 1)?;
    let settings = kfs_core::CommitSettings::default();
    let outcome = commit_listed(
        &local,
        &local.ledger,
        &table,
        "raced",
        &[0, 5, 10],
        &settings,
    )
    .await?;
    assert_eq!(outcome.runs_dropped, 1, "{outcome:?}");
    let segments = listed(&local, &[first.clone(), middle.clone(), last]).await?;
    let again = convert_in_runs(&local, &target, &segments).await?;
    assert_eq!(again.recorded.len(), 1, "{again:?}");
    let outcome = commit_listed(&local, &process_a, &table, "raced", &[0, 10], &settings).await?;
    assert_eq!(
        outcome
            .gaps
            .iter()
            .map(|g| (g.from, g.to))
            .collect::<Vec<_>>(),
        vec![(5, 9)],
        "{outcome:?}"
    );
    let mut expected = once(0, 5);
    expected.extend(once(10, 15));
    assert_eq!(offsets(&local.catalog, &table).await?, expected);
    let lead = first.object_key(SegmentFile::Data);
    let entry = local.ledger.get(&lead).await?.ok_or("B's run is gone")?;
    assert_eq!(
        (entry.state.name(), entry.segments()),
        ("pending", 3),
        "A's commit marked B's run: {entry:?}"
    );
    assert_eq!(
        quarantined_by_passes(&local, &naming).await?,
        vec![middle.object_key(SegmentFile::Data)]
    );
    assert_eq!(offsets(&local.catalog, &table).await?, expected);
    assert!(local.ledger.list(Some("pending"), None).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_segment_converted_while_its_gap_was_committed_is_quarantined_as_late() -> TestResult {
    // A converter opened the table before a commit recorded offsets 5-9 as a gap, and
    // converts the segment at 5 after it: its entry is covered by the watermark but
    // not in the table. It is dropped, then quarantined as late, never left pending.
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let table = naming.table_for("behind");
    local.put("behind", 0, &VALUES, 1)?;
    local.put("behind", 10, &VALUES, 1)?;
    let converter = topic_table(&local, &naming, "behind").await?;
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    let middle = local.put("behind", 5, &VALUES, 1)?;
    let converted = convert_in_runs(
        &local,
        &converter,
        &listed(&local, std::slice::from_ref(&middle)).await?,
    )
    .await?;
    assert_eq!(converted.recorded.len(), 1, "{converted:?}");
    let report = local.run(&naming).await?;
    assert_eq!(
        report.tables[&table.to_string()].late_dropped,
        1,
        "{report:?}"
    );
    assert_eq!(
        quarantined_by_passes(&local, &naming).await?,
        vec![middle.object_key(SegmentFile::Data)]
    );
    let mut expected = once(0, 5);
    expected.extend(once(10, 15));
    assert_eq!(offsets(&local.catalog, &table).await?, expected);
    assert!(local.ledger.list(Some("pending"), None).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_key_rewritten_after_its_run_committed_is_quarantined_and_its_partition_goes_on()
-> TestResult {
    // Segments 0 and 5 convert in one run. The key of segment 5 is then written again
    // with other content, one record longer, and a converter that opened the table
    // before the run committed converts it alone. The table holds 5-9 from the run:
    // the single entry overlaps the watermark. It is quarantined beside its key
    // (naming offset 10, which the table lacks), never left holding the partition,
    // which goes on with the next segment in the same pass.
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let table = naming.table_for("rewritten");
    let (_, converter) = pending_run(&local, &naming, "rewritten", &[0, 5]).await?;
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    assert_eq!(offsets(&local.catalog, &table).await?, once(0, 10));
    let again = local.put("rewritten", 5, &["A", "B", "C", "D", "E", "F"], 1)?;
    let converted = convert_in_runs(
        &local,
        &converter,
        &listed(&local, std::slice::from_ref(&again)).await?,
    )
    .await?;
    assert_eq!(converted.recorded.len(), 1, "{converted:?}");
    local.put("rewritten", 11, &VALUES, 1)?;
    let report = local.run(&naming).await?;
    assert!(!report.has_failures(), "{report:?}");
    let quarantined = local.ledger.list(Some("quarantined"), None).await?;
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let EntryState::Quarantined { error } = &quarantined[0].state else {
        return Err("not quarantined".into());
    };
    assert!(error.contains("offsets 10-10"), "{error}");
    // In the same pass: the commit plans again without the dropped entry.
    let mut expected = once(0, 10);
    expected.extend(once(11, 16));
    assert_eq!(offsets(&local.catalog, &table).await?, expected);
    assert!(local.ledger.list(Some("pending"), None).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_configured_start_inside_a_segment_holds_its_partition_and_quarantines_nothing()
-> TestResult {
    // The table holds nothing of the partition; the operator's start offset (2) lies
    // inside the first segment (0-4). That overlap is not a rewrite: the partition
    // waits for the start to be corrected, and nothing is quarantined or dropped.
    let local = Local::open().await?;
    let naming = TableNaming::default();
    let table = naming.table_for("started");
    pending_run(&local, &naming, "started", &[0]).await?;
    let settings = kfs_core::CommitSettings {
        start_offsets: BTreeMap::from([(0, 2)]),
        ..kfs_core::CommitSettings::default()
    };
    let outcome = commit_listed(&local, &local.ledger, &table, "started", &[0], &settings).await?;
    assert_eq!(
        (outcome.snapshot_id, outcome.runs_dropped),
        (None, 0),
        "{outcome:?}"
    );
    assert!(
        matches!(
            outcome.holds.first().map(|h| &h.reason),
            Some(kfs_plan::commit::HoldReason::Overlap { .. })
        ),
        "{outcome:?}"
    );
    assert_eq!(local.ledger.list(Some("pending"), None).await?.len(), 1);
    assert!(
        local
            .ledger
            .list(Some("quarantined"), None)
            .await?
            .is_empty()
    );
    Ok(())
}
