//! The `.kfs` segment: header, batch frames, footer, and the batch-by-batch decoder.
//!
//! [`SegmentDecoder`] yields one verified [`Batch`] at a time, so memory is bounded by
//! one batch, not by the segment. It reads either from a byte slice
//! ([`SegmentDecoder::from_slice`], zero-copy for uncompressed batches) or from any
//! [`std::io::Read`] ([`SegmentDecoder::from_reader`], e.g. a file or an S3 body).
//! Once [`SegmentDecoder::next_batch`] returns `Ok(None)`, the whole segment has been
//! verified: header, every batch, footer, body CRC, message count and last offset.

use std::io::{BufRead, Read};

use crate::batch::{
    BATCH_HEADER_LEN, BATCH_LENGTH_PREFIX, Batch, BatchHeader, MIN_BATCH_LENGTH, Record,
    decode_batch, open_batch,
};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::limits::DecodeLimits;
use crate::wire::Cursor;

/// Segment header magic, `KAFS`.
pub const SEGMENT_MAGIC: [u8; 4] = *b"KAFS";
/// Segment footer magic, `END!`.
pub const FOOTER_MAGIC: [u8; 4] = *b"END!";
/// Size of the segment header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Size of the segment footer.
pub const SEGMENT_FOOTER_LEN: usize = 16;

/// The 32-byte header of a `.kfs` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Format version (1).
    pub version: u16,
    /// Flags (0).
    pub flags: u16,
    /// Base offset of the first batch.
    pub base_offset: i64,
    /// Sum of the batches' record counts.
    pub message_count: i32,
    /// Flush time, Unix milliseconds.
    pub created_ms: i64,
}

impl SegmentHeader {
    /// Parses and checks magic, version and flags.
    pub fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(bytes, 0);
        let magic = cur.magic("segment header")?;
        if magic != SEGMENT_MAGIC {
            return Err(DecodeError::at(
                0,
                DecodeErrorKind::BadMagic {
                    what: "segment header",
                    expected: SEGMENT_MAGIC,
                    found: magic,
                },
            ));
        }
        let version = cur.u16("segment header")?;
        if version != 1 {
            return Err(DecodeError::at(
                4,
                DecodeErrorKind::UnsupportedVersion {
                    what: "segment",
                    found: version,
                },
            ));
        }
        let flags = cur.u16("segment header")?;
        if flags != 0 {
            return Err(DecodeError::at(6, DecodeErrorKind::UnsupportedFlags(flags)));
        }
        let base_offset = cur.i64("segment header")?;
        let message_count = cur.i32("segment header")?;
        let created_ms = cur.i64("segment header")?;
        let _reserved = cur.u32("segment header")?;
        Ok(Self {
            version,
            flags,
            base_offset,
            message_count,
            created_ms,
        })
    }
}

/// The 16-byte footer of a `.kfs` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFooter {
    /// CRC-32C of the body.
    pub body_crc: u32,
    /// Offset of the last record.
    pub last_offset: i64,
}

impl SegmentFooter {
    /// Parses the footer that starts at absolute `position`, checking its magic.
    fn parse(bytes: &[u8], position: u64) -> Result<Self, DecodeError> {
        let mut cur = Cursor::new(bytes, position);
        let body_crc = cur.u32("segment footer")?;
        let last_offset = cur.i64("segment footer")?;
        let magic = cur.magic("segment footer")?;
        if magic != FOOTER_MAGIC {
            return Err(DecodeError::at(
                position + 12,
                DecodeErrorKind::BadMagic {
                    what: "segment footer",
                    expected: FOOTER_MAGIC,
                    found: magic,
                },
            ));
        }
        Ok(Self {
            body_crc,
            last_offset,
        })
    }
}

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

/// Where batch frames come from: a slice or a reader.
pub trait FrameSource {
    /// Returns the next frame and its absolute position, or `None` with the footer
    /// once the body is exhausted and its CRC verified.
    fn next_frame(&mut self, limits: &DecodeLimits) -> Result<Frame<'_>, DecodeError>;
}

/// One step of a [`FrameSource`].
#[derive(Debug)]
pub enum Frame<'a> {
    /// A whole batch frame starting at `position`.
    Batch {
        /// Absolute position of the frame.
        position: u64,
        /// The frame bytes (`12 + batchLength`).
        bytes: &'a [u8],
    },
    /// The body has ended; the footer has been parsed and the body CRC verified.
    End {
        /// The footer.
        footer: SegmentFooter,
        /// Total bytes in the file.
        file_bytes: u64,
    },
}

