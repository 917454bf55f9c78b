//! A process of a deployment: its own connections, all under one fault, running
//! committer ticks and converter events.

use super::*;

/// A step of a process failed; `retryable` says whether the schedule would simply run
/// again.
#[derive(Debug)]
pub struct TickError {
    pub kind: kfs_core::ErrorKind,
    pub retryable: bool,
    pub message: String,
}

impl TickError {
    fn of(kind: kfs_core::ErrorKind, e: impl std::fmt::Display) -> Self {
        Self {
            kind,
            retryable: kind.is_retryable(),
            message: e.to_string(),
        }
    }
}

/// One process of a deployment whose catalog and ledger (SQLite) and warehouse live in
/// `dir`: its own connections, every one of its side effects under `faults`.
pub struct Process<'a> {
    /// How tables are named and laid out (new tables only).
    pub naming: TableNaming,
    /// Whether its commits merge small files (processes that differ here lay the same
    /// commit out differently).
    pub coalesce: bool,
    pub source: FaultySource<'a>,
    pub catalog: FaultyCatalog,
    pub swap: FaultySwap,
    pub ledger: FaultyLedger<'a>,
    pub faults: Arc<Faults>,
    /// The schema registry of registry tables, under this process's fault (each
    /// process caches its own schemas, as each function instance does).
    pub schemas: Option<Arc<kfs_core::RegistrySchemas>>,
    /// When set, its ticks are wake-ups: they list and commit these tables alone
    /// (`PipelineConfig::only_tables`).
    pub woken_for: Option<BTreeSet<String>>,
    /// Where maintenance may list and delete: the deployment's warehouse.
    pub storage: kfs_core::MaintenanceStorage,
}

/// The catalog of the deployment in `dir`.
pub async fn open_catalog(dir: &Path) -> Result<kfs_core::testing::SqlCatalog, String> {
    open_sql_catalog(
        &dir.join("catalog.db"),
        &Warehouse::Local(dir.join("wh")),
        &S3Settings::default(),
    )
    .await
    .map_err(|e| e.to_string())
}

