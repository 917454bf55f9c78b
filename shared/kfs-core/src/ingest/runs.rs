//! Converting the small segments of one partition of a raw table in runs: segments
//! that follow each other joined into one set of data files, recorded as one pending
//! ledger entry.

use futures::StreamExt;
use kfs_segment::DecodeLimits;

use super::record::{
    FOOTER_TAG_BYTES, describe_and_spill, entry_for, quarantined, record, record_written,
    version_tag,
};
use super::target::{TopicTable, late};
use crate::error::PipelineError;
use crate::ledger::{Ledger, LedgerEntry, converted_paths};
use crate::source::{SegmentSource, SourceObject};
use kfs_plan::keys::SegmentKey;

/// Most segments one run takes: its entry (some 120 bytes a member) stays far inside
/// a DynamoDB item.
pub const MAX_RUN_SEGMENTS: usize = 1000;

/// Most bytes of segments one run takes.
pub const MAX_RUN_BYTES: u64 = 64 << 20;

/// Bytes of segments a run keeps in flight ahead of its decoding: on S3 (some 20 ms a
/// read) a function waits as many times less than reading one at a time as there are
/// reads in flight ...
const RUN_READ_AHEAD_BYTES: u64 = 32 << 20;

/// ... and at most this many reads (a function has 1,024 file descriptors, and
/// converts a few partitions at once).
const RUN_READ_AHEAD_MAX: usize = 64;

/// A complete segment the ledger does not know yet, as listed.
#[derive(Debug, Clone)]
pub struct NewSegment {
    /// Its key.
    pub key: SegmentKey,
    /// Its `.kfs` object.
    pub object: SourceObject,
    /// Whether the segment listed just before it, in its partition, is the one before
    /// it in the same list of new segments: the offsets between the two are then a
    /// gap no segment was listed in, which a run may span (the commit checks it again
    /// against its own listing).
    pub follows: bool,
}

/// How large runs grow, and how their segments are decoded.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Decoder limits.
    pub decode: DecodeLimits,
    /// Most segments in one run (at most [`MAX_RUN_SEGMENTS`]; 1: a data file per
    /// segment).
    pub max_segments: usize,
}

/// What converting a partition's small segments in runs did.
#[derive(Debug, Default)]
pub struct RunsOutcome {
    /// Entries recorded, in offset order: runs (pending) and segments quarantined on
    /// their own. A run's entry may be another process's, when it recorded the run's
    /// first segment first.
    pub recorded: Vec<LedgerEntry>,
    /// Segments converted into the runs recorded.
    pub converted: usize,
    /// Segments not reached because `stop` said so: left for the next pass.
    pub deferred: usize,
    /// Segments left unconverted after a failure that is not their bytes (after the
    /// retries), with the error ([`PipelineError::Unconverted`]): the conversion of
    /// the partition ends there for this pass, and the next pass goes on from them.
    pub failed: Vec<PipelineError>,
}

/// A run being gathered: its writer, its entry as it will be recorded, and what the
/// next segment must start at.
struct OpenRun {
    writer: crate::convert::RunWriter,
    entry: LedgerEntry,
    segment_bytes: u64,
}

impl OpenRun {
    /// The next offset after the run, when the segment `key` may join it: it starts
    /// there, or later after a gap no listed segment is in (`follows`), and the run has
    /// room for it.
    fn joined_at(&self, key: &SegmentKey, follows: bool, max_segments: usize) -> Option<i64> {
        let next = self.entry.last_offset.checked_add(1)?;
        let room = self.entry.segments() < max_segments && self.segment_bytes < MAX_RUN_BYTES;
        (room && (next == key.base_offset || (follows && next < key.base_offset))).then_some(next)
    }

    /// Writes a decoded segment into the run and notes it as a member (`joined_at`:
    /// where the run ended before it, when it joined after a gap).
    async fn add(
        &mut self,
        decoded: crate::convert::DecodedSegment,
        (key, object, etag): (&SegmentKey, &SourceObject, String),
        joined_at: Option<i64>,
    ) -> Result<(), crate::convert::ConvertError> {
        let (records, last_offset) = (decoded.records, decoded.last_offset);
        self.writer.push(decoded).await?;
        if self.entry.segment != object.key {
            self.entry.members.push(crate::ledger::RunMember {
                segment: object.key.clone(),
                etag,
                base_offset: key.base_offset,
                last_offset,
                gap_from: joined_at.filter(|next| *next < key.base_offset),
            });
        }
        self.entry.last_offset = last_offset;
        self.entry.records += records;
        self.segment_bytes += object.size;
        Ok(())
    }
}

