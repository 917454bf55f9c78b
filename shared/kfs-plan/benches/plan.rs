//! Planning cost over many pending files: the commit planner and the compaction
//! planner, pure functions with no I/O. Run with `cargo bench -p kfs-plan --bench plan`.
//!
//! - `commit/<n>`: `n` pending segments over 16 partitions, every one committable.
//! - `compaction/<n>`: `n` small committed files over 16 partitions, packed into groups.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kfs_plan::commit::{PendingSegment, PlanInput, plan_commit};
use kfs_plan::compaction::{CompactionPolicy, FileStat, plan_compaction};
use kfs_plan::offsets::OffsetMap;

const PARTITIONS: i32 = 16;
const RECORDS_PER_SEGMENT: i64 = 100;

fn pending(n: usize) -> Vec<PendingSegment> {
    (0..n)
        .map(|i| {
            let partition = i as i32 % PARTITIONS;
            let base_offset = (i as i64 / i64::from(PARTITIONS)) * RECORDS_PER_SEGMENT;
            PendingSegment {
                id: format!("ns/topic/{partition}/segment-{base_offset:020}.kfs"),
                partition,
                base_offset,
                last_offset: base_offset + RECORDS_PER_SEGMENT - 1,
                records: RECORDS_PER_SEGMENT as u64,
                segments: 1,
                inner_gaps: Vec::new(),
            }
        })
        .rev()
        .collect()
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    for n in [1_000usize, 10_000] {
        let segments = pending(n);
        let mut listing: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
        for segment in &segments {
            listing
                .entry(segment.partition)
                .or_default()
                .insert(segment.base_offset);
        }
        let watermarks: OffsetMap = (0..PARTITIONS).map(|p| (p, 0)).collect();
        let start_offsets = BTreeMap::new();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("commit", n), &segments, |b, segments| {
            b.iter(|| {
                let plan = plan_commit(&PlanInput {
                    topic: "topic",
                    watermarks: &watermarks,
                    pending: segments,
                    listing: &listing,
                    starts: &Default::default(),
                    start_offsets: &start_offsets,
                    max_segments: usize::MAX,
                    skipped: &BTreeMap::new(),
                });
                black_box(plan.take.len())
            })
        });
        let files: Vec<FileStat> = segments
            .iter()
            .map(|s| FileStat {
                path: format!("s3://warehouse/t/data/{}.parquet", s.id),
                bytes: 200_000,
                partition: s.partition.to_string(),
                order: format!("{:020}", s.base_offset),
                deleted_rows: 0,
            })
            .collect();
        let policy = CompactionPolicy::for_target(512 << 20);
        group.bench_with_input(BenchmarkId::new("compaction", n), &files, |b, files| {
            b.iter(|| black_box(plan_compaction(files, &policy).len()))
        });
    }
    group.finish();
}

mod harness {
    //! criterion's generated entry points.
    #![allow(missing_docs)]
    use super::{benches, criterion_group};
    criterion_group!(plan, benches);
}

criterion_main!(harness::plan);
