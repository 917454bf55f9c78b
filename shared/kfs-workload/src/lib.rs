//! Deterministic synthetic KafScale segments for demos, tests and benchmarks.
//!
//! [`generate`] yields segments lazily, in the broker's bucket layout
//! (`{ns}/{topic}/{partition}/segment-{base_offset:020}.kfs` and `.index`), with
//! realistic records: JSON order events of varying size, null and empty keys and values,
//! tombstones, binary payloads, headers with null values, LogAppendTime batches, many
//! batches per segment and occasional offset gaps between segments. The same seed
//! always gives the same bytes (the generator carries its own PRNG so that no
//! dependency upgrade can change a seed's output). It does no I/O.

use kfs_segment::{
    BatchSpec, Compression, EncodeError, EncodedSegment, OwnedRecord, SnappyFraming, encode_segment,
};

/// Which codecs the generated batches use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecChoice {
    /// Every batch with this codec (snappy uses the xerial framing).
    Single(Compression),
    /// Every batch with a codec drawn at random, both snappy framings included.
    Mixed,
}

impl std::str::FromStr for CodecChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mixed" => Ok(Self::Mixed),
            other => Compression::ALL
                .into_iter()
                .find(|c| c.name() == other)
                .map(Self::Single)
                .ok_or_else(|| {
                    format!(
                        "unknown codec {other:?}: expected none, gzip, snappy, lz4, zstd or mixed"
                    )
                }),
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadConfig {
    /// The broker's S3 namespace (first key component).
    pub namespace: String,
    /// Number of topics.
    pub topics: usize,
    /// Partitions per topic.
    pub partitions: usize,
    /// Segments per partition.
    pub segments: usize,
    /// Data records per segment.
    pub records: usize,
    /// Codec selection.
    pub codec: CodecChoice,
    /// PRNG seed.
    pub seed: u64,
    /// Mean time between a partition's records, in ms (default 20: a few seconds per
    /// segment; an hour spreads a small workload over days, for time partitioning).
    pub record_spacing_ms: u64,
    /// JSON order events of the later half of each partition's segments carry two
    /// more fields (`channel`, a string, and `shipping`, an object): a schema that
    /// grows over time. Takes nothing from the PRNG, so it changes no other byte.
    pub later_fields: bool,
    /// The keys of a keyed topic, when set: each record's key is one of `customer-0`
    /// … `customer-{keys - 1}`, each key in one partition only (key `k` in partition
    /// `k % partitions`, as a producer's partitioner places keys), so a partition's
    /// records update and delete (a null value) keys its earlier records wrote; a
    /// JSON value's `customer` is its record's key (a keyless record's, a key at
    /// random: keys updated from every partition when a mirror keys on the field).
    /// When unset, keys are drawn from 50,000 across every partition.
    pub keys: Option<u64>,
    /// The earliest a partition's clock starts, in ms since the epoch: each partition
    /// starts at a random time within the day after it (default
    /// [`DEFAULT_START_MS`], so the bytes depend on the seed alone).
    pub start_ms: i64,
}

/// 2026-01-01T00:00:00Z: where the workload's clocks start unless told otherwise.
pub const DEFAULT_START_MS: i64 = 1_767_225_600_000;

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            namespace: "default".into(),
            topics: 2,
            partitions: 2,
            segments: 3,
            records: 200,
            codec: CodecChoice::Mixed,
            seed: 42,
            record_spacing_ms: 20,
            later_fields: false,
            keys: None,
            start_ms: DEFAULT_START_MS,
        }
    }
}

/// One generated segment with its object keys.
#[derive(Debug, Clone)]
pub struct GeneratedSegment {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Object key of the `.kfs`.
    pub kfs_key: String,
    /// Object key of the `.index`.
    pub index_key: String,
    /// The encoded segment and index.
    pub segment: EncodedSegment,
    /// Number of data records.
    pub records: usize,
}

/// The object key of a segment file, as the broker writes it.
pub fn segment_key(
    namespace: &str,
    topic: &str,
    partition: i32,
    base_offset: i64,
    extension: &str,
) -> String {
    format!("{namespace}/{topic}/{partition}/segment-{base_offset:020}.{extension}")
}

const TOPIC_NAMES: [&str; 8] = [
    "orders",
    "payments",
    "clicks",
    "inventory",
    "shipments",
    "sessions",
    "audit-log",
    "metrics",
];

/// The name of topic number `i`.
pub fn topic_name(i: usize) -> String {
    TOPIC_NAMES
        .get(i)
        .map(|s| (*s).to_owned())
        .unwrap_or_else(|| format!("topic-{i}"))
}