/// Closes the open run, then records `entry` quarantined with `error`: a segment
/// that cannot join a run (its bytes are broken, or it arrived too late) is recorded
/// on its own, and cuts the run.
async fn quarantine_alone(
    ledger: &impl Ledger,
    run: &mut Option<OpenRun>,
    outcome: &mut RunsOutcome,
    entry: LedgerEntry,
    error: String,
) -> Result<(), PipelineError> {
    close_run(ledger, run, outcome).await?;
    outcome
        .recorded
        .push(record(ledger, quarantined(entry, error)).await?);
    Ok(())
}

/// Converts the small segments of one partition of a raw table, listed in offset
/// order, in runs (one set of data files each): a run takes segments while each
/// starts where the one before it ended, or after a gap no segment was listed in
/// ([`NewSegment::follows`]), up to `limits.max_segments` and `MAX_RUN_BYTES`. A segment whose bytes
/// are broken, or that arrived too late, is quarantined on its own and cuts the run.
/// Every run is recorded as one pending entry listing its segments. `stop` is asked
/// before each segment. Only a failure of the ledger itself is returned as an error.
pub async fn ingest_runs(
    source: &impl SegmentSource,
    target: &TopicTable,
    ledger: &impl Ledger,
    segments: &[NewSegment],
    limits: RunLimits,
    retry: &kfs_catalog::fault::RetryPolicy,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<RunsOutcome, PipelineError> {
    let mut outcome = RunsOutcome::default();
    let schema = match crate::convert::RunWriter::schema(&target.table) {
        Ok(schema) => schema,
        Err(source) => {
            let e = PipelineError::Catalog {
                table: target.name.to_string(),
                source: Box::new(source),
            };
            fail_rest(&mut outcome, None, segments, &e).await;
            return Ok(outcome);
        }
    };
    let mut run: Option<OpenRun> = None;
    let mut bodies = read_ahead(source, segments, retry);
    let mut at = 0;
    while at < segments.len() {
        let NewSegment {
            key,
            object,
            follows,
        } = &segments[at];
        if stop() {
            outcome.deferred = segments.len() - at;
            break;
        }
        let body = match bodies.next().await {
            Some(Ok(body)) => body,
            Some(Err(e)) => {
                fail_rest(&mut outcome, run.take(), &segments[at..], &e).await;
                break;
            }
            None => break,
        };
        at += 1;
        let etag = version_tag(object, tail_of(&body));
        if let Some(why) = late(&target.progress, key) {
            let error = format!("{}: {why}", source.describe(&object.key));
            let entry = entry_for(target, key, object, etag);
            quarantine_alone(ledger, &mut run, &mut outcome, entry, error).await?;
            continue;
        }
        let joins = run
            .as_ref()
            .and_then(|open| open.joined_at(key, *follows, limits.max_segments));
        if joins.is_none() {
            close_run(ledger, &mut run, &mut outcome).await?;
        }
        let decoded = match crate::convert::decode_for_run(&schema, key, body, limits.decode).await
        {
            Ok(decoded) => decoded,
            Err(e) if e.kind().quarantines() => {
                let error = format!("{}: {e}", source.describe(&object.key));
                let entry = entry_for(target, key, object, etag);
                quarantine_alone(ledger, &mut run, &mut outcome, entry, error).await?;
                continue;
            }
            Err(e) => {
                let rest = &segments[at - 1..];
                fail_rest(&mut outcome, run.take(), rest, &e.into()).await;
                break;
            }
        };
        let open = match run.as_mut() {
            Some(open) => open,
            None => match crate::convert::RunWriter::new(&target.table, schema.clone(), key, &etag)
                .await
            {
                Ok(writer) => run.insert(OpenRun {
                    writer,
                    entry: entry_for(target, key, object, etag.clone()),
                    segment_bytes: 0,
                }),
                Err(e) => {
                    fail_rest(&mut outcome, None, &segments[at - 1..], &e.into()).await;
                    break;
                }
            },
        };
        if let Err(e) = open.add(decoded, (key, object, etag), joins).await {
            let rest = &segments[at - 1..];
            fail_rest(&mut outcome, run.take(), rest, &e.into()).await;
            break;
        }
    }
    close_run(ledger, &mut run, &mut outcome).await?;
    Ok(outcome)
}

/// The segments' bodies, read in order ahead of their decoding: as many at once as fit
/// `RUN_READ_AHEAD_BYTES` (at most `RUN_READ_AHEAD_MAX`), each read retried.
fn read_ahead<'a>(
    source: &'a impl SegmentSource,
    segments: &'a [NewSegment],
    retry: &'a kfs_catalog::fault::RetryPolicy,
) -> impl futures::Stream<Item = Result<bytes::Bytes, PipelineError>> + 'a {
    let largest = segments.iter().map(|s| s.object.size).max().unwrap_or(0);
    let depth = usize::try_from(RUN_READ_AHEAD_BYTES / largest.max(1))
        .unwrap_or(RUN_READ_AHEAD_MAX)
        .clamp(1, RUN_READ_AHEAD_MAX);
    futures::stream::iter(segments.iter())
        .map(move |NewSegment { object, .. }| {
            retry.run(PipelineError::kind, move || async move {
                Ok::<_, PipelineError>(
                    source
                        .read_version(&object.key, object.etag.as_deref())
                        .await?,
                )
            })
        })
        .buffered(depth)
}

