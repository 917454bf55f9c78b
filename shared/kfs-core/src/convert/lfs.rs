//! Large-file (LFS) claim checks during conversion. Each claim-check record of a raw
//! table is kept, skipped, referenced (described by the `lfs_*` columns) or resolved
//! (its blob fetched into `value`) as its topic's mode says ([`kfs_plan::lfs`]). A
//! record whose envelope does not decode (when blobs are fetched), whose blob lies
//! outside the topic's own blobs, is missing, is too large, fails a checksum or
//! carries none as strong as the operator's minimum goes to the dead-letter table
//! with the reason (`lfs_checksum_alg` says what a resolved blob was verified by); a
//! failing store (throttling, 5xx, a refused permission) fails the conversion as its
//! error says, and it is retried.
//!
//! Blobs are fetched on the async side ([`serve_blobs`]), `concurrency` at a time: the
//! decoding thread hands each claim check over as it meets it and waits only when
//! that many are in flight. Memory: at most `concurrency` blobs of at most
//! `max_inline_size` bytes, on top of the batch being built.

use super::route::{PushError, RecordRouter, Routed, RoutedRows};
use crate::source::{SegmentSource, SourceError};
use arrow_array::builder::{BooleanBuilder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, new_null_array};
use arrow_schema::FieldRef;
use futures::StreamExt;
use iceberg::table::Table;
use kfs_plan::fault::ErrorKind;
use kfs_plan::lfs::{Disposition, Envelope, LfsMode, LfsPolicy, Verified, checksum};
use kfs_segment::{OwnedRecord, Record};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// What fetching a blob found: its bytes, or why the record cannot have them (a dead
/// letter's reason); the store's error when it failed.
type BlobReply = Result<Result<bytes::Bytes, String>, SourceError>;

/// One blob to fetch.
pub(crate) struct BlobRequest {
    key: String,
    size: u64,
    reply: oneshot::Sender<BlobReply>,
}

/// The decoding thread's side of the blob fetcher.
#[derive(Clone)]
pub struct BlobClient(mpsc::Sender<BlobRequest>);

/// The fetcher's side: the requests [`serve_blobs`] answers.
pub(crate) struct BlobRequests(mpsc::Receiver<BlobRequest>);

/// A fetcher's two sides, for `concurrency` blobs in flight.
pub(crate) fn blob_channel(concurrency: usize) -> (BlobClient, BlobRequests) {
    let (sender, receiver) = mpsc::channel(concurrency.max(1));
    (BlobClient(sender), BlobRequests(receiver))
}

/// Answers `requests` from `source`, `concurrency` at a time, until every
/// [`BlobClient`] is dropped (the conversion ended).
pub(crate) async fn serve_blobs(
    source: &impl SegmentSource,
    requests: BlobRequests,
    concurrency: usize,
) {
    let mut receiver = requests.0;
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
        .for_each_concurrent(concurrency.max(1), |request| async move {
            let reply = fetch_blob(source, &request.key, request.size).await;
            // The conversion may have failed and gone: nobody waits.
            let _ = request.reply.send(reply);
        })
        .await;
}

/// The blob at `key`, which its envelope says holds `size` bytes: never more than that
/// is read.
async fn fetch_blob(source: &impl SegmentSource, key: &str, size: u64) -> BlobReply {
    let location = source.describe(key);
    let Some(object) = source.stat(key).await? else {
        return Ok(Err(format!("LFS blob {location} does not exist")));
    };
    let wrong_size = |found: u64| {
        Ok(Err(format!(
            "LFS blob {location} has {found} bytes, its envelope says {size}"
        )))
    };
    if object.size != size {
        return wrong_size(object.size);
    }
    let mut stream = source.open(key, object.etag.as_deref()).await?;
    let mut body = bytes::BytesMut::with_capacity(usize::try_from(size).unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if (body.len() + chunk.len()) as u64 > size {
            return wrong_size((body.len() + chunk.len()) as u64);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body.freeze()))
}

/// A claim check whose blob is being fetched.
struct InFlight {
    topic: String,
    partition: i32,
    record: OwnedRecord,
    envelope: Envelope,
    reply: oneshot::Receiver<BlobReply>,
}

/// How a claim check's row describes its blob.
#[derive(Clone, Copy)]
enum Described<'a> {
    /// The value holds the blob, verified so.
    Resolved(&'a Verified),
    /// The value is the envelope.
    Referenced,
}

/// The `lfs_*` columns being built.
struct BlobColumns {
    resolved: BooleanBuilder,
    bucket: StringBuilder,
    key: StringBuilder,
    size: Int64Builder,
    checksum: StringBuilder,
    checksum_alg: StringBuilder,
    content_type: StringBuilder,
}

impl BlobColumns {
    fn new() -> Self {
        Self {
            resolved: BooleanBuilder::new(),
            bucket: StringBuilder::new(),
            key: StringBuilder::new(),
            size: Int64Builder::new(),
            checksum: StringBuilder::new(),
            checksum_alg: StringBuilder::new(),
            content_type: StringBuilder::new(),
        }
    }

