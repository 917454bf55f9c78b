//! Where segments come from: a local directory or an S3 prefix, both through one
//! OpenDAL-backed implementation of [`SegmentSource`]. An in-memory source serves
//! unit tests and fault injection.

use kfs_catalog::fault::ErrorKind;
use kfs_catalog::storage::S3Settings;
use opendal::{EntryMode, Operator};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Mutex;

/// The objects of a listing as they are listed, page by page: a caller that stops
/// reading stops listing.
pub type ObjectStream = futures::stream::BoxStream<'static, Result<SourceObject, SourceError>>;

/// The bytes of a segment as they arrive.
pub type SegmentStream = futures::stream::BoxStream<'static, Result<bytes::Bytes, SourceError>>;

/// A segment held in memory, as a stream of one chunk.
pub fn in_memory(bytes: impl Into<bytes::Bytes>) -> SegmentStream {
    let bytes: bytes::Bytes = bytes.into();
    Box::pin(futures::stream::once(async move { Ok(bytes) }))
}

/// One object of a listing, with its key relative to the source prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceObject {
    /// Key relative to the source prefix.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag, when the store has one.
    pub etag: Option<String>,
    /// Last modification, Unix ms, when the store says (always from `stat`).
    pub modified_ms: Option<i64>,
}

/// Reading the source failed.
#[derive(Debug, thiserror::Error)]
#[error("{location}: {message}")]
pub struct SourceError {
    /// The object or prefix.
    pub location: String,
    /// What failed.
    pub message: String,
    /// What the failure means (retrying may succeed when it is transient).
    pub kind: ErrorKind,
}

/// A bucket prefix or directory holding KafScale segments.
pub trait SegmentSource: Send + Sync {
    /// Every object under the prefix.
    fn list(&self) -> impl Future<Output = Result<Vec<SourceObject>, SourceError>> + Send;
    /// The names of the directories directly under `dir` (empty for the root, else
    /// ending in `/`), without their trailing `/`, in key order.
    fn list_dirs(&self, dir: &str)
    -> impl Future<Output = Result<Vec<String>, SourceError>> + Send;
    /// The objects directly under `dir` (ending in `/`), in key order, those after
    /// the key `start_after` only when it is given: S3's `StartAfter`, so that a
    /// listing begins where the work does instead of at the oldest retained object.
    fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> impl Future<Output = Result<ObjectStream, SourceError>> + Send;
    /// The bytes of one object.
    fn read(&self, key: &str) -> impl Future<Output = Result<Vec<u8>, SourceError>> + Send;
    /// The bytes `range` of one object (fewer when the object is shorter).
    fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> impl Future<Output = Result<Vec<u8>, SourceError>> + Send;
    /// The bytes of one object as they arrive, in chunks; with `etag`, only from the
    /// version it names (a replaced object fails the read instead of mixing versions).
    fn open(
        &self,
        key: &str,
        etag: Option<&str>,
    ) -> impl Future<Output = Result<SegmentStream, SourceError>> + Send;
    /// The whole of one small object, at once; with `etag`, only from the version it
    /// names (as [`SegmentSource::open`]).
    fn read_version(
        &self,
        key: &str,
        etag: Option<&str>,
    ) -> impl Future<Output = Result<bytes::Bytes, SourceError>> + Send {
        async move {
            use futures::StreamExt;
            let mut stream = self.open(key, etag).await?;
            let mut body = bytes::BytesMut::new();
            while let Some(chunk) = stream.next().await {
                body.extend_from_slice(&chunk?);
            }
            Ok(body.freeze())
        }
    }
    /// Size and ETag of one object, or `None` when it does not exist.
    fn stat(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<SourceObject>, SourceError>> + Send;
    /// A readable location for messages (`s3://bucket/prefix/key` or a path).
    fn describe(&self, key: &str) -> String;
}

/// Bytes per ranged read when streaming an object.
const READ_CHUNK_BYTES: usize = 8 << 20;

/// A local directory or S3 prefix, read through OpenDAL.
#[derive(Debug, Clone)]
pub struct OpendalSource {
    operator: Operator,
    base: String,
    /// The directory, for a local source: small objects are read with one call
    /// (OpenDAL's file reader sets aside 2 MiB per read, whatever the file's size).
    local_root: Option<std::path::PathBuf>,
}

impl OpendalSource {
    /// A local directory.
    pub fn local(root: &Path) -> Result<Self, SourceError> {
        let absolute = std::path::absolute(root).map_err(|e| SourceError {
            location: root.display().to_string(),
            message: e.to_string(),
            kind: ErrorKind::Config,
        })?;
        let root_text = absolute.display().to_string();
        let builder = opendal::services::Fs::default().root(&root_text);
        let operator = Operator::new(builder)
            .map_err(|e| error(&root_text, e))?
            .finish();
        Ok(Self {
            operator,
            base: root_text,
            local_root: Some(absolute),
        })
    }

