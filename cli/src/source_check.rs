//! `run --source` checked before anything is created: a local path that does not
//! exist, is a file or holds no segment file, and a source of either kind whose
//! segment files lie at the wrong depth (a namespace, topic or partition folder, or a
//! folder above the bucket's root) are refused with the folder to give instead. The
//! walk is bounded: it looks for one segment file and reads at most
//! [`MAX_LISTINGS`] listings.

use std::path::Path;

use futures::StreamExt;
use kfs_core::SegmentSource;
use kfs_plan::keys::SegmentKey;

use crate::error::{CliError, PlaceError};

/// Listings (of a folder's files or sub-folders) the walk may read.
const MAX_LISTINGS: usize = 256;

/// Files of one folder looked at.
const MAX_FILES_PER_FOLDER: usize = 1000;

/// Depth of segment files below the source in the bucket layout.
const LAYOUT_DEPTH: usize = 3;

/// Checks a local `--source` before its layout: it exists and is a folder.
pub fn check_local_path(location: &str) -> Result<(), CliError> {
    let path = Path::new(location);
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(PlaceError::SourceMissing(location.to_owned()).into())
        }
        Err(source) => Err(CliError::Io {
            path: path.to_owned(),
            source,
        }),
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) if is_segment_file(location) => {
            Err(PlaceError::SourceIsSegment(location.to_owned()).into())
        }
        Ok(_) => Err(PlaceError::SourceIsFile(location.to_owned()).into()),
    }
}

/// Whether a key's last part names a segment's file (`segment-<20 digits>.kfs` or
/// `.index`).
fn is_segment_file(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    SegmentKey::parse(&format!("n/t/0/{name}")).is_some()
}

/// What the walk found.
#[derive(Debug, Default)]
struct Walk {
    /// The first segment file found, relative to the source, and its depth.
    segment: Option<(String, usize)>,
    /// The first segment file at the layout's depth whose folders are not a namespace,
    /// a topic and a partition number (the run would ignore it).
    misplaced: Option<String>,
    /// Files seen.
    files: usize,
    /// Whether the listing budget ran out before the walk was complete.
    cut_short: bool,
    /// Listings read.
    listings: usize,
}

/// Checks the layout under `source` (at `location`): segment files, if any, lie at
/// `<namespace>/<topic>/<partition>/`. A local source must hold one unless `waiting`
/// (the follow mode waits for the first); an S3 prefix holding no object at all
/// passes (a bucket may be empty at first).
pub async fn check_layout(
    source: &impl SegmentSource,
    location: &str,
    local: bool,
    waiting: bool,
) -> Result<(), CliError> {
    let mut walk = Walk::default();
    visit(source, "", 0, &mut walk).await?;
    let location = location.to_owned();
    let Some((found, depth)) = walk.segment else {
        if walk.cut_short {
            return Ok(());
        }
        if let Some(found) = walk.misplaced {
            return Err(PlaceError::SourceBadLayout {
                given: location,
                found,
            }
            .into());
        }
        return match walk.files {
            0 if local && !waiting => Err(PlaceError::SourceEmpty(location).into()),
            0 => Ok(()),
            objects => Err(PlaceError::SourceNoSegments {
                given: location,
                objects,
            }
            .into()),
        };
    };
    if depth == LAYOUT_DEPTH {
        return Ok(());
    }
    if depth < LAYOUT_DEPTH {
        let what = ["partition", "topic", "namespace"][depth];
        let suggestion = local
            .then(|| std::path::absolute(&location).ok())
            .flatten()
            .and_then(|p| p.ancestors().nth(LAYOUT_DEPTH - depth).map(Path::to_owned))
            .map(|p| p.display().to_string());
        return Err(PlaceError::SourceTooDeep {
            given: location,
            what,
            found: format!("at {found}"),
            suggestion,
        }
        .into());
    }
    let levels = depth - LAYOUT_DEPTH;
    let below: Vec<&str> = found.split('/').take(levels).collect();
    let suggestion = format!("{}/{}", location.trim_end_matches('/'), below.join("/"));
    Err(PlaceError::SourceTooHigh {
        given: location,
        levels,
        found,
        suggestion,
    }
    .into())
}