/// The length of the frame whose first bytes (`baseOffset`, then `batchLength`) are
/// `prefix`, checked against the format minimum, the limits and the bytes left.
fn declared_frame_len(
    prefix: &[u8],
    position: u64,
    remaining_after_prefix: Option<u64>,
    limits: &DecodeLimits,
) -> Result<u64, DecodeError> {
    let mut cur = Cursor::new(prefix, position);
    let _base_offset = cur.i64("batch header")?;
    let length = cur.i32("batch header")?;
    let error = |reason: String| {
        DecodeError::at(
            position + 8,
            DecodeErrorKind::BatchLength {
                length: i64::from(length),
                reason,
            },
        )
    };
    if length < MIN_BATCH_LENGTH {
        return Err(error(format!(
            "below the {MIN_BATCH_LENGTH}-byte minimum of a batch header"
        )));
    }
    let frame_len = BATCH_LENGTH_PREFIX as u64 + length as u64;
    if frame_len > limits.max_batch_bytes {
        return Err(error(format!(
            "frame exceeds the limit of {} bytes",
            limits.max_batch_bytes
        )));
    }
    if let Some(remaining) = remaining_after_prefix
        && length as u64 > remaining
    {
        return Err(error(format!(
            "only {remaining} bytes remain before the footer"
        )));
    }
    Ok(frame_len)
}

/// Frames of a segment held in memory; the body CRC and footer are checked up front.
#[derive(Debug)]
pub struct SliceFrames<'a> {
    data: &'a [u8],
    pos: usize,
    body_end: usize,
    footer: SegmentFooter,
}

impl<'a> SliceFrames<'a> {
    fn new(data: &'a [u8]) -> Result<Self, DecodeError> {
        let min = SEGMENT_HEADER_LEN + SEGMENT_FOOTER_LEN;
        if data.len() < min {
            return Err(DecodeError::at(
                data.len() as u64,
                DecodeErrorKind::Truncated {
                    what: "segment (header and footer)",
                    needed: min as u64,
                    available: data.len() as u64,
                },
            ));
        }
        let body_end = data.len() - SEGMENT_FOOTER_LEN;
        let footer = SegmentFooter::parse(&data[body_end..], body_end as u64)?;
        let computed = crc32c::crc32c(&data[SEGMENT_HEADER_LEN..body_end]);
        if computed != footer.body_crc {
            return Err(DecodeError::at(
                body_end as u64,
                DecodeErrorKind::BodyCrc {
                    stored: footer.body_crc,
                    computed,
                },
            ));
        }
        Ok(Self {
            data,
            pos: SEGMENT_HEADER_LEN,
            body_end,
            footer,
        })
    }
}

impl FrameSource for SliceFrames<'_> {
    fn next_frame(&mut self, limits: &DecodeLimits) -> Result<Frame<'_>, DecodeError> {
        let remaining = (self.body_end - self.pos) as u64;
        let position = self.pos as u64;
        if remaining == 0 {
            return Ok(Frame::End {
                footer: self.footer,
                file_bytes: self.data.len() as u64,
            });
        }
        if remaining < BATCH_HEADER_LEN as u64 {
            return Err(DecodeError::at(
                position,
                DecodeErrorKind::StrayBodyBytes { count: remaining },
            ));
        }
        let frame_len = declared_frame_len(
            &self.data[self.pos..self.body_end],
            position,
            Some(remaining - BATCH_LENGTH_PREFIX as u64),
            limits,
        )? as usize;
        let bytes = &self.data[self.pos..self.pos + frame_len];
        self.pos += frame_len;
        Ok(Frame::Batch { position, bytes })
    }
}

/// Frames read one at a time from a buffered reader: memory is one frame, and the body
/// CRC is accumulated as frames pass. A frame that lies whole in the reader's buffer
/// (a stream's chunk, a `BufReader`'s buffer) is handed out where it lies, not copied;
/// one that spans buffers is gathered into a frame of its own.
///
/// The footer is recognised as the last 16 bytes before end of input: the source
/// keeps 16 bytes of look-ahead and treats them as the footer once nothing follows.
#[derive(Debug)]
pub struct ReadFrames<R> {
    reader: R,
    /// Absolute position of `lookahead[0]`.
    position: u64,
    lookahead: [u8; SEGMENT_FOOTER_LEN],
    frame: Vec<u8>,
    body_crc: u32,
    /// Bytes of the reader's buffer handed out as the last frame, consumed when the
    /// next one is asked for.
    lent: usize,
}