    /// Appends the description of a claim check's blob, or nulls for a record that is
    /// none. A resolved blob (the value holds it) is described by the checksum it was
    /// verified by (`none` and no checksum when the policy verifies none); a
    /// referenced one by the strongest checksum its envelope carries, unverified.
    fn append(&mut self, blob: Option<(&Envelope, Described)>) {
        let (checksum, checksum_alg) = match blob {
            Some((_, Described::Resolved(verified))) => {
                (verified.checksum.as_deref(), Some(verified.alg.name()))
            }
            Some((e, Described::Referenced)) => match checksum::claims(e).ok().as_deref() {
                Some([(alg, sum), ..]) => (Some(*sum), Some(alg.name())),
                _ => (None, None),
            },
            None => (None, None),
        };
        self.resolved
            .append_option(blob.map(|(_, described)| matches!(described, Described::Resolved(_))));
        self.bucket.append_option(blob.map(|(e, _)| &e.bucket));
        self.key.append_option(blob.map(|(e, _)| &e.key));
        self.size
            .append_option(blob.map(|(e, _)| i64::try_from(e.size).unwrap_or(i64::MAX)));
        self.checksum.append_option(checksum);
        self.checksum_alg.append_option(checksum_alg);
        self.content_type
            .append_option(blob.and_then(|(e, _)| e.content_type.as_deref()));
    }

    /// The columns for `fields` (the table's columns after the record columns), by
    /// name; nulls for a column this does not know.
    fn finish(&mut self, fields: &[FieldRef], rows: usize) -> Vec<ArrayRef> {
        let mut columns: HashMap<&str, ArrayRef> = HashMap::from([
            ("lfs_resolved", Arc::new(self.resolved.finish()) as ArrayRef),
            ("lfs_bucket", Arc::new(self.bucket.finish())),
            ("lfs_key", Arc::new(self.key.finish())),
            ("lfs_blob_size", Arc::new(self.size.finish())),
            ("lfs_checksum", Arc::new(self.checksum.finish())),
            ("lfs_checksum_alg", Arc::new(self.checksum_alg.finish())),
            ("lfs_content_type", Arc::new(self.content_type.finish())),
        ]);
        fields
            .iter()
            .map(|field| {
                columns
                    .remove(field.name().as_str())
                    .unwrap_or_else(|| new_null_array(field.data_type(), rows))
            })
            .collect()
    }
}

/// Raw values with claim checks handled by their topic's mode (see the module).
pub(crate) struct LfsRouter {
    policy: LfsPolicy,
    namespace: String,
    out: RoutedRows,
    /// The table's columns after the record columns (its `lfs_*` columns), and their
    /// builders.
    described: Option<(Vec<FieldRef>, BlobColumns)>,
    blobs: Option<BlobClient>,
    in_flight: VecDeque<InFlight>,
    in_flight_bytes: usize,
    skipped: u64,
}

/// What an [`LfsRouter`] works with.
pub struct LfsValues<'a> {
    /// The topic's policy.
    pub policy: LfsPolicy,
    /// The segment's namespace (blobs are read under `{namespace}/{topic}/lfs/`).
    pub namespace: String,
    /// The blob fetcher, when blobs are fetched.
    pub blobs: Option<BlobClient>,
    /// The dead-letter table, when blobs are fetched.
    pub dead_letters: Option<&'a Table>,
}

impl LfsRouter {
    pub(crate) fn new(
        table: &Table,
        values: LfsValues<'_>,
        segment: String,
    ) -> iceberg::Result<Self> {
        let schema = crate::table::arrow_schema(table.metadata().current_schema())?;
        let extra: Vec<FieldRef> = schema
            .fields()
            .iter()
            .filter(|f| {
                crate::table::LFS_COLUMNS
                    .iter()
                    .any(|(name, _)| name == f.name())
            })
            .cloned()
            .collect();
        Ok(Self {
            described: (!extra.is_empty()).then(|| (extra, BlobColumns::new())),
            out: RoutedRows::new(schema, values.dead_letters, segment)?,
            policy: values.policy,
            namespace: values.namespace,
            blobs: values.blobs,
            in_flight: VecDeque::new(),
            in_flight_bytes: 0,
            skipped: 0,
        })
    }

