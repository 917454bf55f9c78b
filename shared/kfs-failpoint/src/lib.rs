//! Failpoints: the side effects that go through a table's storage (data file writes,
//! file deletes) run through [`around`], where a test can inject a crash, an error or
//! a timeout before or after the effect. A pass runs under a hook with [`scoped`];
//! outside one (always, in production), a failpoint costs one task-local lookup and
//! does nothing. The other side effects (segment reads, ledger writes, catalog commits,
//! pointer swaps) sit behind traits that tests wrap instead. Its own crate, so that
//! kfs-core (which re-exports it as `kfs_core::failpoint`) and kfs-parquet's merge
//! share one hook.

use std::future::Future;
use std::sync::Arc;

use iceberg::{Error, ErrorKind};

tokio::task_local! {
    static HOOK: Arc<dyn FailpointHook>;
}

/// A side effect with a failpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// Writing a data file (a converted segment, a merged or compacted file).
    DataFileWrite,
    /// Deleting a file from the table's storage (expired, orphaned, merged away).
    FileDelete,
}

/// What a hook does to one effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// Nothing: the effect happens and its result is returned.
    Pass,
    /// Fail with this message; the effect does not happen.
    FailBefore(String),
    /// Let the effect happen, then fail with this message (the caller never learns).
    FailAfter(String),
}

/// Decides the injection at each failpoint reached under [`scoped`].
pub trait FailpointHook: Send + Sync {
    /// The injection for this occurrence of `point`.
    fn inject(&self, point: Failpoint) -> Injection;

    /// The error an injected failure at `point` returns: by default an unexpected,
    /// retryable one. A hook can return what a real storage layer does instead (an
    /// I/O error marked non-retryable, throttling), to prove it is classified right.
    fn error(&self, point: Failpoint, message: String) -> iceberg::Error {
        let _ = point;
        Error::new(ErrorKind::Unexpected, message).with_retryable(true)
    }
}

/// Runs `future` with `hook` deciding every failpoint it reaches in its own task
/// (work it spawns onto other tasks runs without the hook).
pub async fn scoped<F: Future>(hook: Arc<dyn FailpointHook>, future: F) -> F::Output {
    HOOK.scope(hook, future).await
}

/// Runs `effect` as `injection` says, failing with `fail(message)`.
pub async fn apply<T, E>(
    injection: Injection,
    fail: impl FnOnce(String) -> E,
    effect: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match injection {
        Injection::Pass => effect.await,
        Injection::FailBefore(what) => Err(fail(what)),
        Injection::FailAfter(what) => {
            effect.await?;
            Err(fail(what))
        }
    }
}

/// Runs the storage effect `effect` at `point`; an injected failure is the hook's
/// [`FailpointHook::error`].
pub async fn around<T>(
    point: Failpoint,
    effect: impl Future<Output = iceberg::Result<T>>,
) -> iceberg::Result<T> {
    let Ok((injection, hook)) = HOOK.try_with(|hook| (hook.inject(point), hook.clone())) else {
        return effect.await;
    };
    apply(injection, |what| hook.error(point, what), effect).await
}

/// Deletes `path` from `file_io`, through the [`Failpoint::FileDelete`] failpoint.
pub async fn delete_file(file_io: &iceberg::io::FileIO, path: &str) -> iceberg::Result<()> {
    around(Failpoint::FileDelete, file_io.delete(path)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Always(Injection);

    impl FailpointHook for Always {
        fn inject(&self, _: Failpoint) -> Injection {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn a_failpoint_does_nothing_outside_a_hook() {
        let out = around(Failpoint::DataFileWrite, async { Ok(7) }).await;
        assert_eq!(out.ok(), Some(7));
    }

    #[tokio::test]
    async fn injections_fail_before_or_after_the_effect() {
        let ran = std::sync::atomic::AtomicUsize::new(0);
        let effect = || async {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        };
        let before = Arc::new(Always(Injection::FailBefore("no".into())));
        let out = scoped(before, around(Failpoint::FileDelete, effect())).await;
        assert!(out.is_err_and(|e| e.retryable()));
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
        let after = Arc::new(Always(Injection::FailAfter("lost".into())));
        let out = scoped(after, around(Failpoint::FileDelete, effect())).await;
        assert!(out.is_err());
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
