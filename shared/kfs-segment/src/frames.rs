//! Where a segment's batch frames come from ([`FrameSource`]): a byte slice
//! ([`SliceFrames`], zero-copy) or any reader ([`ReadFrames`], one frame buffered at a
//! time); each frame's declared length is checked against the format, the limits and
//! the bytes left before it is read, and the body CRC when the footer is reached.

use std::io::{BufRead, Read};

use crate::batch::{BATCH_HEADER_LEN, BATCH_LENGTH_PREFIX, MIN_BATCH_LENGTH};
use crate::envelope::{SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN, SegmentFooter};
use crate::error::{DecodeError, DecodeErrorKind};
use crate::limits::DecodeLimits;
use crate::wire::Cursor;

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
    pub(crate) fn new(data: &'a [u8]) -> Result<Self, DecodeError> {
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
    /// The frames of `reader`, whose segment header has been read.
    pub(crate) fn after_header(reader: R) -> Self {
        Self {
            reader,
            position: SEGMENT_HEADER_LEN as u64,
            lookahead: [0; SEGMENT_FOOTER_LEN],
            frame: Vec::new(),
            body_crc: 0,
            lent: 0,
        }
    }

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
    pub(crate) fn fill(reader: &mut R, buf: &mut [u8]) -> Result<usize, DecodeError> {
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