/// SplitMix64: small, fast, and stable forever.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Generates the workload lazily, one segment at a time, partition by partition.
pub fn generate(
    config: &WorkloadConfig,
) -> impl Iterator<Item = Result<GeneratedSegment, EncodeError>> + '_ {
    let mut rng = Rng::new(config.seed);
    let partitions =
        (0..config.topics).flat_map(move |t| (0..config.partitions).map(move |p| (t, p as i32)));
    partitions.flat_map(move |(t, partition)| {
        let topic = topic_name(t);
        let mut partition_rng = Rng::new(rng.next_u64() ^ ((t as u64) << 32) ^ partition as u64);
        let mut next_offset: i64 = 0;
        let mut clock_ms: i64 = config.start_ms + partition_rng.below(86_400_000) as i64;
        (0..config.segments).map(move |index| {
            if partition_rng.chance(15) {
                next_offset += 1 + partition_rng.below(20) as i64; // a gap left by a failed upload
            }
            let later = config.later_fields && index >= config.segments / 2;
            let batches = generate_batches(
                config,
                partition,
                &mut partition_rng,
                &mut next_offset,
                &mut clock_ms,
                later,
            );
            clock_ms += 50 + partition_rng.below(2_000) as i64;
            let segment = encode_segment(&batches, clock_ms)?;
            Ok(GeneratedSegment {
                kfs_key: segment_key(
                    &config.namespace,
                    &topic,
                    partition,
                    segment.base_offset,
                    "kfs",
                ),
                index_key: segment_key(
                    &config.namespace,
                    &topic,
                    partition,
                    segment.base_offset,
                    "index",
                ),
                topic: topic.clone(),
                partition,
                records: config.records,
                segment,
            })
        })
    })
}

fn generate_batches(
    config: &WorkloadConfig,
    partition: i32,
    rng: &mut Rng,
    next_offset: &mut i64,
    clock_ms: &mut i64,
    later_fields: bool,
) -> Vec<BatchSpec> {
    let mut batches = Vec::new();
    let mut left = config.records.max(1);
    while left > 0 {
        let size = (1 + rng.below(120) as usize).min(left);
        left -= size;
        let records = (0..size)
            .map(|_| {
                *clock_ms += rng.below(config.record_spacing_ms.saturating_mul(2).max(1)) as i64;
                let offset = *next_offset;
                *next_offset += 1;
                // Producers' clocks disagree a little: some timestamps go backwards.
                let jitter = rng.below(30) as i64 - 10;
                let key = draw_key(rng, config, partition);
                let value = ValueShape {
                    later_fields,
                    keys: config.keys,
                };
                generate_record(rng, key, offset, *clock_ms + jitter, value)
            })
            .collect();
        let (compression, snappy_framing) = match config.codec {
            CodecChoice::Single(c) => (c, SnappyFraming::Xerial),
            CodecChoice::Mixed => (
                Compression::ALL[rng.below(5) as usize],
                if rng.chance(50) {
                    SnappyFraming::Xerial
                } else {
                    SnappyFraming::Raw
                },
            ),
        };
        let mut spec = BatchSpec::new(records, compression);
        spec.snappy_framing = snappy_framing;
        if rng.chance(10) {
            spec.log_append_time_ms = Some(*clock_ms + 5);
        }
        batches.push(spec);
    }
    batches
}

const WORDS: [&str; 12] = [
    "express",
    "gift",
    "fragile",
    "bulk",
    "priority",
    "return",
    "backorder",
    "digital",
    "pickup",
    "eu",
    "us",
    "apac",
];

/// A record's key in `partition`: none one time in ten, empty one in fifty, else a
/// customer's (see [`WorkloadConfig::keys`]).
fn draw_key(rng: &mut Rng, config: &WorkloadConfig, partition: i32) -> Option<Vec<u8>> {
    let customer = match rng.below(100) {
        0..10 => return None,
        10..12 => return Some(Vec::new()),
        _ => match config.keys {
            None => rng.below(50_000),
            Some(keys) => {
                // The keys `k < keys` with `k % partitions == partition`.
                let (partitions, partition) = (config.partitions.max(1) as u64, partition as u64);
                let slots = match keys > partition {
                    true => (keys - partition - 1) / partitions + 1,
                    // A partition past the keys has none: its records are keyless.
                    false => return None,
                };
                rng.below(slots) * partitions + partition
            }
        },
    };
    Some(format!("customer-{customer}").into_bytes())
}

/// What a record's JSON value holds besides its own fields.
#[derive(Clone, Copy)]
struct ValueShape {
    /// Fields that appear in the topic's later segments.
    later_fields: bool,
    /// The keyed topic's key count: `customer` names the record's key (a keyless
    /// record's, one of the keys at random), so a mirror keyed by `customer` sees
    /// keys updated from every partition.
    keys: Option<u64>,
}

