//! The sweep of a pass: the source listed where work can be (after each partition's
//! watermark, and where a late segment would be), every complete segment new to the
//! ledger gathered for conversion, and each table's listing kept for its commit.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use futures::StreamExt;
use kfs_plan::keys::{SegmentFile, SegmentKey, SegmentListing};
use kfs_plan::sweep::{BaseRange, ListedSegment};

use super::config::{Pass, PipelineConfig};
use super::report::PassReport;
use super::tables::Tables;
use crate::error::PipelineError;
use crate::ingest::{NewSegment, TopicTable};
use crate::ledger::{Ledger, LedgerEntry, LedgerError};
use crate::source::{SegmentSource, SourceObject};
use crate::table::Feed;

/// What the sweep found: the new segments to convert, in listing order (by feed,
/// partition and offset), and per table what its commit plans with.
pub(super) struct Sweep {
    /// Complete segments the ledger does not know.
    pub(super) work: Vec<NewSegment>,
    /// The tables swept, by name.
    pub(super) tables: BTreeMap<String, SweptTable>,
}

/// Whether a listing went to its end or stopped at the deadline.
#[derive(PartialEq, Eq)]
enum Listed {
    /// Every range was listed.
    Whole,
    /// The deadline came first.
    Cut,
}

/// Sweeps the source: lists every feed `pass` handles, opens their tables, and
/// gathers the segments new to the ledger. A table whose feeds were not all listed
/// before the deadline is dropped from the sweep (it does not commit in this pass: its
/// listing is partial, and a segment not listed must never pass for a gap).
pub(super) async fn sweep<S: SegmentSource, L: Ledger>(
    pass: &Pass<'_, S, L>,
    tables: &mut Tables<'_>,
    report: &mut PassReport,
) -> Result<Sweep, PipelineError> {
    let mut work = Vec::new();
    let mut swept: BTreeMap<String, SweptTable> = BTreeMap::new();
    let feeds = list_feeds(pass.source, pass.config, report).await?;
    // Feeds before this one were listed in full.
    let mut reached = feeds.len();
    'feeds: for (feed_at, (namespace, topic, partitions)) in feeds.iter().enumerate() {
        if pass.past_sweep_deadline() {
            // Checked in every loop: a sweep of a long backlog must not eat the time
            // its commits need. What is not looked at waits for the next pass.
            reached = feed_at;
            break;
        }
        let feed = Feed { namespace, topic };
        let Some(target) = tables.get(feed).await else {
            continue;
        };
        let table_name = target.name.to_string();
        let table = match swept.entry(table_name.clone()) {
            Entry::Occupied(slot) => slot.into_mut(),
            Entry::Vacant(slot) => {
                let table = SweptTable::open(pass.ledger, topic, target).await?;
                report.swept.insert(table_name);
                slot.insert(table)
            }
        };
        for (partition_dir, partition) in partitions {
            let dir = format!("{namespace}/{topic}/{partition_dir}/");
            // Only where work can be: after the watermark, and where a late segment
            // would be. What is retained below the watermark is never listed.
            for range in target.progress.ranges_to_list(*partition) {
                let listed =
                    sweep_range(pass, target, table, (&dir, range), &mut work, report).await?;
                if listed == Listed::Cut {
                    reached = feed_at;
                    break 'feeds;
                }
            }
        }
    }
    report.deferred_feeds = feeds.len() - reached;
    for (_, topic, _) in &feeds[reached..] {
        let name = pass.config.naming.table_for(topic).to_string();
        if swept.remove(&name).is_some() {
            report.failed_tables.insert(
                name,
                "deadline reached before its listing finished; the next pass lists it again".into(),
            );
        }
    }
    Ok(Sweep {
        work,
        tables: swept,
    })
}

