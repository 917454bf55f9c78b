//! Schema lookups with a budget ([`SchemaCache`]): the schemas a segment names are
//! looked up at most [`LookupPolicy::concurrency`] at a time, within one time budget
//! per segment ([`LookupPolicy::time_budget`]); answers that may be transient are
//! tried again with backoff inside it. A schema found (or found and unreadable) is
//! kept for the process; schema ids are immutable in a registry. An id the registry
//! does not know is a dead letter only after [`LookupPolicy::not_found_tries`] answers
//! saying so (a lagging replica answers 404 for a moment), and that answer is kept
//! for [`LookupPolicy::negative_ttl`] only, then asked again. A registry that cannot
//! answer (a timeout, 5xx, throttling) is transient: the conversion fails and is
//! tried again, never a dead letter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{
    HttpRegistry, RegisteredSchema, RegistryError, RegistryLocation, SchemaId, SchemaRegistry,
};
use kfs_plan::fault::ErrorKind;

/// How a segment's schemas are looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupPolicy {
    /// Distinct schema ids looked up at once.
    pub concurrency: usize,
    /// Time all lookups of one segment may take, retries included: past it the
    /// conversion fails as transient (what was found stays cached, so the next try
    /// goes on from there).
    pub time_budget: Duration,
    /// Answers "not found" an id needs, each after a pause, before its records are
    /// dead letters.
    pub not_found_tries: u32,
    /// Tries of a lookup the registry could not answer before the conversion fails.
    pub transient_tries: u32,
    /// Pause before the first retry; doubled before each next one.
    pub first_pause: Duration,
    /// How long an id found missing is answered from memory before it is asked again.
    pub negative_ttl: Duration,
}

impl Default for LookupPolicy {
    fn default() -> Self {
        Self {
            concurrency: 16,
            time_budget: Duration::from_secs(120),
            not_found_tries: 3,
            transient_tries: 3,
            first_pause: Duration::from_millis(200),
            negative_ttl: Duration::from_secs(60),
        }
    }
}

impl LookupPolicy {
    /// The pause before retry `retry` (1 for the first).
    fn pause(&self, retry: u32) -> Duration {
        self.first_pause
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
    }
}

/// What a schema id resolved to, parsed: `Err` holds why its records cannot be read
/// (an unknown id, a schema that does not parse or has no table form).
pub type Resolved<T> = Result<Arc<T>, String>;

/// Schemas by id, fetched and parsed once for the process (an id found missing: for
/// [`LookupPolicy::negative_ttl`]).
#[derive(Debug)]
pub struct SchemaCache<T> {
    registry: Arc<dyn SchemaRegistry>,
    policy: LookupPolicy,
    parsed: Mutex<HashMap<SchemaId, Resolved<T>>>,
    /// Ids found missing: until when, and why.
    missing: Mutex<HashMap<SchemaId, (Instant, String)>>,
}

impl<T> SchemaCache<T> {
    /// A cache in front of `registry`, with the default [`LookupPolicy`].
    pub fn new(registry: Arc<dyn SchemaRegistry>) -> Self {
        Self::with_policy(registry, LookupPolicy::default())
    }

    /// A cache in front of `registry`, looking up as `policy` says.
    pub fn with_policy(registry: Arc<dyn SchemaRegistry>, policy: LookupPolicy) -> Self {
        Self {
            registry,
            policy: LookupPolicy {
                concurrency: policy.concurrency.max(1),
                not_found_tries: policy.not_found_tries.max(1),
                transient_tries: policy.transient_tries.max(1),
                ..policy
            },
            parsed: Mutex::new(HashMap::new()),
            missing: Mutex::new(HashMap::new()),
        }
    }

    /// How lookups are made.
    pub fn policy(&self) -> LookupPolicy {
        self.policy
    }

    /// Schema `id`, parsed by `parse`, within the time budget of one segment.
    pub async fn get(
        &self,
        id: SchemaId,
        parse: impl Fn(RegisteredSchema) -> Result<T, String>,
    ) -> Result<Resolved<T>, RegistryError> {
        self.get_until(id, &parse, Instant::now() + self.policy.time_budget)
            .await
    }