    /// `s3://bucket/prefix`, with credentials and endpoint from `settings`.
    pub fn s3(bucket: &str, prefix: &str, settings: &S3Settings) -> Result<Self, SourceError> {
        let base = format!("s3://{bucket}/{prefix}");
        let mut builder = opendal::services::S3::default()
            .bucket(bucket)
            .root(&format!("/{}", prefix.trim_matches('/')))
            .region(&settings.region);
        if let Some(endpoint) = &settings.endpoint {
            builder = builder.endpoint(endpoint);
        }
        if let Some(key) = &settings.access_key_id {
            builder = builder.access_key_id(key);
        }
        if let Some(secret) = &settings.secret_access_key {
            builder = builder.secret_access_key(secret);
        }
        if let Some(token) = &settings.session_token {
            builder = builder.session_token(token);
        }
        let operator = Operator::new(builder)
            .map_err(|e| error(&base, e))?
            .finish();
        Ok(Self {
            operator,
            base,
            local_root: None,
        })
    }

    /// Parses `s3://bucket/prefix` or a directory.
    pub fn from_location(location: &str, settings: &S3Settings) -> Result<Self, SourceError> {
        match location.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                Self::s3(bucket, prefix, settings)
            }
            None => Self::local(Path::new(location)),
        }
    }
}

fn modified_ms(meta: &opendal::Metadata) -> Option<i64> {
    let modified = std::time::SystemTime::from(meta.last_modified()?);
    modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as i64)
}

/// A listed entry as an object of the source.
fn object_of(entry: &opendal::Entry) -> SourceObject {
    SourceObject {
        key: entry.path().trim_start_matches('/').to_owned(),
        size: entry.metadata().content_length(),
        etag: entry
            .metadata()
            .etag()
            .map(|e| e.trim_matches('"').to_owned()),
        modified_ms: modified_ms(entry.metadata()),
    }
}

/// A source error from opendal's: missing credentials named as such (with the
/// variables to set) rather than as the signer's words.
fn error(location: &str, e: opendal::Error) -> SourceError {
    SourceError {
        location: location.to_owned(),
        kind: kfs_catalog::fault::opendal_error_kind(&e),
        message: if kfs_catalog::fault::missing_credentials(&e) {
            kfs_catalog::fault::MISSING_AWS_CREDENTIALS.to_owned()
        } else {
            e.to_string()
        },
    }
}

