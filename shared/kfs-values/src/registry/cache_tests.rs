//! Tests of [`SchemaCache`]: fetched once, not-found asked again, transient failures
//! retried and never cached, lookups concurrent and bounded by time.

use super::*;
use crate::registry::{MemoryRegistry, SchemaKind};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A registry answering from a script per call: `None` not found, `Some(true)` the
/// schema, `Some(false)` a transient failure; past the script, the schema.
#[derive(Debug, Default)]
struct Scripted {
    script: Vec<Option<bool>>,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl SchemaRegistry for Scripted {
    async fn schema(&self, _: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.script.get(call).copied().unwrap_or(Some(true)) {
            None => Ok(None),
            Some(true) => Ok(Some(RegisteredSchema::new(SchemaKind::Avro, "\"long\""))),
            Some(false) => Err(RegistryError {
                location: "scripted".into(),
                message: "503".into(),
                kind: ErrorKind::Transient,
            }),
        }
    }
}

fn quick(policy: LookupPolicy) -> LookupPolicy {
    LookupPolicy {
        first_pause: Duration::from_millis(5),
        ..policy
    }
}

fn len(schema: RegisteredSchema) -> Result<usize, String> {
    Ok(schema.text.len())
}

#[tokio::test]
async fn a_schema_is_fetched_once() -> Result<(), RegistryError> {
    let registry = Arc::new(MemoryRegistry::default());
    let one = SchemaId::Confluent(1);
    registry.register(one, RegisteredSchema::new(SchemaKind::Avro, "\"long\""));
    let cache: SchemaCache<usize> =
        SchemaCache::with_policy(registry.clone(), quick(LookupPolicy::default()));
    let first = cache.get(one, len).await?.map(|n| *n);
    registry.register(one, RegisteredSchema::new(SchemaKind::Avro, "changed"));
    let again = cache.get(one, len).await?.map(|n| *n);
    assert_eq!((first, again), (Ok(6), Ok(6)));
    let unknown = cache.get(SchemaId::Confluent(2), len).await?;
    assert!(unknown.is_err_and(|e| e.contains("not in the schema registry")));
    Ok(())
}

#[tokio::test]
async fn a_404_from_a_lagging_replica_is_asked_again() -> Result<(), RegistryError> {
    let registry = Arc::new(Scripted {
        script: vec![None, None],
        ..Scripted::default()
    });
    let cache: SchemaCache<usize> =
        SchemaCache::with_policy(registry.clone(), quick(LookupPolicy::default()));
    let found = cache.get(SchemaId::Confluent(7), len).await?.map(|n| *n);
    assert_eq!(found, Ok(6));
    assert_eq!(registry.calls.load(Ordering::SeqCst), 3);
    Ok(())
}

#[tokio::test]
async fn a_persistent_404_is_kept_for_the_negative_ttl_only() -> Result<(), RegistryError> {
    let registry = Arc::new(Scripted {
        script: vec![None; 3],
        ..Scripted::default()
    });
    let policy = quick(LookupPolicy {
        negative_ttl: Duration::from_millis(300),
        ..LookupPolicy::default()
    });
    let cache: SchemaCache<usize> = SchemaCache::with_policy(registry.clone(), policy);
    let id = SchemaId::Confluent(7);
    let missing = cache.get(id, len).await?;
    assert!(
        missing.is_err_and(|e| e.contains("not in the schema registry") && e.contains("3 times"))
    );
    // Answered from memory while fresh.
    assert!(cache.get(id, len).await?.is_err());
    assert_eq!(registry.calls.load(Ordering::SeqCst), 3);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(cache.get(id, len).await?.map(|n| *n), Ok(6));
    assert_eq!(registry.calls.load(Ordering::SeqCst), 4);
    Ok(())
}

#[tokio::test]
async fn transient_failures_are_retried_then_fail_never_cached() {
    let registry = Arc::new(Scripted {
        script: vec![Some(false), Some(false), Some(true)],
        ..Scripted::default()
    });
    let cache: SchemaCache<usize> =
        SchemaCache::with_policy(registry.clone(), quick(LookupPolicy::default()));
    let id = SchemaId::Confluent(7);
    assert!(matches!(cache.get(id, len).await, Ok(Ok(_))));

    let down = Arc::new(Scripted {
        script: vec![Some(false); 10],
        ..Scripted::default()
    });
    let cache: SchemaCache<usize> =
        SchemaCache::with_policy(down.clone(), quick(LookupPolicy::default()));
    let failed = cache.get(id, len).await;
    assert!(failed.is_err_and(|e| e.kind == ErrorKind::Transient));
    assert_eq!(down.calls.load(Ordering::SeqCst), 3);
    // Not remembered: the next conversion asks again.
    let _ = cache.get(id, len).await;
    assert_eq!(down.calls.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn a_404_outlasting_the_time_budget_is_transient() {
    let registry = Arc::new(Scripted {
        script: vec![None; 10],
        ..Scripted::default()
    });
    let policy = LookupPolicy {
        time_budget: Duration::from_millis(100),
        first_pause: Duration::from_millis(80),
        ..LookupPolicy::default()
    };
    let cache: SchemaCache<usize> = SchemaCache::with_policy(registry, policy);
    let answer = cache.get(SchemaId::Confluent(7), len).await;
    assert!(answer.is_err_and(|e| e.kind == ErrorKind::Transient));
}

/// A registry that answers after `delay`, counting the lookups under way at once.
#[derive(Debug, Default)]
struct Slow {
    delay: Duration,
    now: AtomicUsize,
    most: AtomicUsize,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl SchemaRegistry for Slow {
    async fn schema(&self, _: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(Some(RegisteredSchema::new(SchemaKind::Avro, "\"long\"")))
    }
}

#[tokio::test]
async fn lookups_run_concurrently_up_to_the_bound_and_keep_their_order() -> Result<(), RegistryError>
{
    let registry = Arc::new(Slow {
        delay: Duration::from_millis(20),
        ..Slow::default()
    });
    let cache: SchemaCache<u32> =
        SchemaCache::with_policy(registry.clone(), LookupPolicy::default());
    let ids: Vec<SchemaId> = (0..64).map(SchemaId::Confluent).collect();
    let started = Instant::now();
    let resolved = cache
        .get_all(&ids, |schema| Ok(schema.text.len() as u32))
        .await?;
    assert_eq!(resolved.len(), 64);
    assert_eq!(registry.most.load(Ordering::SeqCst), 16);
    // 64 lookups of 20 ms, 16 at a time: about 80 ms, not 1.3 s.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}