/// Looks for a segment file in `dir` (`""` or ending in `/`), `depth` folders below
/// the source, then in its sub-folders, depth first, up to two levels past the
/// layout's depth.
async fn visit(
    source: &impl SegmentSource,
    dir: &str,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), CliError> {
    if walk.segment.is_some() {
        return Ok(());
    }
    if walk.listings + 2 > MAX_LISTINGS {
        walk.cut_short = true;
        return Ok(());
    }
    walk.listings += 2;
    let mut files = source
        .list_files(dir, None)
        .await
        .map_err(source_error)?
        .take(MAX_FILES_PER_FOLDER);
    while let Some(object) = files.next().await {
        let object = object.map_err(source_error)?;
        walk.files += 1;
        if !is_segment_file(&object.key) {
            continue;
        }
        if depth == LAYOUT_DEPTH && SegmentKey::parse(&object.key).is_none() {
            walk.misplaced.get_or_insert(object.key);
            continue;
        }
        walk.segment = Some((object.key, depth));
        return Ok(());
    }
    let dirs = source.list_dirs(dir).await.map_err(source_error)?;
    if depth >= LAYOUT_DEPTH + 2 {
        walk.cut_short |= !dirs.is_empty();
        return Ok(());
    }
    for sub in dirs {
        Box::pin(visit(source, &format!("{dir}{sub}/"), depth + 1, walk)).await?;
        if walk.segment.is_some() || walk.cut_short {
            break;
        }
    }
    Ok(())
}

/// A listing's failure (missing AWS credentials are named as such by the source,
/// with the variables to set).
fn source_error(e: kfs_core::SourceError) -> CliError {
    CliError::Pipeline(format!("source {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfs_core::MemorySource;

    fn source(keys: &[&str]) -> MemorySource {
        let source = MemorySource::default();
        for key in keys {
            source.put(key, Vec::new());
        }
        source
    }

    fn check(keys: &[&str], local: bool) -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| e.to_string())?;
        runtime
            .block_on(check_layout(&source(keys), "SRC", local, false))
            .map_err(|e| e.to_string())
    }

    const SEGMENT: &str = "segment-00000000000000000000.kfs";

    #[test]
    fn segments_are_looked_for_where_the_layout_puts_them() {
        let good = format!("ns/orders/0/{SEGMENT}");
        assert_eq!(check(&["ns/lfs-probe.txt", &good], false), Ok(()));
        // An empty prefix passes in S3, not as a local folder.
        assert_eq!(check(&[], false), Ok(()));
        assert!(check(&[], true).is_err_and(|e| e.contains("is empty")));
        let stray = check(&["notes/a.txt", "b.txt"], false);
        assert!(stray.is_err_and(|e| e.contains("none of its 2 files is a segment file")));
        for (key, what) in [
            (format!("orders/0/{SEGMENT}"), "is a namespace folder"),
            (format!("0/{SEGMENT}"), "is a topic folder"),
            (SEGMENT.to_owned(), "is a partition folder"),
        ] {
            let refused = check(&[&key], false);
            assert!(
                refused.as_ref().is_err_and(|e| e.contains(what)
                    && e.contains("point --source at the folder above the namespace")),
                "{key}: {refused:?}"
            );
        }
        let above = check(&[&format!("bucket/ns/orders/0/{SEGMENT}")], false);
        assert!(above.is_err_and(|e| e.contains("point --source at SRC/bucket")));
        let odd = format!("ns/no topic/0/{SEGMENT}");
        assert!(check(&[&odd], false).is_err_and(|e| e.contains("is not in the layout")));
        // One odd folder beside the layout blocks nothing.
        assert_eq!(check(&[&odd, &format!("ns/x/1/{SEGMENT}")], false), Ok(()));
    }
}