    /// Writes `record` to the table, with the description of its blob, if any.
    fn write(
        &mut self,
        topic: &str,
        partition: i32,
        record: &Record<'_>,
        blob: Option<(&Envelope, Described<'_>)>,
    ) -> Result<(), PushError> {
        self.out.table.push(topic, partition, record)?;
        if let Some((_, columns)) = &mut self.described {
            columns.append(blob);
        }
        Ok(())
    }

    /// Writes `record` to the dead-letter table, refused for `reason`.
    fn refuse(
        &mut self,
        topic: &str,
        partition: i32,
        record: &Record<'_>,
        reason: &str,
    ) -> Result<(), PushError> {
        self.out.refuse((topic, partition), record, reason)
    }

    /// Waits for the oldest blob in flight and routes its record.
    fn settle_oldest(&mut self) -> Result<(), PushError> {
        let Some(waiting) = self.in_flight.pop_front() else {
            return Ok(());
        };
        self.in_flight_bytes = self
            .in_flight_bytes
            .saturating_sub(usize::try_from(waiting.envelope.size).unwrap_or(usize::MAX));
        let InFlight {
            topic,
            partition,
            record,
            envelope,
            reply,
        } = waiting;
        let fetched = reply.blocking_recv().map_err(|_| {
            PushError::Source(SourceError {
                location: envelope.key.clone(),
                message: "the blob fetcher stopped before answering".into(),
                kind: ErrorKind::Transient,
            })
        })?;
        let checked = fetched.map_err(PushError::Source)?.and_then(|blob| {
            kfs_plan::lfs::verify_blob(&envelope, &blob, self.policy.min_checksum)
                .map(|verified| (blob, verified))
        });
        match checked {
            Ok((blob, verified)) => self.write(
                &topic,
                partition,
                &record.with_value(Some(&blob)),
                Some((&envelope, Described::Resolved(&verified))),
            ),
            Err(reason) => self.refuse(
                &topic,
                partition,
                &record.with_value(record.value.as_deref()),
                &reason,
            ),
        }
    }
}

impl RecordRouter for LfsRouter {
    fn push(&mut self, topic: &str, partition: i32, record: &Record<'_>) -> Result<(), PushError> {
        let mode = self.policy.mode;
        let Some(value) = record
            .value
            .filter(|value| mode != LfsMode::Off && kfs_plan::lfs::is_envelope(value))
        else {
            return self.write(topic, partition, record, None);
        };
        let envelope = match kfs_plan::lfs::parse_envelope(value) {
            Ok(envelope) => envelope,
            // Its blob cannot be fetched: a dead letter. Where none is fetched, the
            // record is written as it came (it is no claim check).
            Err(reason) if mode.fetches() => {
                return self.refuse(topic, partition, record, &reason);
            }
            Err(_) => return self.write(topic, partition, record, None),
        };
        let disposition =
            match kfs_plan::lfs::disposition(mode, self.policy.max_inline_size, &envelope) {
                Ok(disposition) => disposition,
                Err(reason) => return self.refuse(topic, partition, record, &reason),
            };
        match disposition {
            Disposition::Keep => self.write(topic, partition, record, None),
            Disposition::Skip => {
                self.skipped += 1;
                Ok(())
            }
            Disposition::Reference => self.write(
                topic,
                partition,
                record,
                Some((&envelope, Described::Referenced)),
            ),
            Disposition::Resolve => {
                let key = match kfs_plan::lfs::blob_key(
                    &self.policy.origin,
                    &self.namespace,
                    topic,
                    &envelope,
                ) {
                    Ok(key) => key,
                    Err(reason) => return self.refuse(topic, partition, record, &reason),
                };
                let Some(blobs) = &self.blobs else {
                    return Err("LFS blobs are resolved, and no blob reader was opened"
                        .to_owned()
                        .into());
                };
                let (reply, answer) = oneshot::channel();
                let request = BlobRequest {
                    key,
                    size: envelope.size,
                    reply,
                };
                blobs.0.blocking_send(request).map_err(|_| {
                    PushError::Source(SourceError {
                        location: envelope.key.clone(),
                        message: "the blob fetcher stopped".into(),
                        kind: ErrorKind::Transient,
                    })
                })?;
                self.in_flight_bytes += usize::try_from(envelope.size).unwrap_or(usize::MAX);
                self.in_flight.push_back(InFlight {
                    topic: topic.to_owned(),
                    partition,
                    record: OwnedRecord::from_record(record),
                    envelope,
                    reply: answer,
                });
                if self.in_flight.len() >= self.policy.concurrency {
                    self.settle_oldest()?;
                }
                Ok(())
            }
        }
    }

    fn settle(&mut self) -> Result<(), PushError> {
        while !self.in_flight.is_empty() {
            self.settle_oldest()?;
        }
        Ok(())
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }

    fn rows(&self) -> usize {
        self.out.rows(self.in_flight.len())
    }

    fn bytes(&self) -> usize {
        self.out.bytes(self.in_flight_bytes)
    }

    fn flush(&mut self) -> iceberg::Result<Vec<Routed>> {
        let rows = self.out.table.rows();
        self.out.flush(|| {
            Ok(match &mut self.described {
                Some((fields, columns)) => columns.finish(fields, rows),
                None => Vec::new(),
            })
        })
    }

    fn dead_letters(&self) -> u64 {
        self.out.dead_letters()
    }
}