impl<R: BufRead> ReadFrames<R> {
    /// The length of the frame at the start of the reader's buffer when the buffer
    /// holds all of it and more than a footer's bytes (so it cannot be the footer);
    /// `None` when the frame must be gathered.
    fn whole_in_buffer(&mut self, limits: &DecodeLimits) -> Result<Option<usize>, DecodeError> {
        let position = self.position;
        let buffered = self
            .reader
            .fill_buf()
            .map_err(|e| DecodeError::at(position, DecodeErrorKind::Io(e)))?;
        if buffered.len() <= SEGMENT_FOOTER_LEN {
            return Ok(None);
        }
        let frame_len = declared_frame_len(buffered, position, None, limits)?;
        Ok(usize::try_from(frame_len)
            .ok()
            .filter(|len| *len <= buffered.len()))
    }

    /// Reads into `buf` until it is full or the input ends; returns the bytes read.
    fn fill(reader: &mut R, buf: &mut [u8]) -> Result<usize, DecodeError> {
        let mut filled = 0;
        while filled < buf.len() {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(DecodeError::at(0, DecodeErrorKind::Io(e))),
            }
        }
        Ok(filled)
    }
}

impl<R: BufRead> FrameSource for ReadFrames<R> {
    fn next_frame(&mut self, limits: &DecodeLimits) -> Result<Frame<'_>, DecodeError> {
        self.reader.consume(std::mem::take(&mut self.lent));
        let position = self.position;
        if let Some(frame_len) = self.whole_in_buffer(limits)? {
            // Still buffered: `fill_buf` reads nothing while the buffer is not consumed.
            let buffered = self
                .reader
                .fill_buf()
                .map_err(|e| DecodeError::at(position, DecodeErrorKind::Io(e)))?;
            let bytes = buffered.get(..frame_len).ok_or_else(|| {
                DecodeError::at(
                    position,
                    DecodeErrorKind::Io(std::io::Error::other(
                        "the reader's buffer shrank without being consumed",
                    )),
                )
            })?;
            self.body_crc = crc32c::crc32c_append(self.body_crc, bytes);
            self.position += frame_len as u64;
            self.lent = frame_len;
            return Ok(Frame::Batch { position, bytes });
        }
        let at = |e: DecodeError| DecodeError { position, ..e };
        let got = Self::fill(&mut self.reader, &mut self.lookahead).map_err(at)?;
        if got < SEGMENT_FOOTER_LEN {
            return Err(DecodeError::at(
                position + got as u64,
                DecodeErrorKind::Truncated {
                    what: "segment footer or next batch",
                    needed: SEGMENT_FOOTER_LEN as u64,
                    available: got as u64,
                },
            ));
        }
        let mut probe = [0u8; 1];
        if Self::fill(&mut self.reader, &mut probe).map_err(at)? == 0 {
            let footer = SegmentFooter::parse(&self.lookahead, position)?;
            if footer.body_crc != self.body_crc {
                return Err(DecodeError::at(
                    position,
                    DecodeErrorKind::BodyCrc {
                        stored: footer.body_crc,
                        computed: self.body_crc,
                    },
                ));
            }
            return Ok(Frame::End {
                footer,
                file_bytes: position + SEGMENT_FOOTER_LEN as u64,
            });
        }
        let frame_len = declared_frame_len(&self.lookahead, position, None, limits)?;
        self.frame.clear();
        self.frame.extend_from_slice(&self.lookahead);
        self.frame.push(probe[0]);
        // Grows with the bytes actually read, never with the declared length.
        let rest = frame_len - self.frame.len() as u64;
        let read = (&mut self.reader)
            .take(rest)
            .read_to_end(&mut self.frame)
            .map_err(|e| DecodeError::at(position, DecodeErrorKind::Io(e)))?;
        if (read as u64) < rest {
            return Err(DecodeError::at(
                position + self.frame.len() as u64,
                DecodeErrorKind::Truncated {
                    what: "batch",
                    needed: frame_len,
                    available: self.frame.len() as u64,
                },
            ));
        }
        self.body_crc = crc32c::crc32c_append(self.body_crc, &self.frame);
        self.position += frame_len;
        Ok(Frame::Batch {
            position,
            bytes: &self.frame,
        })
    }
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
        let source = ReadFrames {
            reader,
            position: SEGMENT_HEADER_LEN as u64,
            lookahead: [0; SEGMENT_FOOTER_LEN],
            frame: Vec::new(),
            body_crc: 0,
            lent: 0,
        };
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
