//! The ledger: what happened to every segment. One trait, an embedded SQLite
//! implementation (the local default) and an in-memory one (unit tests and fault
//! injection); DynamoDB implements it for the Lambda deployment.
//!
//! A segment is identified by its object key; its entry records the ETag (or content
//! hash) of the version that was converted, so a key rewritten with other content is
//! recognised. States: `pending` (converted, data files written, not yet in the table),
//! `committed` (with the snapshot id), `quarantined` (with the error). Every transition
//! is conditional on the state it leaves, so replays and races are harmless.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// The state of a segment in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EntryState {
    /// Converted; its data files wait for a commit.
    Pending,
    /// In the table since this snapshot.
    Committed {
        /// The snapshot that added it.
        snapshot_id: i64,
    },
    /// Could not be converted; holds back its partition until an operator acts.
    Quarantined {
        /// Why, worded for an operator.
        error: String,
    },
    /// Quarantined, then skipped by an operator: its offsets are committed as a gap
    /// recorded as skipped, and its partition moves on.
    Skipped {
        /// Why it was quarantined.
        error: String,
    },
}

impl EntryState {
    /// The state's name as stored.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Committed { .. } => "committed",
            Self::Quarantined { .. } => "quarantined",
            Self::Skipped { .. } => "skipped",
        }
    }
}

/// One segment's record in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Object key of the `.kfs`, relative to the source prefix.
    pub segment: String,
    /// ETag or content hash of the converted version.
    pub etag: String,
    /// Target table, `namespace.name`.
    pub table: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Last offset of the segment (the base offset when unknown, e.g. quarantined).
    pub last_offset: i64,
    /// Data records.
    pub records: u64,
    /// Bytes of the data files written.
    pub bytes: u64,
    /// The data files, as Iceberg `DataFile` JSON.
    pub data_files: Vec<String>,
    /// What went to the table's dead-letter table (JSON values that could not be
    /// written); committed with the entry, before the table's own commit.
    #[serde(default)]
    pub dead_letters: DeadLetters,
    /// State.
    pub state: EntryState,
    /// When the entry was created, Unix ms.
    pub created_ms: i64,
    /// When the entry last changed, Unix ms.
    pub updated_ms: i64,
}

/// A segment's records for the dead-letter table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetters {
    /// Records.
    pub records: u64,
    /// The dead-letter table's data files, as Iceberg `DataFile` JSON.
    pub files: Vec<String>,
}

impl DeadLetters {
    /// True when the segment had no record for the dead-letter table.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// As stored (JSON) for the entry of `segment`, `None` when empty.
    pub fn to_stored(&self, segment: &str) -> Result<Option<String>, LedgerError> {
        if self.is_empty() {
            return Ok(None);
        }
        serde_json::to_string(self)
            .map(Some)
            .map_err(|e| LedgerError::Corrupt {
                segment: segment.to_owned(),
                reason: format!("dead_letters: {e}"),
            })
    }

    /// From the stored form of the entry of `segment` (absent: empty).
    pub fn from_stored(stored: Option<&str>, segment: &str) -> Result<Self, LedgerError> {
        stored
            .map_or(Ok(Self::default()), serde_json::from_str)
            .map_err(|e| LedgerError::Corrupt {
                segment: segment.to_owned(),
                reason: format!("dead_letters: {e}"),
            })
    }
}

/// What a conditional insert found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The entry was written.
    Inserted,
    /// An entry for the segment already existed; it was left as it is.
    Exists(Box<LedgerEntry>),
}

/// A ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The backing store failed.
    #[error("ledger store failed: {message}")]
    Store {
        /// What failed.
        message: String,
        /// Whether retrying may succeed.
        retryable: bool,
    },
    /// A stored entry could not be read.
    #[error("ledger entry {segment} is unreadable: {reason}")]
    Corrupt {
        /// The segment.
        segment: String,
        /// Why.
        reason: String,
    },
}

impl LedgerError {
    /// Whether retrying may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Store {
                retryable: true,
                ..
            }
        )
    }
}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        let retryable = matches!(
            e,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
        ) || e.to_string().contains("database is locked");
        Self::Store {
            message: e.to_string(),
            retryable,
        }
    }
}

/// The ledger interface every backend implements.
pub trait Ledger: Send + Sync {
    /// The entry of a segment, if any.
    fn get(
        &self,
        segment: &str,
    ) -> impl Future<Output = Result<Option<LedgerEntry>, LedgerError>> + Send;

