//! The contract every ledger keeps, as one check a test runs against each
//! implementation.

use super::{Attempts, DeadLetters, EntryState, InsertOutcome, Ledger, LedgerEntry, LedgerError};

/// The behaviour every [`Ledger`] implementation must show, checked on an empty
/// ledger by each implementation's tests: conditional inserts, transitions only from
/// `pending`, and listings by state and table. Returns the first violation.
pub async fn check_contract(ledger: &impl Ledger) -> Result<(), String> {
    let (pending, later, bad) = inserts_and_listings(ledger).await?;
    commits_and_releases(ledger, &pending, later, &bad).await?;
    skipping(ledger, &pending, &bad).await?;
    attempts(ledger).await?;
    stored_shapes(ledger, &pending).await
}

/// The first violation's description: what was checked, what came, what was expected.
fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, expected {want:?}"))
    }
}

/// A ledger error as a violation.
fn store(e: LedgerError) -> String {
    e.to_string()
}

/// An entry of `kafscale.orders` partition 0 at `base_offset`, ten records long.
fn entry(segment: &str, base_offset: i64, state: EntryState) -> LedgerEntry {
    LedgerEntry {
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
        members: Vec::new(),
        state,
        created_ms: 1,
        updated_ms: 1,
    }
}

/// Conditional inserts, then listings and reads by state, table and key.
async fn inserts_and_listings(
    ledger: &impl Ledger,
) -> Result<(LedgerEntry, LedgerEntry, LedgerEntry), String> {
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
    listings(ledger, &pending, &later, &bad).await?;
    Ok((pending, later, bad))
}

