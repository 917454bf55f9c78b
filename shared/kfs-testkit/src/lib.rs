//! Test helpers shared by the workspace's tests: a moto server (S3, DynamoDB, Glue)
//! on a free local port, stopped when dropped, PostgreSQL and etcd servers
//! (`services`), the functions' world in memory ([`InMemory`]), and the workspace
//! paths.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file below `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

pub mod memory;
pub mod rest_catalog;
mod services;

pub use memory::InMemory;
pub use services::{Etcd, Postgres};

/// A running `moto_server`, killed on drop.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// Where its request recorder writes, when it has one.
    _recording: Option<tempfile::TempDir>,
}

impl Moto {
    /// Starts `moto_server` (from `pip install "moto[server]"`, through
    /// `tests/python/moto_server.py`, which fixes one answer of its S3 Tables API) on a
    /// port the system chooses (the server reports it: no race with other tests for a
    /// free port) and waits until it accepts connections.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// [`Moto::start`] with moto's request recorder, which a test starts and stops
    /// (`s3_tool.py record start|stop`); it records into a temporary directory.
    pub fn start_recording() -> Self {
        Self::start_with(true)
    }

    fn start_with(recorder: bool) -> Self {
        let recording =
            recorder.then(|| tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}")));
        let mut command = Command::new("python3");
        command
            .arg(workspace_root().join("tests/python/moto_server.py"))
            .args(["-H", "127.0.0.1", "--ephemeral"]);
        if let Some(dir) = &recording {
            command
                .env("MOTO_ENABLE_RECORDING", "True")
                .env("MOTO_RECORDER_FILEPATH", dir.path().join("recording"));
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 for moto_server: {e}"));
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let Some(port) = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse::<u16>().ok())
        else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "moto_server did not start (is moto installed? scripts/test.sh makes the environment: source scripts/python-env.sh); it said {line:?}"
            );
        };
        Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            _recording: recording,
        }
    }

    /// The AWS environment variables that point a client at this server.
    pub fn env(&self) -> [(&'static str, String); 4] {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
        ]
    }

    /// Runs `tests/python/s3_tool.py` against this server; returns its output.
    pub fn tool(&self, args: &[&str]) -> String {
        let output = Command::new("python3")
            .arg(workspace_root().join("tests/python/s3_tool.py"))
            .args(args)
            .envs(self.env())
            .output()
            .unwrap_or_else(|e| panic!("s3_tool.py: {e}"));
        assert!(
            output.status.success(),
            "s3_tool.py {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Moto {
    /// Starts its request recorder afresh (a server from [`Moto::start_recording`]).
    pub fn record_start(&self) {
        self.tool(&["record", "start"]);
    }

    /// Stops its request recorder and counts what it recorded.
    pub fn record_stop(&self) -> RequestCounts {
        let counts = self.tool(&["record", "stop"]);
        RequestCounts(
            serde_json::from_str(&counts).unwrap_or_else(|e| panic!("recording: {e}: {counts}")),
        )
    }
}

/// An SQS event whose messages each carry the S3 `ObjectCreated` notification of one
/// of `keys` in the segment bucket, as the converter receives them.
pub fn s3_events_in_sqs<K: AsRef<str>>(keys: &[K]) -> serde_json::Value {
    let records: Vec<serde_json::Value> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let body = serde_json::json!({"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
                "s3": {"bucket": {"name": "kafscale-segments"}, "object": {"key": key.as_ref()}}}]});
            serde_json::json!({"messageId": format!("m{i}"), "body": body.to_string(), "eventSource": "aws:sqs"})
        })
        .collect();
    serde_json::json!({ "Records": records })
}

