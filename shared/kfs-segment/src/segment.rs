//! The `.kfs` segment: header, batch frames, footer, and the batch-by-batch decoder.
//!
//! [`SegmentDecoder`] yields one verified [`Batch`] at a time, so memory is bounded by
//! one batch, not by the segment. It reads either from a byte slice
//! ([`SegmentDecoder::from_slice`], zero-copy for uncompressed batches) or from any
//! [`std::io::Read`] ([`SegmentDecoder::from_reader`], e.g. a file or an S3 body).
//! Once [`SegmentDecoder::next_batch`] returns `Ok(None)`, the whole segment has been
//! verified: header, every batch, footer, body CRC, message count and last offset.

use std::io::BufRead;

use crate::batch::{Batch, BatchHeader, Record, decode_batch, open_batch};
use crate::envelope::{SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN, SegmentFooter, SegmentHeader};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::frames::{Frame, FrameSource, ReadFrames, SliceFrames};
use crate::limits::DecodeLimits;

/// What a fully verified segment contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    /// The segment header.
    pub header: SegmentHeader,
    /// The verified footer.
    pub footer: SegmentFooter,
    /// Number of batches, control batches included.
    pub batches: u64,
    /// Number of data records.
    pub records: u64,
    /// Number of control batches (transaction markers, not data).
    pub control_batches: u64,
    /// Number of records inside control batches.
    pub control_records: u64,
    /// Offset of the first data record, if any.
    pub first_offset: Option<i64>,
    /// Offset of the last record of the last batch.
    pub last_offset: i64,
    /// Total size of the segment file.
    pub file_bytes: u64,
}

/// Running checks across the batches of one segment.
#[derive(Debug, Clone, Default)]
struct Progress {
    batches: u64,
    records: u64,
    declared_messages: i64,
    control_batches: u64,
    control_records: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
}

/// Decodes a segment one verified batch at a time.
#[derive(Debug)]
pub struct SegmentDecoder<S> {
    source: S,
    header: SegmentHeader,
    limits: DecodeLimits,
    scratch: Vec<u8>,
    progress: Progress,
    summary: Option<SegmentSummary>,
}

impl<'a> SegmentDecoder<SliceFrames<'a>> {
    /// Starts decoding a segment held in memory. The header, footer and body CRC are
    /// verified before this returns; uncompressed records borrow from `data`.
    pub fn from_slice(data: &'a [u8], limits: DecodeLimits) -> Result<Self, DecodeError> {
        let header_bytes = data.get(..SEGMENT_HEADER_LEN).unwrap_or(data);
        let header = SegmentHeader::parse(header_bytes)?;
        Ok(Self::with_source(SliceFrames::new(data)?, header, limits))
    }
}

impl<R: BufRead> SegmentDecoder<ReadFrames<R>> {
    /// Starts decoding a segment from a buffered reader (wrap others in a `BufReader`);
    /// a batch that lies whole in the reader's buffer is decoded where it lies. The
    /// header is verified now; the body CRC and footer once the last batch has been
    /// read.
    pub fn from_reader(mut reader: R, limits: DecodeLimits) -> Result<Self, DecodeError> {
        let mut header_bytes = [0u8; SEGMENT_HEADER_LEN];
        let got = ReadFrames::fill(&mut reader, &mut header_bytes)?;
        let header = SegmentHeader::parse(&header_bytes[..got])?;
        let source = ReadFrames::after_header(reader);
        Ok(Self::with_source(source, header, limits))
    }
}

impl<S: FrameSource> SegmentDecoder<S> {
    fn with_source(source: S, header: SegmentHeader, limits: DecodeLimits) -> Self {
        Self {
            source,
            header,
            limits,
            scratch: Vec::new(),
            progress: Progress::default(),
            summary: None,
        }
    }

    /// The verified segment header.
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// The summary of the whole segment, available once `next_batch` returned `Ok(None)`.
    pub fn summary(&self) -> Option<&SegmentSummary> {
        self.summary.as_ref()
    }