    /// Inserts an entry unless one exists for the segment.
    fn insert(
        &self,
        entry: &LedgerEntry,
    ) -> impl Future<Output = Result<InsertOutcome, LedgerError>> + Send;

    /// Every entry in a state named `state` (`pending`, `committed`, `quarantined`,
    /// `skipped`),
    /// optionally of one table, ordered by table, partition and base offset.
    fn list(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> impl Future<Output = Result<Vec<LedgerEntry>, LedgerError>> + Send;

    /// Moves pending entries to committed; returns how many moved (entries in another
    /// state are left alone).
    fn mark_committed(
        &self,
        segments: &[String],
        snapshot_id: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<usize, LedgerError>> + Send;

    /// Removes a quarantined entry so that the segment is converted again (an operator's
    /// retry after a fix); returns whether it was there and quarantined (entries in
    /// another state are left alone).
    fn release_quarantined(
        &self,
        segment: &str,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;

    /// Moves a quarantined entry to skipped (an operator gives up its offsets, which the
    /// next commit records as a skipped gap); returns whether it was quarantined.
    fn skip_quarantined(
        &self,
        segment: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, LedgerError>> + Send;
}

/// After a conditional insert found the segment taken: the entry that is there.
pub async fn existing_entry(
    ledger: &impl Ledger,
    segment: &str,
) -> Result<InsertOutcome, LedgerError> {
    match ledger.get(segment).await? {
        Some(existing) => Ok(InsertOutcome::Exists(Box::new(existing))),
        None => Err(LedgerError::Store {
            message: format!("{segment} exists by its insert condition but cannot be read"),
            retryable: true,
        }),
    }
}

/// An in-memory ledger for unit tests and fault injection.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    entries: Mutex<BTreeMap<String, LedgerEntry>>,
}

impl MemoryLedger {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, LedgerEntry>) -> T,
    ) -> Result<T, LedgerError> {
        let mut guard = self.entries.lock().map_err(|_| LedgerError::Store {
            message: "memory ledger lock poisoned".into(),
            retryable: false,
        })?;
        Ok(f(&mut guard))
    }
}

/// Orders entries by table, partition and base offset, as `Ledger::list` returns them.
pub fn sort_entries(entries: &mut [LedgerEntry]) {
    entries.sort_by(|a, b| {
        (&a.table, a.partition, a.base_offset).cmp(&(&b.table, b.partition, b.base_offset))
    });
}

impl Ledger for MemoryLedger {
    async fn get(&self, segment: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        self.with(|m| m.get(segment).cloned())
    }

    async fn insert(&self, entry: &LedgerEntry) -> Result<InsertOutcome, LedgerError> {
        self.with(|m| match m.get(&entry.segment) {
            Some(existing) => InsertOutcome::Exists(Box::new(existing.clone())),
            None => {
                m.insert(entry.segment.clone(), entry.clone());
                InsertOutcome::Inserted
            }
        })
    }

    async fn list(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> Result<Vec<LedgerEntry>, LedgerError> {
        let mut out = self.with(|m| {
            m.values()
                .filter(|e| {
                    state.is_none_or(|s| e.state.name() == s) && table.is_none_or(|t| e.table == t)
                })
                .cloned()
                .collect::<Vec<_>>()
        })?;
        sort_entries(&mut out);
        Ok(out)
    }

    async fn mark_committed(
        &self,
        segments: &[String],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        self.with(|m| {
            let mut moved = 0;
            for segment in segments {
                if let Some(entry) = m.get_mut(segment)
                    && entry.state == EntryState::Pending
                {
                    entry.state = EntryState::Committed { snapshot_id };
                    entry.updated_ms = now_ms;
                    moved += 1;
                }
            }
            moved
        })
    }

    async fn release_quarantined(&self, segment: &str) -> Result<bool, LedgerError> {
        self.with(|m| {
            let quarantined = m
                .get(segment)
                .is_some_and(|e| matches!(e.state, EntryState::Quarantined { .. }));
            if quarantined {
                m.remove(segment);
            }
            quarantined
        })
    }

    async fn skip_quarantined(&self, segment: &str, now_ms: i64) -> Result<bool, LedgerError> {
        self.with(|m| match m.get_mut(segment) {
            Some(entry) => match &entry.state {
                EntryState::Quarantined { error } => {
                    entry.state = EntryState::Skipped {
                        error: error.clone(),
                    };
                    entry.updated_ms = now_ms;
                    true
                }
                _ => false,
            },
            None => false,
        })
    }
}

/// The embedded ledger: one SQLite file (WAL mode), safe for several processes.
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    pool: SqlitePool,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ledger (
    segment TEXT PRIMARY KEY,
    etag TEXT NOT NULL,
    table_name TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition_id INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    records INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    data_files TEXT NOT NULL,
    state TEXT NOT NULL,
    snapshot_id INTEGER,
    error TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    dead_letters TEXT
);
CREATE INDEX IF NOT EXISTS ledger_by_state ON ledger (state, table_name, partition_id, base_offset);
";

impl SqliteLedger {
    /// Opens (creating if needed) the ledger file at `path`.
    pub async fn open(path: &Path) -> Result<Self, LedgerError> {
        // Processes opening a new ledger at the same moment race to switch it to WAL,
        // which SQLite answers with "database is locked" at once (no busy wait): retry.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::try_open(path).await {
                Err(sqlx::Error::Database(e)) if e.message().contains("locked") && attempt < 10 => {
                    tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                }
                result => return Ok(result?),
            }
        }
    }