fn generate_record(
    rng: &mut Rng,
    key: Option<Vec<u8>>,
    offset: i64,
    timestamp_ms: i64,
    shape: ValueShape,
) -> OwnedRecord {
    let value = match rng.below(100) {
        0..3 => None,
        3..4 => Some(Vec::new()),
        4..9 => Some(
            (0..16 + rng.below(240))
                .map(|_| rng.next_u64() as u8)
                .collect(),
        ),
        _ => Some(order_json(rng, offset, shape, key.as_deref())),
    };
    let mut headers = Vec::new();
    if rng.chance(70) {
        headers.push((
            b"trace-id".to_vec(),
            Some(format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64()).into_bytes()),
        ));
    }
    if rng.chance(40) {
        headers.push((b"content-type".to_vec(), Some(b"application/json".to_vec())));
    }
    if rng.chance(5) {
        headers.push((b"retry".to_vec(), None));
    }
    OwnedRecord {
        offset,
        timestamp_ms,
        key,
        value,
        headers,
    }
}

fn order_json(rng: &mut Rng, offset: i64, shape: ValueShape, key: Option<&[u8]>) -> Vec<u8> {
    let items = 1 + rng.below(12);
    let drawn = rng.below(50_000);
    let customer = match (shape.keys, key) {
        (None, _) => format!("c{drawn}"),
        (Some(_), Some(key)) if !key.is_empty() => String::from_utf8_lossy(key).into_owned(),
        (Some(keys), _) => format!("customer-{}", drawn % keys.max(1)),
    };
    let mut out = format!(
        "{{\"order_id\":{offset},\"customer\":\"{customer}\",\"amount\":{}.{:02},\"currency\":\"EUR\",\"items\":[",
        rng.below(2_000),
        rng.below(100)
    );
    for i in 0..items {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            "{{\"sku\":\"SKU-{:06}\",\"qty\":{},\"tag\":\"{}\"}}",
            rng.below(1_000_000),
            1 + rng.below(5),
            WORDS[rng.below(WORDS.len() as u64) as usize]
        ));
    }
    out.push(']');
    if shape.later_fields {
        out.push_str(&format!(
            ",\"channel\":\"{}\",\"shipping\":{{\"method\":\"{}\",\"days\":{}}}",
            ["web", "app", "store"][(offset % 3) as usize],
            WORDS[(offset % 4) as usize],
            1 + offset % 5
        ));
    }
    out.push('}');
    out.into_bytes()
}

/// The records of a small fixed segment, for tests and benchmarks that need exact
/// contents rather than a realistic workload: offsets `base..base + count`, timestamps
/// `1_700_000_000_000 + offset` (offset modulo 10⁹, so that offsets near `i64::MAX`
/// keep ordinary timestamps), key `k<offset>`, the value `value(offset)`, no headers.
/// Adjust the records before [`encode_records`] where a test needs other keys or
/// headers.
pub fn simple_records(
    base: i64,
    count: i64,
    value: impl Fn(i64) -> Option<Vec<u8>>,
) -> Vec<OwnedRecord> {
    (0..count)
        .map(|index| base + index)
        .map(|offset| OwnedRecord {
            offset,
            timestamp_ms: 1_700_000_000_000 + offset % 1_000_000_000,
            key: Some(format!("k{offset}").into_bytes()),
            value: value(offset),
            headers: Vec::new(),
        })
        .collect()
}

/// `records` as one segment of one batch compressed with `codec` (its `.kfs` and
/// `.index` bytes).
pub fn encode_records(
    records: Vec<OwnedRecord>,
    codec: Compression,
) -> Result<EncodedSegment, EncodeError> {
    encode_segment(&[BatchSpec::new(records, codec)], 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfs_segment::{DecodeLimits, decode_all};

    #[test]
    fn same_seed_same_bytes_and_every_segment_decodes() {
        let config = WorkloadConfig {
            records: 300,
            ..WorkloadConfig::default()
        };
        let first: Vec<_> = generate(&config)
            .map(|s| s.map(|s| s.segment.kfs))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        let again: Vec<_> = generate(&config)
            .map(|s| s.map(|s| s.segment.kfs))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        assert_eq!(first.len(), 2 * 2 * 3);
        assert_eq!(first, again);
        for kfs in &first {
            let decoded = decode_all(kfs, DecodeLimits::default());
            assert!(
                matches!(decoded, Ok((ref records, _)) if records.len() == 300),
                "{decoded:?}"
            );
        }
    }
}