    /// Schemas `ids` (in their order), parsed by `parse`: at most
    /// [`LookupPolicy::concurrency`] looked up at once, all within one
    /// [`LookupPolicy::time_budget`]. The first lookup the registry cannot answer
    /// fails them all.
    pub async fn get_all(
        &self,
        ids: &[SchemaId],
        parse: impl Fn(RegisteredSchema) -> Result<T, String> + Sync,
    ) -> Result<Vec<Resolved<T>>, RegistryError> {
        use futures::{StreamExt, TryStreamExt};
        let deadline = Instant::now() + self.policy.time_budget;
        let parse = &parse;
        futures::stream::iter(ids.iter().map(|id| self.get_until(*id, parse, deadline)))
            .buffered(self.policy.concurrency)
            .try_collect()
            .await
    }

    /// What is known of `id` without asking: parsed, or missing and not yet stale.
    fn known(&self, id: SchemaId) -> Option<Resolved<T>> {
        if let Some(found) = self.parsed.lock().ok().and_then(|p| p.get(&id).cloned()) {
            return Some(found);
        }
        let mut missing = self.missing.lock().ok()?;
        match missing.get(&id) {
            Some((until, why)) if Instant::now() < *until => Some(Err(why.clone())),
            Some(_) => {
                missing.remove(&id);
                None
            }
            None => None,
        }
    }

    /// Schema `id`, asked of the registry (again after a pause) until it answers for
    /// good or `deadline` passes.
    async fn get_until(
        &self,
        id: SchemaId,
        parse: &(impl Fn(RegisteredSchema) -> Result<T, String> + ?Sized),
        deadline: Instant,
    ) -> Result<Resolved<T>, RegistryError> {
        let mut not_found = 0;
        let mut failed = 0;
        for retry in 0.. {
            if let Some(known) = self.known(id) {
                return Ok(known);
            }
            if retry > 0 {
                let pause = self.policy.pause(retry);
                if Instant::now() + pause >= deadline {
                    return Err(out_of_time(id, &self.policy, not_found, failed));
                }
                tokio::time::sleep(pause).await;
            }
            let answer = tokio::time::timeout_at(deadline.into(), self.registry.lookup(id)).await;
            match answer {
                Err(_) => return Err(out_of_time(id, &self.policy, not_found, failed)),
                Ok(Ok(Ok(schema))) => {
                    let resolved = parse(schema).map(Arc::new);
                    if let Ok(mut parsed) = self.parsed.lock() {
                        parsed.insert(id, resolved.clone());
                    }
                    return Ok(resolved);
                }
                Ok(Ok(Err(why))) => {
                    not_found += 1;
                    if not_found >= self.policy.not_found_tries {
                        let why = format!("{why} (asked {not_found} times)");
                        if let Ok(mut missing) = self.missing.lock() {
                            missing.insert(
                                id,
                                (Instant::now() + self.policy.negative_ttl, why.clone()),
                            );
                        }
                        return Ok(Err(why));
                    }
                }
                Ok(Err(e)) if e.kind == ErrorKind::Transient => {
                    failed += 1;
                    if failed >= self.policy.transient_tries {
                        return Err(e);
                    }
                }
                // A registry's answer is never the segment's bytes: what is not
                // transient is for the operator.
                Ok(Err(e)) => {
                    return Err(RegistryError {
                        kind: ErrorKind::Config,
                        ..e
                    });
                }
            }
        }
        Err(out_of_time(id, &self.policy, not_found, failed))
    }
}

/// The lookup of `id` ran out of its segment's time budget: transient (the
/// conversion is tried again; what was found stays cached).
fn out_of_time(id: SchemaId, policy: &LookupPolicy, not_found: u32, failed: u32) -> RegistryError {
    RegistryError {
        location: format!("schema {id}"),
        message: format!(
            "no final answer within the segment's lookup budget of {:?} ({not_found} answers \"not found\", {failed} failures)",
            policy.time_budget
        ),
        kind: ErrorKind::Transient,
    }
}

/// A schema cache in front of the registry at `location`: a Confluent-compatible one;
/// the AWS Glue Schema Registry is opened at the AWS edge and refused here.
pub fn open_registry<T>(location: &RegistryLocation) -> Result<SchemaCache<T>, String> {
    match location {
        RegistryLocation::Confluent { url, credentials } => Ok(SchemaCache::new(Arc::new(
            HttpRegistry::new(url, credentials.clone())?,
        ))),
        RegistryLocation::Glue { .. } => Err(
            "the AWS Glue Schema Registry needs a build with AWS support (kfs-iceberg's default feature aws)"
                .into(),
        ),
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