    /// Decodes the next batch (control batches included, with no records), or returns
    /// `None` once the footer and all segment-level checks have passed.
    pub fn next_batch(&mut self) -> Result<Option<Batch<'_>>, DecodeError> {
        match self.step()? {
            Step::Batch(batch) => Ok(Some(batch)),
            Step::End(_) => Ok(None),
        }
    }

    /// Decodes the rest of the segment, calling `each` on every batch, and returns the
    /// verified summary.
    pub fn for_each_batch<E: From<DecodeError>>(
        &mut self,
        mut each: impl FnMut(&Batch<'_>) -> Result<(), E>,
    ) -> Result<SegmentSummary, E> {
        loop {
            match self.step()? {
                Step::Batch(batch) => each(&batch)?,
                Step::End(summary) => return Ok(summary),
            }
        }
    }

    /// Decodes the next batch, handing each of its data records to `each` as soon as it
    /// is decoded, without building a list of them: memory stays at the batch's own
    /// bytes whatever its record count (a 256 MiB batch holds 30 million 8-byte
    /// tombstones). `each` returns `false` to stop; the decoder is then done with the
    /// segment and must not be called again. Returns the batch's header, or `None` once
    /// the footer and all segment-level checks have passed.
    ///
    /// A record is handed before the rest of its batch is checked: when this returns
    /// an error, discard everything handed for the segment.
    pub fn next_batch_each(
        &mut self,
        mut each: impl FnMut(&Record<'_>) -> bool,
    ) -> Result<Option<BatchHeader>, DecodeError> {
        if self.summary.is_some() {
            return Ok(None);
        }
        let (position, bytes) = match self.source.next_frame(&self.limits)? {
            Frame::Batch { position, bytes } => (position, bytes),
            Frame::End { footer, file_bytes } => {
                let summary = finish(&self.header, &self.progress, footer, file_bytes)?;
                self.summary = Some(summary);
                return Ok(None);
            }
        };
        let open = open_batch(bytes, position, &self.limits, &mut self.scratch)?;
        let header = open.header;
        let control = header.is_control();
        let visited = open.visit(|record| control || each(record))?;
        if !visited.stopped {
            let facts = BatchFacts {
                position,
                header,
                records: if control { 0 } else { visited.records },
                first_offset: if control { None } else { visited.first_offset },
            };
            track(&self.header, &mut self.progress, &facts)?;
        }
        Ok(Some(header))
    }

    fn step(&mut self) -> Result<Step<'_>, DecodeError> {
        if let Some(summary) = self.summary {
            return Ok(Step::End(summary));
        }
        let (position, bytes) = match self.source.next_frame(&self.limits)? {
            Frame::Batch { position, bytes } => (position, bytes),
            Frame::End { footer, file_bytes } => {
                let summary = finish(&self.header, &self.progress, footer, file_bytes)?;
                self.summary = Some(summary);
                return Ok(Step::End(summary));
            }
        };
        let batch = decode_batch(bytes, position, &self.limits, &mut self.scratch)?;
        let facts = BatchFacts {
            position: batch.position,
            header: batch.header,
            records: batch.records.len() as u64,
            first_offset: batch.records.first().map(|r| r.offset),
        };
        track(&self.header, &mut self.progress, &facts)?;
        Ok(Step::Batch(batch))
    }
}

/// One step of decoding: a batch, or the end with the verified summary.
enum Step<'a> {
    Batch(Batch<'a>),
    End(SegmentSummary),
}

/// What the segment-level checks need of one decoded batch.
struct BatchFacts {
    /// Absolute position of the batch.
    position: u64,
    /// Its header.
    header: BatchHeader,
    /// Data records decoded (none for a control batch).
    records: u64,
    /// Offset of its first data record.
    first_offset: Option<i64>,
}

/// Checks one batch against the segment so far and records it.
fn track(
    header: &SegmentHeader,
    progress: &mut Progress,
    batch: &BatchFacts,
) -> Result<(), DecodeError> {
    let base = batch.header.base_offset;
    let fail = |at: u64, kind| DecodeError::at(batch.position + at, kind).in_batch(base);
    match progress.last_offset {
        None if base != header.base_offset => {
            return Err(fail(
                0,
                DecodeErrorKind::HeaderMismatch {
                    header: format!("base offset {}", header.base_offset),
                    found: format!("a first batch at offset {base}"),
                },
            ));
        }
        Some(previous) if base <= previous => {
            return Err(fail(
                0,
                DecodeErrorKind::OffsetNotIncreasing {
                    offset: base,
                    previous,
                },
            ));
        }
        _ => {}
    }
    // decode_batch has verified that last_offset does not overflow.
    progress.last_offset = batch.header.last_offset();
    progress.batches += 1;
    progress.declared_messages += i64::from(batch.header.record_count);
    if batch.header.is_control() {
        progress.control_batches += 1;
        progress.control_records += batch.header.record_count as u64;
    } else {
        progress.records += batch.records;
        if progress.first_offset.is_none() {
            progress.first_offset = batch.first_offset;
        }
    }
    Ok(())
}

/// Segment-level checks once the footer is reached.
fn finish(
    header: &SegmentHeader,
    progress: &Progress,
    footer: SegmentFooter,
    file_bytes: u64,
) -> Result<SegmentSummary, DecodeError> {
    let footer_at = file_bytes - SEGMENT_FOOTER_LEN as u64;
    let Some(last_offset) = progress.last_offset else {
        return Err(DecodeError::at(
            SEGMENT_HEADER_LEN as u64,
            DecodeErrorKind::HeaderMismatch {
                header: format!("{} messages", header.message_count),
                found: "no batch".into(),
            },
        ));
    };
    if progress.declared_messages != i64::from(header.message_count) {
        return Err(DecodeError::at(
            16,
            DecodeErrorKind::HeaderMismatch {
                header: format!("{} messages", header.message_count),
                found: format!("{} records in its batches", progress.declared_messages),
            },
        ));
    }
    if footer.last_offset != last_offset {
        return Err(DecodeError::at(
            footer_at + 4,
            DecodeErrorKind::FooterLastOffset {
                footer: footer.last_offset,
                decoded: last_offset,
            },
        ));
    }
    Ok(SegmentSummary {
        header: *header,
        footer,
        batches: progress.batches,
        records: progress.records,
        control_batches: progress.control_batches,
        control_records: progress.control_records,
        first_offset: progress.first_offset,
        last_offset,
        file_bytes,
    })
}