/// The message ids an SQS handler's answer asks to see again (its
/// `batchItemFailures`), in order.
pub fn batch_item_failures(answer: &serde_json::Value) -> Vec<&str> {
    answer["batchItemFailures"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["itemIdentifier"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// Requests moto's recorder counted, per service (`s3`, `dynamodb`, `glue`, …) and
/// operation (the S3 method, or the DynamoDB target).
#[derive(Debug, Clone)]
pub struct RequestCounts(pub serde_json::Value);

impl RequestCounts {
    /// Requests to `service` of the `operations` named (every operation when empty).
    pub fn sum(&self, service: &str, operations: &[&str]) -> u64 {
        self.0[service]
            .as_object()
            .map(|ops| {
                ops.iter()
                    .filter(|(op, _)| operations.is_empty() || operations.contains(&op.as_str()))
                    .map(|(_, n)| n.as_u64().unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0)
    }

    /// DynamoDB writes (each item put, updated or deleted, alone or in a batch call).
    pub fn dynamodb_writes(&self) -> u64 {
        self.sum(
            "dynamodb",
            &[
                "PutItem",
                "UpdateItem",
                "DeleteItem",
                "BatchWriteItem",
                "TransactWriteItems",
            ],
        )
    }

    /// Writes the counts, with `facts` about the workload that made them (segments,
    /// their size, runs, messages), to `target/request-counts/<name>.json`, where
    /// `scripts/cost_model.py` reads them.
    pub fn save(&self, name: &str, facts: serde_json::Value) {
        let dir = workspace_root().join("target/request-counts");
        let mut document = facts;
        document["requests"] = self.0.clone();
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::write(
                dir.join(format!("{name}.json")),
                serde_json::to_string_pretty(&document).unwrap_or_default(),
            )
        });
        written.unwrap_or_else(|e| panic!("request counts: {e}"));
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A segment of `count` records from offset `base`, with its index: keys `k<offset>`,
/// 100-byte values, zstd.
pub fn sample_segment(base: i64, count: i64, value_byte: u8) -> kfs_segment::EncodedSegment {
    let mut records = kfs_workload::simple_records(base, count, |_| Some(vec![value_byte; 100]));
    for record in &mut records {
        record.headers = vec![(b"h".to_vec(), Some(b"x".to_vec()))];
    }
    let batch = kfs_segment::BatchSpec::new(records, kfs_segment::Compression::Zstd);
    kfs_segment::encode_segment(&[batch], 1_700_000_000_000)
        .unwrap_or_else(|e| panic!("encode: {e}"))
}

/// Source, ledger and catalog on a moto server: the world the Lambda functions see,
/// with the ledger table made from `infra/ledger-table.json`. The catalog is the SQL
/// catalog on a local SQLite file over the S3 warehouse: iceberg-rust 0.10.1's Glue
/// catalog cannot register timestamptz columns, which the topic tables have.
pub struct LocalStack {
    /// The server.
    pub moto: Moto,
    /// The S3 settings pointing at it.
    pub s3: kfs_core::S3Settings,
    /// Segment bucket.
    pub bucket: String,
    /// Ledger table.
    pub ledger_table: String,
    /// Warehouse.
    pub warehouse: kfs_core::Warehouse,
    /// Holds the catalog's SQLite file.
    state: tempfile::TempDir,
}

impl LocalStack {
    /// Starts moto and creates the buckets and the ledger table.
    pub fn start() -> Self {
        Self::on(Moto::start())
    }

    /// [`LocalStack::start`] on a moto with its request recorder
    /// ([`Moto::start_recording`]).
    pub fn start_recording() -> Self {
        Self::on(Moto::start_recording())
    }

    fn on(moto: Moto) -> Self {
        moto.tool(&["mb", "kafscale-segments", "lakehouse"]);
        let definition = workspace_root().join("infra/ledger-table.json");
        moto.tool(&["ledger", "kfs-ledger", &definition.to_string_lossy()]);
        let s3 = kfs_core::S3Settings {
            endpoint: Some(moto.endpoint.clone()),
            region: "us-east-1".into(),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            session_token: None,
        };
        Self {
            moto,
            s3,
            bucket: "kafscale-segments".into(),
            ledger_table: "kfs-ledger".into(),
            warehouse: kfs_core::Warehouse::S3 {
                bucket: "lakehouse".into(),
                prefix: "warehouse".into(),
            },
            state: tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}")),
        }
    }

    /// Uploads objects (key, bytes) to the segment bucket.
    pub fn put(&self, objects: &[(&str, &[u8])]) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        for (key, bytes) in objects {
            let path = dir.path().join(key);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
            }
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
        }
        self.moto.tool(&[
            "put",
            &dir.path().to_string_lossy(),
            &format!("s3://{}", self.bucket),
        ]);
    }

    /// The functions' configuration on this stack: the AWS variables pointing at moto,
    /// the segment bucket and the ledger table, and `vars` (`WAREHOUSE`, the catalog's).
    pub fn function_env(&self, vars: &[(&str, String)]) -> kfs_aws::function_env::FunctionEnv {
        let mut all: std::collections::HashMap<String, String> = self
            .moto
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        all.insert("SEGMENT_BUCKET".into(), self.bucket.clone());
        all.insert("LEDGER_TABLE".into(), self.ledger_table.clone());
        all.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        kfs_aws::function_env::FunctionEnv::from_lookup(&|name| all.get(name).cloned())
            .unwrap_or_else(|e| panic!("function environment: {e}"))
    }

    /// The segment source at the bucket root.
    pub fn source(&self) -> kfs_core::OpendalSource {
        kfs_core::OpendalSource::s3(&self.bucket, "", &self.s3)
            .unwrap_or_else(|e| panic!("source: {e}"))
    }

    /// The DynamoDB ledger.
    pub fn ledger(&self) -> kfs_aws::dynamo_ledger::DynamoLedger {
        use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&self.moto.endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .build();
        kfs_aws::dynamo_ledger::DynamoLedger::new(
            aws_sdk_dynamodb::Client::from_conf(config),
            self.ledger_table.clone(),
        )
    }

    /// An SQS client on this stack.
    fn sqs(&self) -> aws_sdk_sqs::Client {
        use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&self.moto.endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// A new standard queue that the segment bucket's `ObjectCreated` notifications go
    /// to, as the stack's segment queue (moto's S3 sends them itself): a client and
    /// its URL.
    pub async fn segment_event_queue(&self) -> (aws_sdk_sqs::Client, String) {
        use aws_sdk_sqs::types::QueueAttributeName;
        let client = self.sqs();
        let created = client
            .create_queue()
            .queue_name("kfs-segment-events")
            .send()
            .await
            .unwrap_or_else(|e| panic!("create_queue: {e:?}"));
        let url = created.queue_url().unwrap_or_default().to_owned();
        let attributes = client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap_or_else(|e| panic!("get_queue_attributes: {e:?}"));
        let arn = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .cloned()
            .unwrap_or_default();
        self.moto.tool(&["notify", &self.bucket, &arn]);
        (client, url)
    }

    /// A new FIFO wake-up queue on this stack, as the template makes it (high
    /// throughput: deduplication and limits per message group): a client and its URL.
    pub async fn wakeup_queue(&self) -> (aws_sdk_sqs::Client, String) {
        use aws_sdk_sqs::types::QueueAttributeName;
        let client = self.sqs();
        let created = client
            .create_queue()
            .queue_name("kfs-wakeups.fifo")
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::DeduplicationScope, "messageGroup")
            .attributes(QueueAttributeName::FifoThroughputLimit, "perMessageGroupId")
            .send()
            .await
            .unwrap_or_else(|e| panic!("create_queue: {e:?}"));
        let url = created.queue_url().unwrap_or_default().to_owned();
        (client, url)
    }

    /// The converter service on this stack: segments at the bucket root, default naming
    /// and limits.
    pub fn converter(
        &self,
        catalog: kfs_core::CatalogHandle,
        concurrency: usize,
    ) -> kfs_core::ConverterService<kfs_core::OpendalSource, kfs_aws::dynamo_ledger::DynamoLedger>
    {
        kfs_core::ConverterService::new(
            self.source(),
            catalog,
            self.ledger(),
            converter_settings(&self.bucket, concurrency),
        )
    }

    /// The Glue catalog on moto.
    pub async fn glue_catalog(&self) -> std::sync::Arc<dyn iceberg::Catalog> {
        self.glue_catalog_handle().await.catalog
    }

    /// The Glue catalog on moto, with its pointer swap.
    pub async fn glue_catalog_handle(&self) -> kfs_core::CatalogHandle {
        let kind = kfs_core::CatalogKind::Glue {
            endpoint: Some(self.moto.endpoint.clone()),
        };
        kfs_aws::open_catalog_handle(&kind, &self.warehouse, &self.s3)
            .await
            .unwrap_or_else(|e| panic!("glue catalog: {e}"))
    }

    /// An S3 Tables table bucket `name` on moto, as the catalog, with its swap.
    pub async fn s3tables_catalog_handle(&self, name: &str) -> kfs_core::CatalogHandle {
        let settings = kfs_core::S3TablesSettings {
            table_bucket_arn: self.moto.tool(&["table-bucket", name]),
            endpoint: Some(self.moto.endpoint.clone()),
        };
        kfs_aws::open_catalog_handle(
            &kfs_core::CatalogKind::S3Tables(settings),
            &self.warehouse,
            &self.s3,
        )
        .await
        .unwrap_or_else(|e| panic!("s3tables catalog: {e}"))
    }

    /// The catalog (see the type's docs).
    pub async fn catalog(&self) -> std::sync::Arc<dyn iceberg::Catalog> {
        self.catalog_handle().await.catalog
    }

    /// The catalog (see the type's docs), with its pointer swap.
    pub async fn catalog_handle(&self) -> kfs_core::CatalogHandle {
        let kind = kfs_core::CatalogKind::Sql {
            database: self.state.path().join("catalog.db"),
        };
        kfs_core::open_catalog_handle(&kind, &self.warehouse, &self.s3)
            .await
            .unwrap_or_else(|e| panic!("catalog: {e}"))
    }
}

/// The converter's settings for segments at the root of `bucket`: default naming and
/// limits, `concurrency` conversions at a time, a 1,024 MB function's memory budget.
pub fn converter_settings(bucket: &str, concurrency: usize) -> kfs_core::ConverterSettings {
    kfs_core::ConverterSettings {
        bucket: bucket.to_owned(),
        prefix: String::new(),
        naming: kfs_core::PipelineConfig::default().naming,
        limits: kfs_segment::DecodeLimits::default(),
        concurrency,
        // A 1,024 MB function's budget, as Lambda would give it.
        memory_budget_mib: Some(896),
        retry: kfs_core::RetryPolicy::default(),
        schemas: None,
    }
}

/// The table `table` (`namespace.name`, or a name in `kafscale`) as `catalog` has it.
pub async fn load_table(catalog: &dyn iceberg::Catalog, table: &str) -> iceberg::table::Table {
    let (namespace, name) = table.split_once('.').unwrap_or(("kafscale", table));
    let ident = iceberg::TableIdent::new(
        iceberg::NamespaceIdent::new(namespace.to_owned()),
        name.to_owned(),
    );
    catalog
        .load_table(&ident)
        .await
        .unwrap_or_else(|e| panic!("load {ident}: {e}"))
}

/// Records and distinct data files live in a table's current snapshot.
pub async fn table_contents(catalog: &dyn iceberg::Catalog, table: &str) -> (u64, usize) {
    let table = load_table(catalog, table).await;
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return (0, 0);
    };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .unwrap_or_else(|e| panic!("manifest list: {e}"));
    let mut records = 0;
    let mut paths = std::collections::BTreeSet::new();
    for manifest in list.entries() {
        let manifest = manifest
            .load_manifest(table.file_io())
            .await
            .unwrap_or_else(|e| panic!("manifest: {e}"));
        for entry in manifest.entries().iter().filter(|e| e.is_alive()) {
            records += entry.data_file().record_count();
            assert!(
                paths.insert(entry.data_file().file_path().to_owned()),
                "a data file is registered twice"
            );
        }
    }
    (records, paths.len())
}

/// `(partition, offset)` → the rows holding it in the current snapshot of `table`
/// (`namespace.name`, or a name in `kafscale`); empty without a snapshot.
pub async fn table_offsets(
    catalog: &dyn iceberg::Catalog,
    table: &str,
) -> std::collections::BTreeMap<(i32, i64), usize> {
    let ident = table.to_owned();
    let table = load_table(catalog, table).await;
    let mut found = std::collections::BTreeMap::new();
    if table.metadata().current_snapshot().is_none() {
        return found;
    }
    let mut batches = table
        .scan()
        .select(["partition", "offset"])
        .build()
        .unwrap_or_else(|e| panic!("scan {ident}: {e}"))
        .to_arrow()
        .await
        .unwrap_or_else(|e| panic!("scan {ident}: {e}"));
    // The stream's own method (a trait object's), without a futures dependency.
    while let Some(batch) = std::future::poll_fn(|cx| batches.as_mut().poll_next(cx)).await {
        let batch = batch.unwrap_or_else(|e| panic!("read {ident}: {e}"));
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap_or_else(|| panic!("{ident}: no column {name}"))
                .to_data()
        };
        // Both columns are required: values without nulls.
        let (partitions, offsets) = (column("partition"), column("offset"));
        let partitions = &partitions.buffers()[0].typed_data::<i32>()
            [partitions.offset()..partitions.offset() + partitions.len()];
        let offsets = &offsets.buffers()[0].typed_data::<i64>()
            [offsets.offset()..offsets.offset() + offsets.len()];
        for (partition, offset) in partitions.iter().zip(offsets) {
            *found.entry((*partition, *offset)).or_default() += 1;
        }
    }
    found
}
