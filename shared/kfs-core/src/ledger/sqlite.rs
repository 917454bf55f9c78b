//! The embedded SQLite ledger, the local default.

use super::{
    Attempts, DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError, Listing,
    RunMember, WorkKey, existing_entry,
};
use kfs_catalog::fault::ErrorKind;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::path::Path;

/// The embedded ledger: one SQLite file (WAL mode), safe for several processes.
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    pool: SqlitePool,
    identity: String,
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
    dead_letters TEXT,
    members TEXT
);
CREATE INDEX IF NOT EXISTS ledger_by_state ON ledger (state, table_name, partition_id, base_offset);
CREATE TABLE IF NOT EXISTS attempts (
    segment TEXT PRIMARY KEY,
    started INTEGER NOT NULL,
    last_ms INTEGER NOT NULL,
    previous_ms INTEGER
);
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
                Err(e) if sqlite_busy(&e) && attempt < 10 => {
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
            // In WAL mode, NORMAL syncs at checkpoints, not at every commit: a process
            // crash loses nothing; a power loss may lose the last writes, which the
            // pipeline recovers from like any lost write (a lost pending entry leaves
            // an orphan file and the segment is converted again; a lost "committed"
            // mark is recovered from the table, the catalog being the truth).
            .synchronous(SqliteSynchronous::Normal)
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
        // Ledgers created before dead letters (or runs) existed get the columns.
        for column in ["dead_letters", "members"] {
            let columns: Vec<String> =
                sqlx::query_scalar("SELECT name FROM pragma_table_info('ledger')")
                    .fetch_all(&pool)
                    .await?;
            if columns.iter().any(|c| c == column) {
                continue;
            }
            let added = sqlx::raw_sql(&format!("ALTER TABLE ledger ADD COLUMN {column} TEXT"))
                .execute(&pool)
                .await;
            // A process opening the ledger at the same moment may have added it.
            if let Err(e) = added {
                let columns: Vec<String> =
                    sqlx::query_scalar("SELECT name FROM pragma_table_info('ledger')")
                        .fetch_all(&pool)
                        .await?;
                if !columns.iter().any(|c| c == column) {
                    return Err(e);
                }
            }
        }
        let identity = format!(
            "sqlite:{}",
            std::path::absolute(path)
                .unwrap_or_else(|_| path.to_owned())
                .display()
        );
        Ok(Self { pool, identity })
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
        let members: Option<String> = row.try_get("members")?;
        let members = RunMember::from_stored(members.as_deref(), &segment)?;
        Ok(LedgerEntry {
            dead_letters,
            members,
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
    fn identity(&self) -> String {
        self.identity.clone()
    }

    async fn get(&self, segment: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        let row = sqlx::query("SELECT * FROM ledger WHERE segment = ?")
            .bind(segment)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(Self::row_to_entry).transpose()
    }

    async fn get_many(&self, segments: &[String]) -> Result<Listing, LedgerError> {
        let mut listing = Listing::default();
        // Well inside SQLite's limit on bound parameters.
        for chunk in segments.chunks(500) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let sql = format!("SELECT * FROM ledger WHERE segment IN ({placeholders})");
            let mut query = sqlx::query(&sql);
            for segment in chunk {
                query = query.bind(segment);
            }
            for row in &query.fetch_all(&self.pool).await? {
                listing.note(Self::row_to_entry(row))?;
            }
        }
        super::sort_entries(&mut listing.entries);
        Ok(listing)
    }

    async fn insert(&self, entry: &LedgerEntry) -> Result<InsertOutcome, LedgerError> {
        let (snapshot_id, error) = match &entry.state {
            EntryState::Pending => (None, None),
            EntryState::Committed { snapshot_id } => (Some(*snapshot_id), None),
            EntryState::Quarantined { error } | EntryState::Skipped { error } => {
                (None, Some(error.clone()))
            }
        };
        let data_files = entry.stored_data_files()?;
        let dead_letters = entry.dead_letters.to_stored(&entry.segment)?;
        let members = RunMember::to_stored(&entry.members, &entry.segment)?;
        let result = sqlx::query(
            "INSERT INTO ledger (segment, etag, table_name, topic, partition_id, base_offset, last_offset, records, bytes,
                                 data_files, state, snapshot_id, error, created_ms, updated_ms, dead_letters, members)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
        .bind(members)
        .execute(&self.pool)
        .await?;
        if result.rows_affected() == 1 {
            return Ok(InsertOutcome::Inserted);
        }
        existing_entry(self, &entry.segment).await
    }

    async fn work_keys(&self, state: &str, table: &str) -> Result<Vec<WorkKey>, LedgerError> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT segment, partition_id, base_offset FROM ledger WHERE state = ?1 AND table_name = ?2
             ORDER BY partition_id, base_offset",
        )
        .bind(state)
        .bind(table)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(segment, partition, base_offset)| {
                let partition = i32::try_from(partition).map_err(|_| LedgerError::Corrupt {
                    segment: segment.clone(),
                    reason: format!("partition {partition} is out of range"),
                })?;
                Ok(WorkKey {
                    segment,
                    partition,
                    base_offset,
                })
            })
            .collect()
    }

    async fn scan(&self, state: Option<&str>, table: Option<&str>) -> Result<Listing, LedgerError> {
        // Only the filters given, so that SQLite searches the state index instead of
        // scanning every entry ever recorded (`?1 IS NULL OR state = ?1` defeats it).
        let filters: Vec<(&str, &str)> = [("state", state), ("table_name", table)]
            .into_iter()
            .filter_map(|(column, value)| Some((column, value?)))
            .collect();
        let conditions: Vec<String> = filters
            .iter()
            .map(|(column, _)| format!("{column} = ?"))
            .collect();
        let filter = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let sql =
            format!("SELECT * FROM ledger {filter} ORDER BY table_name, partition_id, base_offset");
        let query = filters
            .iter()
            .fold(sqlx::query(&sql), |query, (_, value)| query.bind(*value));
        let rows = query.fetch_all(&self.pool).await?;
        let mut listing = Listing::default();
        for row in &rows {
            listing.note(Self::row_to_entry(row))?;
        }
        Ok(listing)
    }

    async fn begin_attempt(&self, segment: &str, now_ms: i64) -> Result<Attempts, LedgerError> {
        // SET expressions read the row as it was: `previous_ms` gets the last start.
        let (started, previous_ms): (i64, Option<i64>) = sqlx::query_as(
            "INSERT INTO attempts (segment, started, last_ms, previous_ms) VALUES (?1, 1, ?2, NULL)
             ON CONFLICT (segment) DO UPDATE SET started = started + 1, previous_ms = last_ms, last_ms = ?2
             RETURNING started, previous_ms",
        )
        .bind(segment)
        .bind(now_ms)
        .fetch_one(&self.pool)
        .await?;
        Ok(Attempts {
            unfinished: u32::try_from(started - 1).unwrap_or(u32::MAX),
            last_began_ms: previous_ms,
        })
    }

    async fn end_attempt(&self, segment: &str) -> Result<(), LedgerError> {
        sqlx::query("DELETE FROM attempts WHERE segment = ?1")
            .bind(segment)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn mark_committed(
        &self,
        entries: &[&LedgerEntry],
        snapshot_id: i64,
        now_ms: i64,
    ) -> Result<usize, LedgerError> {
        let mut tx = self.pool.begin().await?;
        let mut moved = 0;
        for entry in entries {
            let result = sqlx::query(
                // The data file descriptions are in the table now: dropped, so that
                // committed entries stay small however many the ledger keeps.
                "UPDATE ledger SET state = 'committed', snapshot_id = ?, updated_ms = ?, data_files = '[]'
                 WHERE segment = ? AND state = 'pending' AND data_files = ?",
            )
            .bind(snapshot_id)
            .bind(now_ms)
            .bind(&entry.segment)
            .bind(entry.stored_data_files()?)
            .execute(&mut *tx)
            .await?;
            moved += result.rows_affected() as usize;
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn remove_in_state(&self, segment: &str, state: &str) -> Result<bool, LedgerError> {
        let result = sqlx::query("DELETE FROM ledger WHERE segment = ? AND state = ?")
            .bind(segment)
            .bind(state)
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

/// Whether SQLite answered busy or locked (result codes 5 and 6, with their extended
/// codes): another connection holds the lock; the same statement may pass later.
fn sqlite_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| matches!(code & 0xff, 5 | 6)),
        _ => false,
    }
}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        let kind = match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => ErrorKind::Transient,
            _ if sqlite_busy(&e) => ErrorKind::Transient,
            _ => ErrorKind::Config,
        };
        Self::Store {
            message: e.to_string(),
            kind,
        }
    }
}