/// Lists one range of one partition directory of `target`'s feed, noting every
/// complete segment in `table`'s listing and pushing those new to the ledger onto
/// `work`.
async fn sweep_range<S: SegmentSource, L: Ledger>(
    pass: &Pass<'_, S, L>,
    target: &TopicTable,
    table: &mut SweptTable,
    (dir, range): (&str, BaseRange),
    work: &mut Vec<NewSegment>,
    report: &mut PassReport,
) -> Result<Listed, PipelineError> {
    let objects = list_range(pass.source, dir, range).await?;
    let found = SegmentListing::from_keys(objects.iter().map(|o| o.key.as_str()));
    report.objects += objects.len();
    report.ignored += found.ignored;
    report.incomplete += found.incomplete.len();
    report.segments += found.complete.len();
    let by_key: HashMap<&str, &SourceObject> =
        objects.iter().map(|o| (o.key.as_str(), o)).collect();
    // Segments new to this pass's view, looked up in the ledger together, each with
    // whether the segment listed before it is new too.
    let mut unknown: Vec<(SegmentKey, &SourceObject, bool)> = Vec::new();
    let mut previous_new = false;
    let mut listed = Listed::Whole;
    for key in found.complete {
        let follows = std::mem::replace(&mut previous_new, false);
        if pass.past_sweep_deadline() {
            listed = Listed::Cut;
            break;
        }
        table
            .listing
            .entry(key.partition)
            .or_default()
            .insert(key.base_offset);
        let object_key = key.object_key(SegmentFile::Data);
        let Some(&object) = by_key.get(object_key.as_str()) else {
            continue;
        };
        if target.progress.classify(key.partition, key.base_offset) == ListedSegment::Committed
            || table.open.contains(&object_key)
        {
            // In the table, or open work the ledger holds: no lookup, so a sweep
            // costs one read per segment new to it, not per segment waiting.
            report.known += 1;
            continue;
        }
        match table.run_holding(pass.ledger, &key).await {
            Err(LedgerError::Corrupt { segment, reason }) => {
                report.known += 1;
                report.unreadable.push((segment, reason));
            }
            Err(e) => return Err(e.into()),
            Ok(Some(Held::Member(etag))) => {
                // Converted in a pending run: no entry of its own.
                report.known += 1;
                if object.etag.as_ref().is_some_and(|current| *current != etag) {
                    report.rewritten.push(object_key);
                }
            }
            Ok(Some(Held::InGap)) => {
                // Listed inside a gap a pending run spans: the commit drops the run,
                // and the next pass converts them all.
                report.known += 1;
            }
            Ok(None) => {
                unknown.push((key, object, follows));
                previous_new = true;
            }
        }
    }
    take_unrecorded(pass.ledger, unknown, work, report).await?;
    Ok(listed)
}

/// Looks the segments `unknown` up in the ledger together and pushes those it does
/// not hold onto `work`; a segment the ledger knows after all breaks the chain of new
/// ones (a run may span only a gap between two new segments).
async fn take_unrecorded(
    ledger: &impl Ledger,
    unknown: Vec<(SegmentKey, &SourceObject, bool)>,
    work: &mut Vec<NewSegment>,
    report: &mut PassReport,
) -> Result<(), PipelineError> {
    let keys: Vec<String> = unknown
        .iter()
        .map(|(key, _, _)| key.object_key(SegmentFile::Data))
        .collect();
    let found = ledger.get_many(&keys).await?;
    let unreadable: HashSet<String> = found.unreadable.iter().map(|(s, _)| s.clone()).collect();
    report.known += found.unreadable.len();
    report.unreadable.extend(found.unreadable);
    let recorded: HashMap<String, LedgerEntry> = found
        .entries
        .into_iter()
        .map(|entry| (entry.segment.clone(), entry))
        .collect();
    let mut chained = false;
    for ((key, object, follows), object_key) in unknown.into_iter().zip(keys) {
        if unreadable.contains(&object_key) {
            chained = false;
            continue;
        }
        match recorded.get(&object_key) {
            Some(entry) => {
                report.known += 1;
                chained = false;
                if object.etag.as_ref().is_some_and(|etag| *etag != entry.etag) {
                    report.rewritten.push(object_key);
                }
            }
            None => {
                work.push(NewSegment {
                    key,
                    object: object.clone(),
                    follows: follows && chained,
                });
                chained = true;
            }
        }
    }
    Ok(())
}

/// The objects of the partition directory `dir` whose base offsets lie in `range`,
/// in key order: listed from the range's start (`StartAfter`), and no further than
/// its end (segment keys sort by base offset).
async fn list_range(
    source: &impl SegmentSource,
    dir: &str,
    range: BaseRange,
) -> Result<Vec<SourceObject>, PipelineError> {
    let start_after = range.from.map(|from| format!("{dir}segment-{from:020}"));
    let mut listed = source.list_files(dir, start_after.as_deref()).await?;
    let mut objects = Vec::new();
    while let Some(object) = listed.next().await {
        let object = object?;
        if SegmentKey::parse(&object.key).is_some_and(|(k, _)| range.is_below(k.base_offset)) {
            break;
        }
        objects.push(object);
    }
    Ok(objects)
}

/// A feed's namespace, topic, and partitions (directory name and number).
type Feeds = (String, String, Vec<(String, i32)>);

