//! Schema lookups with a budget (issue 36, findings 7 and 8): a segment naming
//! thousands of schema ids makes a bounded number of lookups, several at once, and
//! the records past the cap are dead letters with the reason; a lagging registry
//! replica's 404 is asked again instead of sending the records to the dead-letter
//! table for the life of the process.

use crate::local;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use iceberg::Catalog;
use kfs_core::{
    PipelineConfig, RegisteredSchema, RegistryError, SchemaCache, SchemaId, SchemaKind,
    SchemaRegistry, run_pass, table_ident,
};
use kfs_plan::naming::{TableNaming, ValueFormat};
use local::{BoxError, Local, offsets};

const LONG: &str = r#"{"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}"#;

/// A registry holding [`LONG`] under every id, answering after `delay`, "not found"
/// for the first `not_found` lookups of each id; counting lookups and the most under
/// way at once.
#[derive(Debug, Default)]
pub struct Counting {
    pub delay: Duration,
    pub not_found: usize,
    pub asked: std::sync::Mutex<BTreeMap<SchemaId, usize>>,
    pub calls: AtomicUsize,
    pub now: AtomicUsize,
    pub most: AtomicUsize,
}

#[async_trait::async_trait]
impl SchemaRegistry for Counting {
    async fn schema(&self, id: SchemaId) -> Result<Option<RegisteredSchema>, RegistryError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        let asked = {
            let mut asked = self.asked.lock().map_err(|_| RegistryError {
                location: "counting".into(),
                message: "poisoned".into(),
                kind: kfs_core::ErrorKind::Transient,
            })?;
            let n = asked.entry(id).or_default();
            *n += 1;
            *n
        };
        Ok((asked > self.not_found).then(|| RegisteredSchema::new(SchemaKind::Avro, LONG)))
    }
}

/// A value of [`LONG`] framed with schema `id`: `n` as a zigzag varint.
pub fn long_value(id: u32, n: u8) -> Vec<u8> {
    let mut value = vec![0];
    value.extend_from_slice(&id.to_be_bytes());
    value.push(n.wrapping_mul(2) & 0x7f);
    value
}

fn config(registry: Arc<dyn SchemaRegistry>) -> PipelineConfig {
    PipelineConfig {
        naming: TableNaming {
            value_format: ValueFormat::Registry,
            ..TableNaming::default()
        },
        schemas: Some(Arc::new(SchemaCache::new(registry))),
        ..PipelineConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replicas_404_is_asked_again_not_dead_lettered() -> Result<(), BoxError> {
    let local = Local::open().await?;
    let registry = Arc::new(Counting {
        not_found: 1,
        ..Counting::default()
    });
    let config = config(registry.clone());
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 3, |o| Some(long_value(7, o as u8))),
    )?;
    let report = local.run_config(&config).await?;
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    let name = config.naming.table_for("orders");
    assert_eq!(offsets(&local.catalog, &name).await?.len(), 3);
    assert!(
        offsets(&local.catalog, &name.dead_letters())
            .await?
            .is_empty()
    );
    assert_eq!(registry.calls.load(Ordering::SeqCst), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_naming_5000_schema_ids_makes_bounded_concurrent_lookups() -> Result<(), BoxError>
{
    let local = Local::open().await?;
    let registry = Arc::new(Counting {
        delay: Duration::from_millis(5),
        ..Counting::default()
    });
    let config = config(registry.clone());
    local.put_records(
        "orders",
        kfs_workload::simple_records(0, 5000, |o| Some(long_value(1000 + o as u32, 1))),
    )?;
    let started = std::time::Instant::now();
    let report = run_pass(
        &local.source,
        &local.catalog,
        &local.swap,
        &local.ledger,
        &config,
        &|_| {},
    )
    .await?;
    let took = started.elapsed();
    assert!(report.quarantined.is_empty(), "{:?}", report.quarantined);
    let calls = registry.calls.load(Ordering::SeqCst);
    let most = registry.most.load(Ordering::SeqCst);
    assert!(
        calls <= 2 * kfs_core::MAX_SCHEMAS_PER_SEGMENT,
        "{calls} lookups"
    );
    assert!(most > 1 && most <= 16, "{most} lookups at once");
    let name = config.naming.table_for("orders");
    let rows = offsets(&local.catalog, &name).await?;
    let dead = crate::local::dead_letter_reasons(&local.catalog, &name).await?;
    assert_eq!(rows.len() + dead.len(), 5000);
    assert_eq!(rows.len(), kfs_core::MAX_SCHEMAS_PER_SEGMENT);
    assert!(
        dead.values().all(|why| why.contains("distinct schemas")),
        "{:?}",
        dead.values().next()
    );
    let _ = local.catalog.load_table(&table_ident(&name)).await?;
    eprintln!("5,000 ids: {calls} lookups, at most {most} at once, {took:?}");
    Ok(())
}