/// Listings and reads by state, table and key of the three entries inserted.
async fn listings(
    ledger: &impl Ledger,
    pending: &LedgerEntry,
    later: &LedgerEntry,
    bad: &LedgerEntry,
) -> Result<(), String> {
    expect(
        "pending, in offset order",
        ledger.list(Some("pending"), None).await.map_err(store)?,
        vec![pending.clone(), later.clone()],
    )?;
    let key = |e: &LedgerEntry| super::WorkKey {
        segment: e.segment.clone(),
        partition: e.partition,
        base_offset: e.base_offset,
    };
    expect(
        "pending keys of the table, in offset order",
        ledger
            .work_keys("pending", "kafscale.orders")
            .await
            .map_err(store)?,
        vec![key(pending), key(later)],
    )?;
    expect(
        "quarantined keys of the table",
        ledger
            .work_keys("quarantined", "kafscale.orders")
            .await
            .map_err(store)?,
        vec![key(bad)],
    )?;
    expect(
        "keys of another table",
        ledger
            .work_keys("pending", "kafscale.other")
            .await
            .map_err(store)?,
        Vec::new(),
    )?;
    let read = ledger
        .get_many(&[
            later.segment.clone(),
            "ns/orders/0/segment-00000000000000000099.kfs".into(),
            pending.segment.clone(),
        ])
        .await
        .map_err(store)?;
    expect(
        "entries read together, a missing one left out, in offset order",
        (read.entries, read.unreadable),
        (vec![pending.clone(), later.clone()], Vec::new()),
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
    Ok(())
}

/// Marking committed (once, only the conversion read), then releasing quarantined entries.
async fn commits_and_releases(
    ledger: &impl Ledger,
    pending: &LedgerEntry,
    later: LedgerEntry,
    bad: &LedgerEntry,
) -> Result<(), String> {
    let both = vec![pending, bad];
    // A commit of another conversion of the same key (a run dropped and converted
    // again since the committer read it) marks nothing.
    let other_conversion = LedgerEntry {
        data_files: vec![r#"{"file_path":"another conversion"}"#.into()],
        ..later.clone()
    };
    expect(
        "marking another conversion of the key",
        ledger
            .mark_committed(&[&other_conversion], 76, 4)
            .await
            .map_err(store)?,
        0,
    )?;
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
    let committed = ledger.list(Some("committed"), None).await.map_err(store)?;
    expect("committed listing", committed.len(), 1)?;
    expect(
        "a committed entry's data files",
        committed.iter().map(|e| e.data_files.len()).sum::<usize>(),
        0,
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
    Ok(())
}

/// Skipping: only from quarantined, keeping the error, listed by state and table.
async fn skipping(
    ledger: &impl Ledger,
    pending: &LedgerEntry,
    bad: &LedgerEntry,
) -> Result<(), String> {
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

/// Unfinished attempts count up per segment until one ends; they are not entries.
async fn attempts(ledger: &impl Ledger) -> Result<(), String> {
    // Unfinished attempts count up per segment until one ends; they are not entries.
    let crashing = "ns/orders/0/segment-00000000000000000090.kfs";
    let other = "ns/orders/0/segment-00000000000000000091.kfs";
    for (before, began) in [(0, None), (1, Some(20)), (2, Some(21))] {
        expect(
            "attempts begun before",
            ledger
                .begin_attempt(crashing, 20 + i64::from(before))
                .await
                .map_err(store)?,
            Attempts {
                unfinished: before,
                last_began_ms: began,
            },
        )?;
    }
    expect(
        "another segment's attempts",
        ledger.begin_attempt(other, 30).await.map_err(store)?,
        Attempts::default(),
    )?;
    ledger.end_attempt(crashing).await.map_err(store)?;
    expect(
        "attempts after one ended",
        ledger.begin_attempt(crashing, 40).await.map_err(store)?,
        Attempts::default(),
    )?;
    ledger.end_attempt(crashing).await.map_err(store)?;
    ledger.end_attempt(other).await.map_err(store)?;
    Ok(())
}

/// Entries of other shapes kept as they are: a pointer to spilled descriptions, a run
/// with its members and gaps; a pending run discarded once.
async fn stored_shapes(ledger: &impl Ledger, pending: &LedgerEntry) -> Result<(), String> {
    // A pointer to spilled descriptions is stored as it is.
    let spilled = LedgerEntry {
        data_files: vec!["@s3://lakehouse/t/data/kfs-descriptions/x.json".into()],
        ..entry(
            "ns/orders/1/segment-00000000000000000000.kfs",
            0,
            EntryState::Pending,
        )
    };
    ledger.insert(&spilled).await.map_err(store)?;
    expect(
        "an entry holding a pointer",
        ledger.get(&spilled.segment).await.map_err(store)?,
        Some(spilled.clone()),
    )?;
    // A run: its members are stored with it; a pending run can be discarded, once.
    let run = LedgerEntry {
        last_offset: 29,
        members: vec![
            crate::ledger::RunMember {
                segment: "ns/orders/2/segment-00000000000000000010.kfs".into(),
                etag: "e2".into(),
                base_offset: 10,
                last_offset: 19,
                gap_from: None,
            },
            // After a gap (offsets 20-24) no segment was listed in.
            crate::ledger::RunMember {
                segment: "ns/orders/2/segment-00000000000000000025.kfs".into(),
                etag: "e3".into(),
                base_offset: 25,
                last_offset: 29,
                gap_from: Some(20),
            },
        ],
        partition: 2,
        ..entry(
            "ns/orders/2/segment-00000000000000000000.kfs",
            0,
            EntryState::Pending,
        )
    };
    ledger.insert(&run).await.map_err(store)?;
    let stored = ledger.get(&run.segment).await.map_err(store)?;
    expect("a run's entry", stored.clone(), Some(run.clone()))?;
    expect(
        "a run member's key and version",
        stored.as_ref().and_then(|e| e.member_at(25)),
        Some(("ns/orders/2/segment-00000000000000000025.kfs", "e3")),
    )?;
    expect(
        "a run's gaps",
        stored.as_ref().map(LedgerEntry::inner_gaps),
        Some(vec![(20, 24)]),
    )?;
    expect(
        "discarding a committed entry",
        ledger
            .discard_pending(&pending.segment)
            .await
            .map_err(store)?,
        false,
    )?;
    expect(
        "discarding a pending run",
        ledger.discard_pending(&run.segment).await.map_err(store)?,
        true,
    )?;
    expect(
        "discarding it again",
        ledger.discard_pending(&run.segment).await.map_err(store)?,
        false,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{MemoryLedger, SqliteLedger};

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
        assert_eq!(reopened.list(None, None).await?.len(), 4);
        Ok(())
    }
}