/// What the sweep found for one table.
pub(super) struct SweptTable {
    /// The topic feeding it.
    pub(super) topic: String,
    /// Its name.
    pub(super) name: kfs_plan::naming::TableName,
    /// Base offsets of the complete segments listed, per partition.
    pub(super) listing: BTreeMap<i32, BTreeSet<i64>>,
    /// Segments with open work in the ledger (pending or quarantined).
    open: HashSet<String>,
    /// The pending entries' keys, by partition and base offset.
    pending_at: BTreeMap<i32, BTreeMap<i64, String>>,
    /// Pending entries read to see which segments their runs hold (`None`: gone).
    runs: HashMap<String, Option<HeldRun>>,
    /// Whether it has pending work: pending before the pass, or converted in it.
    pub(super) has_pending: bool,
}

/// What a pending run holds: its last offset, and its members' versions by base
/// offset.
type HeldRun = (i64, HashMap<i64, String>);

/// How a pending run holds a listed segment.
enum Held {
    /// As a member, converted in this version.
    Member(String),
    /// Inside a gap the run spans (no segment was listed there when it was converted).
    InGap,
}

impl SweptTable {
    /// The sweep's view of `target`, fed by `topic`: the open work the ledger holds
    /// for it (pending and quarantined), read once per pass.
    async fn open(
        ledger: &impl Ledger,
        topic: &str,
        target: &TopicTable,
    ) -> Result<Self, PipelineError> {
        let table_name = target.name.to_string();
        let pending = ledger.work_keys("pending", &table_name).await?;
        let has_pending = !pending.is_empty();
        let mut pending_at: BTreeMap<i32, BTreeMap<i64, String>> = BTreeMap::new();
        for key in &pending {
            pending_at
                .entry(key.partition)
                .or_default()
                .insert(key.base_offset, key.segment.clone());
        }
        let mut open: HashSet<String> = pending.into_iter().map(|k| k.segment).collect();
        let quarantined = ledger.work_keys("quarantined", &table_name).await?;
        open.extend(quarantined.into_iter().map(|k| k.segment));
        Ok(Self {
            topic: topic.to_owned(),
            name: target.name.clone(),
            listing: BTreeMap::new(),
            open,
            pending_at,
            runs: HashMap::new(),
            has_pending,
        })
    }

    /// Whether the segment `key` lies inside a pending run (the run's entry, not the
    /// segment, is in the ledger): the run starting last before it, read once per
    /// pass.
    async fn run_holding(
        &mut self,
        ledger: &impl Ledger,
        key: &SegmentKey,
    ) -> Result<Option<Held>, LedgerError> {
        let Some((_, lead)) = self
            .pending_at
            .get(&key.partition)
            .and_then(|at| at.range(..key.base_offset).next_back())
        else {
            return Ok(None);
        };
        if !self.runs.contains_key(lead) {
            let run = ledger.get(lead).await?.map(|entry| {
                let members = entry
                    .members
                    .into_iter()
                    .map(|m| (m.base_offset, m.etag))
                    .collect();
                (entry.last_offset, members)
            });
            self.runs.insert(lead.clone(), run);
        }
        Ok(self.runs.get(lead).and_then(|run| {
            let (last_offset, members) = run.as_ref()?;
            if key.base_offset > *last_offset {
                return None;
            }
            // Inside the run's offsets: a segment it holds, or one in a gap it spans.
            Some(
                members
                    .get(&key.base_offset)
                    .map_or(Held::InGap, |etag| Held::Member(etag.clone())),
            )
        }))
    }
}

/// The feeds of the source and their partitions, as its directories show them
/// (`{namespace}/{topic}/{partition}/`), for the topics `shard` handles; the
/// others are counted.
async fn list_feeds(
    source: &impl SegmentSource,
    config: &PipelineConfig,
    report: &mut PassReport,
) -> Result<Vec<Feeds>, PipelineError> {
    let mut feeds = Vec::new();
    for namespace in source.list_dirs("").await? {
        for topic in source.list_dirs(&format!("{namespace}/")).await? {
            if !kfs_plan::keys::is_topic_name(&topic) {
                continue;
            }
            if !config.naming.topics.selects(&topic) {
                report.unselected_topics += 1;
                continue;
            }
            if !config.shard.owns(&topic) {
                report.other_shards += 1;
                continue;
            }
            if let Some(only) = &config.only_tables
                && !only.contains(&config.naming.table_for(&topic).to_string())
            {
                continue;
            }
            let partitions: Vec<(String, i32)> = source
                .list_dirs(&format!("{namespace}/{topic}/"))
                .await?
                .into_iter()
                .filter_map(|dir| {
                    let partition = dir.parse().ok().filter(|p: &i32| *p >= 0)?;
                    Some((dir, partition))
                })
                .collect();
            feeds.push((namespace.clone(), topic, partitions));
        }
    }
    Ok(feeds)
}

/// The feed of a listed segment.
pub(super) fn feed_of(key: &SegmentKey) -> Feed<'_> {
    Feed {
        namespace: &key.namespace,
        topic: &key.topic,
    }
}