/// The bytes at the end of a segment that identify its content ([`version_tag`]).
fn tail_of(body: &[u8]) -> &[u8] {
    let footer = usize::try_from(FOOTER_TAG_BYTES).unwrap_or(usize::MAX);
    &body[body.len().saturating_sub(footer)..]
}

/// Closes the open run, if any, and records it: its files described in its entry,
/// inserted unless another process recorded its first segment first. A run that
/// fails to close is left unrecorded (its files deleted), its segments reported.
async fn close_run(
    ledger: &impl Ledger,
    run: &mut Option<OpenRun>,
    outcome: &mut RunsOutcome,
) -> Result<(), PipelineError> {
    let Some(OpenRun {
        writer, mut entry, ..
    }) = run.take()
    else {
        return Ok(());
    };
    let table = writer.table().clone();
    let written = match writer.close().await {
        Ok(written) => written,
        Err(e) => {
            let e = PipelineError::from(e);
            outcome
                .failed
                .extend(run_segments(&entry).map(|s| e.for_segment(&s)));
            return Ok(());
        }
    };
    let mut paths = Vec::new();
    match describe_and_spill(written.data_files, &table, &mut paths).await {
        Ok(descriptions) => entry.data_files = descriptions,
        Err(e) => {
            for path in &paths {
                let _ = kfs_failpoint::delete_file(table.file_io(), path).await;
            }
            let e = PipelineError::Catalog {
                table: entry.table.clone(),
                source: Box::new(e),
            };
            outcome
                .failed
                .extend(run_segments(&entry).map(|s| e.for_segment(&s)));
            return Ok(());
        }
    }
    entry.bytes = written.file_bytes;
    paths.extend(converted_paths(&entry));
    let segments = entry.segments();
    let recorded = record_written(ledger, entry, table.file_io(), &paths).await?;
    outcome.converted += segments;
    outcome.recorded.push(recorded);
    Ok(())
}

/// The keys of the segments an entry holds.
pub(crate) fn run_segments(entry: &LedgerEntry) -> impl Iterator<Item = String> + '_ {
    std::iter::once(entry.segment.clone()).chain(entry.members.iter().map(|m| m.segment.clone()))
}

/// After a failure that is not a segment's bytes: the open run is dropped (its files
/// deleted) and its segments, with `rest`, are reported failed with the error.
async fn fail_rest(
    outcome: &mut RunsOutcome,
    run: Option<OpenRun>,
    rest: &[NewSegment],
    error: &PipelineError,
) {
    if let Some(open) = run {
        outcome
            .failed
            .extend(run_segments(&open.entry).map(|s| error.for_segment(&s)));
        open.writer.discard().await;
    }
    outcome.failed.extend(
        rest.iter()
            .map(|segment| error.for_segment(&segment.object.key)),
    );
}