impl SegmentSource for OpendalSource {
    async fn list(&self) -> Result<Vec<SourceObject>, SourceError> {
        let entries = self
            .operator
            .list_with("")
            .recursive(true)
            .await
            .map_err(|e| error(&self.base, e))?;
        let mut objects: Vec<SourceObject> = entries
            .into_iter()
            .filter(|entry| entry.metadata().mode() == EntryMode::FILE)
            .map(|entry| object_of(&entry))
            .collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(objects)
    }

    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        let entries = self
            .operator
            .list_with(dir)
            .await
            .map_err(|e| error(&self.describe(dir), e))?;
        let mut names: Vec<String> = entries
            .iter()
            .filter(|entry| entry.metadata().mode() == EntryMode::DIR)
            .filter_map(|entry| {
                let path = entry.path().trim_start_matches('/');
                let name = path.strip_prefix(dir)?.strip_suffix('/')?;
                (!name.is_empty() && !name.contains('/')).then(|| name.to_owned())
            })
            .collect();
        names.sort();
        Ok(names)
    }

    async fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> Result<ObjectStream, SourceError> {
        use futures::{StreamExt, TryStreamExt};
        let location = self.describe(dir);
        let native = self.operator.info().full_capability().list_with_start_after;
        let mut lister = self.operator.lister_with(dir);
        if native && let Some(after) = start_after {
            lister = lister.start_after(after);
        }
        let stream = lister.await.map_err(|e| error(&location, e))?;
        let dir = dir.to_owned();
        let objects = stream
            .map_err(move |e| error(&location, e))
            .try_filter_map(move |entry| {
                let file = entry.metadata().mode() == EntryMode::FILE
                    && entry
                        .path()
                        .trim_start_matches('/')
                        .strip_prefix(dir.as_str())
                        .is_some_and(|name| !name.contains('/'));
                futures::future::ready(Ok(file.then(|| object_of(&entry))))
            });
        if native {
            return Ok(objects.boxed());
        }
        // A store without `StartAfter` (a local directory) lists in no particular
        // order: sort the directory, then skip to the start.
        let mut all: Vec<SourceObject> = objects.try_collect().await?;
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all.retain(|o| start_after.is_none_or(|after| o.key.as_str() > after));
        Ok(futures::stream::iter(all.into_iter().map(Ok)).boxed())
    }

    async fn read(&self, key: &str) -> Result<Vec<u8>, SourceError> {
        let buffer = self
            .operator
            .read(key)
            .await
            .map_err(|e| error(&self.describe(key), e))?;
        Ok(buffer.to_vec())
    }

    async fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, SourceError> {
        let buffer = self
            .operator
            .read_with(key)
            .range(range)
            .await
            .map_err(|e| error(&self.describe(key), e))?;
        Ok(buffer.to_vec())
    }

    async fn open(&self, key: &str, etag: Option<&str>) -> Result<SegmentStream, SourceError> {
        use futures::{StreamExt, TryStreamExt};
        let location = self.describe(key);
        let mut reader = self.operator.reader_with(key).chunk(READ_CHUNK_BYTES);
        if let Some(etag) = etag {
            reader = reader.if_match(&format!("\"{etag}\""));
        }
        let stream = reader
            .await
            .map_err(|e| error(&location, e))?
            .into_bytes_stream(..)
            .await
            .map_err(|e| error(&location, e))?;
        Ok(stream
            .map_err(move |e| SourceError {
                location: location.clone(),
                kind: e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<opendal::Error>())
                    .map_or(ErrorKind::Transient, kfs_catalog::fault::opendal_error_kind),
                message: e.to_string(),
            })
            .boxed())
    }

    async fn read_version(
        &self,
        key: &str,
        etag: Option<&str>,
    ) -> Result<bytes::Bytes, SourceError> {
        if let Some(root) = &self.local_root {
            // A local file has no version but its content (no ETag is listed). Read
            // on this thread: a small file costs less than a hand-off to another.
            return std::fs::read(root.join(key))
                .map(bytes::Bytes::from)
                .map_err(|e| SourceError {
                    location: self.describe(key),
                    kind: kfs_catalog::fault::io_error_kind(&e),
                    message: e.to_string(),
                });
        }
        let mut read = self.operator.read_with(key);
        if let Some(etag) = etag {
            read = read.if_match(&format!("\"{etag}\""));
        }
        let buffer = read.await.map_err(|e| error(&self.describe(key), e))?;
        Ok(buffer.to_bytes())
    }

    async fn stat(&self, key: &str) -> Result<Option<SourceObject>, SourceError> {
        match self.operator.stat(key).await {
            Ok(meta) => Ok(Some(SourceObject {
                key: key.to_owned(),
                size: meta.content_length(),
                etag: meta.etag().map(|e| e.trim_matches('"').to_owned()),
                modified_ms: modified_ms(&meta),
            })),
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(error(&self.describe(key), e)),
        }
    }

    fn describe(&self, key: &str) -> String {
        format!("{}/{key}", self.base.trim_end_matches('/'))
    }
}

/// Keys per page of a listing, as S3 returns them.
const LIST_PAGE: usize = 1000;

/// An in-memory source for tests and benchmarks; it counts its listing requests as
/// S3 would bill them (one per call, one more per page of 1,000 keys read), and the
/// segments it streams (`open`: one GET each).
#[derive(Debug, Default)]
pub struct MemorySource {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    list_requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
    opens: std::sync::atomic::AtomicU64,
}