    async fn try_open(path: &Path) -> Result<Self, sqlx::Error> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(30));
        // No idle timeout and no lifetime: no pool maintenance task, which in sqlx 0.8
        // can wedge in a busy loop (launchbadge/sqlx#3645); see `open_sql_catalog`.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await?;
        sqlx::raw_sql(SCHEMA).execute(&pool).await?;
        // Ledgers created before dead letters existed get the column.
        let columns: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info('ledger')")
                .fetch_all(&pool)
                .await?;
        if !columns.iter().any(|c| c == "dead_letters") {
            let added = sqlx::raw_sql("ALTER TABLE ledger ADD COLUMN dead_letters TEXT")
                .execute(&pool)
                .await;
            // A process opening the ledger at the same moment may have added it.
            if let Err(e) = added
                && !e.to_string().contains("duplicate column")
            {
                return Err(e);
            }
        }
        Ok(Self { pool })
    }

    fn row_to_entry(row: &sqlx::sqlite::SqliteRow) -> Result<LedgerEntry, LedgerError> {
        let segment: String = row.try_get("segment")?;
        let corrupt = |reason: String| LedgerError::Corrupt {
            segment: segment.clone(),
            reason,
        };
        let state_name: String = row.try_get("state")?;
        let state = match state_name.as_str() {
            "pending" => EntryState::Pending,
            "committed" => EntryState::Committed {
                snapshot_id: row
                    .try_get::<Option<i64>, _>("snapshot_id")?
                    .ok_or_else(|| corrupt("committed without a snapshot id".into()))?,
            },
            "quarantined" => EntryState::Quarantined {
                error: row
                    .try_get::<Option<String>, _>("error")?
                    .unwrap_or_default(),
            },
            "skipped" => EntryState::Skipped {
                error: row
                    .try_get::<Option<String>, _>("error")?
                    .unwrap_or_default(),
            },
            other => return Err(corrupt(format!("unknown state {other:?}"))),
        };
        let data_files: String = row.try_get("data_files")?;
        let data_files: Vec<String> =
            serde_json::from_str(&data_files).map_err(|e| corrupt(e.to_string()))?;
        let dead_letters: Option<String> = row.try_get("dead_letters")?;
        let dead_letters = DeadLetters::from_stored(dead_letters.as_deref(), &segment)?;
        Ok(LedgerEntry {
            dead_letters,
            etag: row.try_get("etag")?,
            table: row.try_get("table_name")?,
            topic: row.try_get("topic")?,
            partition: row.try_get("partition_id")?,
            base_offset: row.try_get("base_offset")?,
            last_offset: row.try_get("last_offset")?,
            records: row.try_get::<i64, _>("records")? as u64,
            bytes: row.try_get::<i64, _>("bytes")? as u64,
            data_files,
            state,
            created_ms: row.try_get("created_ms")?,
            updated_ms: row.try_get("updated_ms")?,
            segment,
        })
    }
}

impl Ledger for SqliteLedger {
    async fn get(&self, segment: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        let row = sqlx::query("SELECT * FROM ledger WHERE segment = ?")
            .bind(segment)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(Self::row_to_entry).transpose()
    }