impl<'a> Process<'a> {
    pub async fn open(
        dir: &Path,
        source: &'a MemorySource,
        ledger: &'a SqliteLedger,
        faults: Arc<Faults>,
    ) -> Result<Self, String> {
        let catalog = open_catalog(dir).await?;
        let swap = SqlTableSwap::open(&dir.join("catalog.db"), LOCAL_CATALOG_NAME)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self {
            naming: TableNaming::default(),
            coalesce: false,
            source: FaultySource {
                inner: source,
                faults: faults.clone(),
            },
            catalog: FaultyCatalog {
                inner: Arc::new(catalog),
                faults: faults.clone(),
            },
            swap: FaultySwap {
                inner: swap,
                faults: faults.clone(),
            },
            ledger: faulty_ledger(ledger, faults.clone(), false),
            faults,
            schemas: None,
            woken_for: None,
            storage: kfs_core::MaintenanceStorage {
                s3: S3Settings::default(),
                warehouse: Warehouse::Local(dir.join("wh")),
            },
        })
    }

    /// The process reading registry tables' schemas from `registry`, under its fault.
    pub fn with_registry(mut self, registry: Arc<kfs_core::MemoryRegistry>) -> Self {
        let faulty = FaultyRegistry {
            inner: registry,
            faults: self.faults.clone(),
        };
        // Retries as in production, with short pauses (the matrices run thousands).
        let policy = kfs_core::LookupPolicy {
            first_pause: std::time::Duration::from_millis(1),
            ..kfs_core::LookupPolicy::default()
        };
        self.schemas = Some(Arc::new(kfs_core::SchemaCache::with_policy(
            Arc::new(faulty),
            policy,
        )));
        self
    }

    /// One committer tick: read etcd, run a pass (convert what is new, commit the
    /// table), then maintain the table by `maintenance`.
    pub async fn tick(
        &self,
        etcd: &EtcdState,
        crosscheck: CrossCheckPolicy,
        maintenance: Option<&MaintenancePolicy>,
    ) -> Result<(), TickError> {
        let hook: Arc<dyn FailpointHook> = self.faults.clone();
        failpoint::scoped(hook, async {
            let config = PipelineConfig {
                naming: self.naming.clone(),
                etcd: read_etcd(&self.faults, etcd),
                crosscheck,
                retry: FAST_RETRY,
                schemas: self.schemas.clone(),
                commit: kfs_core::CommitSettings {
                    coalesce: self.coalesce,
                    ..Default::default()
                },
                only_tables: self.woken_for.clone(),
                ..PipelineConfig::default()
            };
            let report = run_pass(
                &self.source,
                &self.catalog,
                &self.swap,
                &self.ledger,
                &config,
                &|_| {},
            )
            .await
            .map_err(|e| TickError::of(e.kind(), &e))?;
            // With KFS_SIM_TRACE, what each pass left each table waiting for.
            if std::env::var_os("KFS_SIM_TRACE").is_some() {
                for (table, outcome) in &report.tables {
                    eprintln!(
                        "  pass: {table} at {:?}, holds {:?}, {} dropped, {} late dropped, {} recovered",
                        outcome.watermarks,
                        outcome.holds,
                        outcome.runs_dropped,
                        outcome.late_dropped,
                        outcome.recovered
                    );
                }
            }
            // A pass isolates what failed and goes on: a tick that left a segment
            // unconverted, a table uncommitted or an item unread is not a clean one
            // (a feed refused its table is, in the scenarios with colliding feeds).
            if report.left_work() {
                return Err(TickError {
                    kind: kfs_core::ErrorKind::Transient,
                    retryable: true,
                    message: format!(
                        "failed segments {:?}, tables {:?}, unreadable items {:?}",
                        report.failed_segments, report.failed_tables, report.unreadable
                    ),
                });
            }
            let Some(policy) = maintenance else {
                return Ok(());
            };
            let ident = table_ident(&TableNaming::default().table_for("orders"));
            maintain_table(
                &self.catalog,
                &self.swap,
                &self.ledger,
                &self.storage,
                &ident,
                policy,
                None,
                now_ms(),
            )
            .await
            .map(|_| ())
            .map_err(|e| TickError::of(e.kind(), &e))
        })
        .await
    }

    /// The converter function handling S3 events for `keys` (as delivered: in any
    /// order, some twice).
    pub async fn convert_events(&self, keys: &[String]) -> Result<(), TickError> {
        let events: Vec<ObjectCreated> = keys
            .iter()
            .map(|key| ObjectCreated {
                bucket: BUCKET.into(),
                key: key.clone(),
                etag: None,
                sequencer: None,
                size: None,
            })
            .collect();
        let service = ConverterService::new(
            FaultySource {
                inner: self.source.inner,
                faults: self.faults.clone(),
            },
            CatalogHandle {
                catalog: Arc::new(FaultyCatalog {
                    inner: self.catalog.inner.clone(),
                    faults: self.faults.clone(),
                }),
                swap: Arc::new(FaultySwap {
                    inner: self.swap.inner.clone(),
                    faults: self.faults.clone(),
                }),
            },
            faulty_ledger(self.ledger.inner, self.faults.clone(), false),
            ConverterSettings {
                bucket: BUCKET.into(),
                prefix: String::new(),
                naming: self.naming.clone(),
                limits: Default::default(),
                concurrency: 2,
                // Room for one conversion at a time: admission waits, never fails.
                memory_budget_mib: Some(100),
                retry: FAST_RETRY,
                schemas: self.schemas.clone(),
            },
        );
        let hook: Arc<dyn FailpointHook> = self.faults.clone();
        for outcome in failpoint::scoped(hook, service.handle(&events)).await {
            outcome.map_err(|e| TickError::of(e.kind(), &e))?;
        }
        Ok(())
    }
}
