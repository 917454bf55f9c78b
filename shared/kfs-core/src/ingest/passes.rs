//! A segment read for the several passes a typed conversion makes over it (a scan for
//! its columns or schema ids, the conversion, again after a schema race), and the
//! blocking thread a scan runs on.

use kfs_plan::naming::TableName;

use crate::error::PipelineError;
use crate::source::{SegmentSource, SourceObject};

/// Segments at most this large are read once and held for the passes a JSON or
/// registry conversion makes over them (a scan, the conversion, again after a schema
/// race): one read of the store, not one per pass.
pub const HELD_SEGMENT_BYTES: u64 = 16 << 20;

/// A segment read for several passes: held in memory after the first when it is at
/// most [`HELD_SEGMENT_BYTES`], read again for each otherwise.
pub(super) struct SegmentPasses<'s, S> {
    source: &'s S,
    object: &'s SourceObject,
    held: Option<bytes::Bytes>,
}

impl<'s, S: SegmentSource> SegmentPasses<'s, S> {
    pub(super) fn new(source: &'s S, object: &'s SourceObject) -> Self {
        Self {
            source,
            object,
            held: None,
        }
    }

    /// The segment's bytes as they arrive: the held ones, else read from the store
    /// (and held, when small).
    pub(super) async fn open(
        &mut self,
    ) -> Result<crate::source::SegmentStream, crate::source::SourceError> {
        use futures::StreamExt;
        if let Some(held) = &self.held {
            return Ok(crate::source::in_memory(held.clone()));
        }
        let object = self.object;
        let mut stream = self
            .source
            .open(&object.key, object.etag.as_deref())
            .await?;
        if object.size == 0 || object.size > HELD_SEGMENT_BYTES {
            return Ok(stream);
        }
        let mut held = bytes::BytesMut::with_capacity(object.size as usize);
        while let Some(chunk) = stream.next().await {
            held.extend_from_slice(&chunk?);
            if held.len() as u64 > HELD_SEGMENT_BYTES {
                // Larger than its listing said: streamed, not held.
                let read = futures::stream::once(std::future::ready(Ok(held.freeze())));
                return Ok(Box::pin(read.chain(stream)));
            }
        }
        let held = held.freeze();
        self.held = Some(held.clone());
        Ok(crate::source::in_memory(held))
    }
}

/// Runs `scan` (a pass over a segment before its conversion) on a blocking thread; a
/// thread that dies is an unexpected failure of `table`'s conversion.
pub(super) async fn scanning<T: Send + 'static>(
    table: &TableName,
    scan: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PipelineError> {
    tokio::task::spawn_blocking(scan)
        .await
        .map_err(|join| PipelineError::Catalog {
            table: table.to_string(),
            source: Box::new(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("the scanning thread failed: {join}"),
            )),
        })
}