impl MemorySource {
    /// Adds or replaces an object.
    pub fn put(&self, key: &str, bytes: Vec<u8>) {
        if let Ok(mut objects) = self.objects.lock() {
            objects.insert(key.to_owned(), bytes);
        }
    }

    /// Listing requests served so far (`list_dirs`, `list_files` and their pages).
    pub fn list_requests(&self) -> u64 {
        self.list_requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Objects streamed so far (`open`).
    pub fn opens(&self) -> u64 {
        self.opens.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count_request(&self) {
        self.list_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn locked<T>(&self, f: impl FnOnce(&BTreeMap<String, Vec<u8>>) -> T) -> Result<T, SourceError> {
        self.objects.lock().map(|o| f(&o)).map_err(|_| SourceError {
            location: "memory".into(),
            message: "lock poisoned".into(),
            kind: ErrorKind::Transient,
        })
    }
}

/// An object held in memory, as a listing shows it.
fn held(key: &str, bytes: &[u8]) -> SourceObject {
    SourceObject {
        key: key.to_owned(),
        size: bytes.len() as u64,
        etag: None,
        modified_ms: None,
    }
}

impl SegmentSource for MemorySource {
    async fn list(&self) -> Result<Vec<SourceObject>, SourceError> {
        self.locked(|objects| {
            objects
                .iter()
                .map(|(key, bytes)| held(key, bytes))
                .collect()
        })
    }

    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        self.count_request();
        self.locked(|objects| {
            // As S3 answers a delimiter listing: one step per directory, skipping
            // what each holds (`0` sorts right after `/`).
            let mut names: Vec<String> = Vec::new();
            let mut from = dir.to_owned();
            while let Some((key, _)) = objects.range(from.clone()..).next() {
                let Some(rest) = key.strip_prefix(dir) else {
                    break;
                };
                match rest.split_once('/') {
                    Some((name, _)) => {
                        names.push(name.to_owned());
                        from = format!("{dir}{name}0");
                    }
                    None => from = format!("{key}\0"),
                }
            }
            names
        })
    }

    async fn list_files(
        &self,
        dir: &str,
        start_after: Option<&str>,
    ) -> Result<ObjectStream, SourceError> {
        use futures::StreamExt;
        self.count_request();
        let from = match start_after {
            Some(after) if after > dir => std::ops::Bound::Excluded(after.to_owned()),
            _ => std::ops::Bound::Included(dir.to_owned()),
        };
        let listed: Vec<SourceObject> = self.locked(|objects| {
            objects
                .range((from, std::ops::Bound::Unbounded))
                .take_while(|(key, _)| key.starts_with(dir))
                .filter(|(key, _)| !key[dir.len()..].contains('/'))
                .map(|(key, bytes)| held(key, bytes))
                .collect()
        })?;
        let requests = self.list_requests.clone();
        Ok(futures::stream::iter(listed.into_iter().enumerate())
            .map(move |(at, object)| {
                if at > 0 && at % LIST_PAGE == 0 {
                    requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(object)
            })
            .boxed())
    }

    async fn read(&self, key: &str) -> Result<Vec<u8>, SourceError> {
        self.locked(|objects| objects.get(key).cloned())?
            .ok_or_else(|| SourceError {
                location: key.to_owned(),
                message: "no such object".into(),
                kind: ErrorKind::Config,
            })
    }

    async fn read_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<u8>, SourceError> {
        let bytes = self.read(key).await?;
        let end = usize::try_from(range.end)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let start = usize::try_from(range.start).unwrap_or(usize::MAX).min(end);
        Ok(bytes[start..end].to_vec())
    }

    async fn open(&self, key: &str, _etag: Option<&str>) -> Result<SegmentStream, SourceError> {
        self.opens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(in_memory(self.read(key).await?))
    }

    async fn stat(&self, key: &str) -> Result<Option<SourceObject>, SourceError> {
        self.locked(|objects| objects.get(key).map(|bytes| held(key, bytes)))
    }

    fn describe(&self, key: &str) -> String {
        format!("memory://{key}")
    }
}