    async fn insert(&self, entry: &LedgerEntry) -> Result<InsertOutcome, LedgerError> {
        let (snapshot_id, error) = match &entry.state {
            EntryState::Pending => (None, None),
            EntryState::Committed { snapshot_id } => (Some(*snapshot_id), None),
            EntryState::Quarantined { error } | EntryState::Skipped { error } => {
                (None, Some(error.clone()))
            }
        };
        let data_files =
            serde_json::to_string(&entry.data_files).map_err(|e| LedgerError::Corrupt {
                segment: entry.segment.clone(),
                reason: e.to_string(),
            })?;
        let dead_letters = entry.dead_letters.to_stored(&entry.segment)?;
        let result = sqlx::query(
            "INSERT INTO ledger (segment, etag, table_name, topic, partition_id, base_offset, last_offset, records, bytes,
                                 data_files, state, snapshot_id, error, created_ms, updated_ms, dead_letters)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (segment) DO NOTHING",
        )
        .bind(&entry.segment)
        .bind(&entry.etag)
        .bind(&entry.table)
        .bind(&entry.topic)
        .bind(entry.partition)
        .bind(entry.base_offset)
        .bind(entry.last_offset)
        .bind(entry.records as i64)
        .bind(entry.bytes as i64)
        .bind(data_files)
        .bind(entry.state.name())
        .bind(snapshot_id)
        .bind(error)
        .bind(entry.created_ms)
        .bind(entry.updated_ms)
        .bind(dead_letters)
        .execute(&self.pool)
        .await?;
        if result.rows_affected() == 1 {
            return Ok(InsertOutcome::Inserted);
        }
        existing_entry(self, &entry.segment).await
    }

    async fn list(
        &self,
        state: Option<&str>,
        table: Option<&str>,
    ) -> Result<Vec<LedgerEntry>, LedgerError> {
        let rows = sqlx::query(
            "SELECT * FROM ledger WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR table_name = ?2)
             ORDER BY table_name, partition_id, base_offset",
        )
        .bind(state)
        .bind(table)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Self::row_to_entry).collect()
    }

    async fn mark_committed(
        &self,
        segments: &[String],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        let mut tx = self.pool.begin().await?;
        let mut moved = 0;
        for segment in segments {
            let result = sqlx::query(
                "UPDATE ledger SET state = 'committed', snapshot_id = ?, updated_ms = ? WHERE segment = ? AND state = 'pending'",
            )
            .bind(snapshot_id)
            .bind(now_ms)
            .bind(segment)
            .execute(&mut *tx)
            .await?;
            moved += result.rows_affected() as usize;
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn release_quarantined(&self, segment: &str) -> Result<bool, LedgerError> {
        let result = sqlx::query("DELETE FROM ledger WHERE segment = ? AND state = 'quarantined'")
            .bind(segment)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn skip_quarantined(&self, segment: &str, now_ms: i64) -> Result<bool, LedgerError> {
        let result = sqlx::query(
            "UPDATE ledger SET state = 'skipped', updated_ms = ? WHERE segment = ? AND state = 'quarantined'",
        )
        .bind(now_ms)
        .bind(segment)
        .execute(&self.pool)
        .await?;
        Ok(result.rows_affected() == 1)
    }
}

/// The behaviour every [`Ledger`] implementation must show, checked on an empty
/// ledger by each implementation's tests: conditional inserts, transitions only from
/// `pending`, and listings by state and table. Returns the first violation.
pub async fn check_contract(ledger: &impl Ledger) -> Result<(), String> {
    fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: got {got:?}, expected {want:?}"))
        }
    }
    let store = |e: LedgerError| e.to_string();
    let entry = |segment: &str, base_offset: i64, state: EntryState| LedgerEntry {
        segment: segment.into(),
        etag: "e1".into(),
        table: "kafscale.orders".into(),
        topic: "orders".into(),
        partition: 0,
        base_offset,
        last_offset: base_offset + 9,
        records: 10,
        bytes: 1000,
        data_files: vec!["{\"file_path\":\"x\"}".into()],
        dead_letters: DeadLetters {
            records: 1,
            files: vec!["{\"file_path\":\"d\"}".into()],
        },
        state,
        created_ms: 1,
        updated_ms: 1,
    };
    let pending = entry(
        "ns/orders/0/segment-00000000000000000010.kfs",
        10,
        EntryState::Pending,
    );
    let later = entry(
        "ns/orders/0/segment-00000000000000000030.kfs",
        30,
        EntryState::Pending,
    );
    expect(
        "first insert",
        ledger.insert(&later).await.map_err(store)?,
        InsertOutcome::Inserted,
    )?;
    expect(
        "second insert",
        ledger.insert(&pending).await.map_err(store)?,
        InsertOutcome::Inserted,
    )?;
    let mut rewritten = pending.clone();
    rewritten.etag = "e2".into();
    expect(
        "insert over an existing entry",
        ledger.insert(&rewritten).await.map_err(store)?,
        InsertOutcome::Exists(Box::new(pending.clone())),
    )?;
    let bad = entry(
        "ns/orders/0/segment-00000000000000000020.kfs",
        20,
        EntryState::Quarantined {
            error: "at byte 3: bad".into(),
        },
    );
    ledger.insert(&bad).await.map_err(store)?;
    expect(
        "pending, in offset order",
        ledger.list(Some("pending"), None).await.map_err(store)?,
        vec![pending.clone(), later.clone()],
    )?;
    expect(
        "pending of the table",
        ledger
            .list(Some("pending"), Some("kafscale.orders"))
            .await
            .map_err(store)?
            .len(),
        2,
    )?;
    expect(
        "pending of another table",
        ledger
            .list(Some("pending"), Some("kafscale.other"))
            .await
            .map_err(store)?,
        vec![],
    )?;
    expect(
        "quarantined",
        ledger
            .list(Some("quarantined"), Some("kafscale.orders"))
            .await
            .map_err(store)?,
        vec![bad.clone()],
    )?;
    let both = vec![pending.segment.clone(), bad.segment.clone()];
    expect(
        "first marking",
        ledger.mark_committed(&both, 77, 5).await.map_err(store)?,
        1,
    )?;
    expect(
        "repeated marking",
        ledger.mark_committed(&both, 78, 6).await.map_err(store)?,
        0,
    )?;
    let committed = ledger.get(&pending.segment).await.map_err(store)?;
    expect(
        "committed entry",
        committed.map(|e| (e.state, e.updated_ms)),
        Some((EntryState::Committed { snapshot_id: 77 }, 5)),
    )?;
    expect(
        "quarantined entry untouched",
        ledger
            .get(&bad.segment)
            .await
            .map_err(store)?
            .map(|e| e.state),
        Some(bad.state.clone()),
    )?;
    expect(
        "pending after marking",
        ledger.list(Some("pending"), None).await.map_err(store)?,
        vec![later],
    )?;
    expect(
        "committed listing",
        ledger
            .list(Some("committed"), None)
            .await
            .map_err(store)?
            .len(),
        1,
    )?;
    expect(
        "all entries",
        ledger.list(None, None).await.map_err(store)?.len(),
        3,
    )?;
    expect(
        "unknown segment",
        ledger.get("nope").await.map_err(store)?,
        None,
    )?;
    expect(
        "releasing a committed entry",
        ledger
            .release_quarantined(&pending.segment)
            .await
            .map_err(store)?,
        false,
    )?;
    expect(
        "releasing a quarantined entry",
        ledger
            .release_quarantined(&bad.segment)
            .await
            .map_err(store)?,
        true,
    )?;
    expect(
        "released entry",
        ledger.get(&bad.segment).await.map_err(store)?,
        None,
    )?;
    expect(
        "releasing it again",
        ledger
            .release_quarantined(&bad.segment)
            .await
            .map_err(store)?,
        false,
    )?;
    // Skipping: only from quarantined, keeping the error, listed by state and table.
    let worse = LedgerEntry {
        segment: "ns/orders/0/segment-00000000000000000500.kfs".into(),
        base_offset: 500,
        ..bad.clone()
    };
    ledger.insert(&worse).await.map_err(store)?;
    expect(
        "skipping a committed entry",
        ledger
            .skip_quarantined(&pending.segment, 9)
            .await
            .map_err(store)?,
        false,
    )?;
    expect(
        "skipping a quarantined entry",
        ledger
            .skip_quarantined(&worse.segment, 9)
            .await
            .map_err(store)?,
        true,
    )?;
    expect(
        "skipped entry",
        ledger
            .get(&worse.segment)
            .await
            .map_err(store)?
            .map(|e| (e.state, e.updated_ms)),
        Some((
            EntryState::Skipped {
                error: "at byte 3: bad".into(),
            },
            9,
        )),
    )?;
    expect(
        "skipped listing",
        ledger
            .list(Some("skipped"), Some("kafscale.orders"))
            .await
            .map_err(store)?
            .len(),
        1,
    )?;
    expect(
        "skipping it again",
        ledger
            .skip_quarantined(&worse.segment, 10)
            .await
            .map_err(store)?,
        false,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_ledger_keeps_the_contract() -> Result<(), String> {
        check_contract(&MemoryLedger::default()).await
    }

    #[tokio::test]
    async fn sqlite_ledger_keeps_the_contract() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let ledger = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
        check_contract(&ledger).await?;
        // Reopening sees the same state.
        let reopened = SqliteLedger::open(&dir.path().join("ledger.db")).await?;
        assert_eq!(reopened.list(None, None).await?.len(), 3);
        Ok(())
    }
}
