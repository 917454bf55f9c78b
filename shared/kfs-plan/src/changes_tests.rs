use super::*;
use proptest::prelude::*;
use serde_json::json;

fn change(key: u8, upsert: Option<u32>, partition: i32, offset: i64) -> Change<u8, u32> {
    Change {
        key,
        action: upsert.map_or(Action::Delete, Action::Upsert),
        partition,
        offset,
        timestamp_ms: offset,
        source: None,
    }
}

#[test]
fn the_last_change_of_each_key_wins_within_a_partition() {
    let changes = vec![
        change(1, Some(10), 0, 0),
        change(2, Some(20), 0, 1),
        change(1, None, 0, 2),
        change(1, Some(11), 0, 3),
        change(2, None, 0, 4),
        change(3, Some(30), 0, 5),
    ];
    let folded = fold(changes);
    let actions: Vec<(u8, Action<u32>)> =
        folded.into_iter().map(|(key, c)| (key, c.action)).collect();
    assert_eq!(
        actions,
        [
            (1, Action::Upsert(11)),
            (2, Action::Delete),
            (3, Action::Upsert(30))
        ]
    );
}

#[test]
fn across_partitions_the_source_position_then_the_timestamp_decide() {
    let mut early = change(1, Some(1), 0, 900);
    let mut late = change(1, Some(2), 1, 5);
    early.source = Some(SourcePosition::Lsn(100));
    late.source = Some(SourcePosition::Lsn(200));
    late.timestamp_ms = 0;
    assert!(
        late.supersedes(&early),
        "a later lsn wins over a later offset"
    );
    assert!(!early.supersedes(&late));
    let (mut a, mut b) = (change(1, Some(1), 0, 7), change(1, Some(2), 1, 3));
    a.timestamp_ms = 50;
    b.timestamp_ms = 60;
    assert!(b.supersedes(&a), "no positions: the later timestamp wins");
    b.timestamp_ms = 50;
    assert!(b.supersedes(&a), "equal timestamps: the higher partition");
    let binlog = |file: &str, pos, row| SourcePosition::Binlog {
        file: file.into(),
        pos,
        row,
    };
    assert!(binlog("mysql-bin.000002", 4, 0) > binlog("mysql-bin.000001", 900, 3));
    // Positions of two kinds (two databases) tell nothing: the timestamps decide.
    let (mut pg, mut my) = (change(1, Some(1), 0, 7), change(1, Some(2), 1, 3));
    pg.source = Some(SourcePosition::Lsn(u64::MAX));
    my.source = Some(binlog("mysql-bin.000001", 1, 0));
    my.timestamp_ms = pg.timestamp_ms + 1;
    assert!(my.supersedes(&pg) && !pg.supersedes(&my));
    assert!(binlog("mysql-bin.000001", 900, 3) > binlog("mysql-bin.000001", 900, 2));
}

/// Debezium's tombstone after a delete event has no source position: it stands at the
/// delete's, so a change of another partition between the two positions loses to it
/// whatever its timestamp, and one before the delete wins over neither.
#[test]
fn a_change_without_a_position_stands_at_its_partitions_previous_one() {
    let at = |mut change: Change<u8, u32>, lsn: Option<u64>, ts: i64| {
        change.source = lsn.map(SourcePosition::Lsn);
        change.timestamp_ms = ts;
        change
    };
    let delete = at(change(1, None, 1, 0), Some(300), 10);
    let tombstone = at(change(1, None, 1, 1), None, 10);
    let between = at(change(1, Some(7), 0, 5), Some(250), 99);
    let folded = fold(vec![between.clone(), delete.clone(), tombstone.clone()]);
    let last = folded
        .get(&1)
        .map(|c| (c.partition, c.offset, c.source.clone()));
    assert_eq!(last, Some((1, 1, Some(SourcePosition::Lsn(300)))));
    // Whose delete lost (an older position), its tombstone loses too.
    let after = at(change(1, Some(8), 0, 5), Some(400), 0);
    let folded = fold(vec![after, delete, tombstone]);
    assert_eq!(
        folded.get(&1).map(|c| c.action.clone()),
        Some(Action::Upsert(8))
    );
    // Another key's position is not inherited.
    let other = at(change(2, None, 1, 2), None, 10);
    let folded = fold(vec![between, other]);
    assert_eq!(folded.get(&2).and_then(|c| c.source.clone()), None);
}

#[test]
fn a_source_position_reads_back_from_its_text() {
    let binlog = SourcePosition::Binlog {
        file: "bin:log.000001".into(),
        pos: 154,
        row: 2,
    };
    assert_eq!(binlog.text(), "binlog:bin:log.000001:154:2");
    assert_eq!(SourcePosition::parse(&binlog.text()), Ok(binlog));
    assert_eq!(SourcePosition::parse("lsn:7"), Ok(SourcePosition::Lsn(7)));
    for bad in [
        "",
        "lsn:",
        "lsn:-1",
        "lsn:x",
        "binlog:f:1",
        "binlog:f:x:1",
        "scn:5",
    ] {
        assert!(SourcePosition::parse(bad).is_err(), "{bad:?}");
    }
}

proptest! {
    #[test]
    fn every_source_position_reads_back_from_its_text(
        lsn in any::<u64>(), file in ".*", pos in any::<u64>(), row in any::<u64>(),
    ) {
        let lsn = SourcePosition::Lsn(lsn);
        prop_assert_eq!(SourcePosition::parse(&lsn.text()), Ok(lsn));
        let binlog = SourcePosition::Binlog { file, pos, row };
        prop_assert_eq!(SourcePosition::parse(&binlog.text()), Ok(binlog));
    }

    #[test]
    fn no_text_makes_parse_panic(text in ".*") {
        let _ = SourcePosition::parse(&text);
    }
}

#[test]
fn envelopes_of_every_operation_read_as_their_actions() {
    let source = json!({"connector": "postgresql", "lsn": 24023128, "ts_ms": 1});
    let create =
        json!({"op": "c", "before": null, "after": {"id": 1, "name": "a"}, "source": source});
    let read = envelope(&create).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.op, Operation::Create);
    assert_eq!(read.source, Some(SourcePosition::Lsn(24023128)));
    assert_eq!(
        read.action(),
        Ok(Some(Action::Upsert(json!({"id": 1, "name": "a"}))))
    );
    // The JSON converter's schema and payload wrapper.
    let wrapped = json!({"schema": {"type": "struct"}, "payload": {"op": "d", "before": {"id": 1}, "after": null,
        "source": {"connector": "mysql", "file": "mysql-bin.000003", "pos": 154, "row": 0}}});
    let delete = envelope(&wrapped).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(delete.action(), Ok(Some(Action::Delete)));
    assert_eq!(
        delete.source,
        Some(SourcePosition::Binlog {
            file: "mysql-bin.000003".into(),
            pos: 154,
            row: 0
        })
    );
    let snapshot = json!({"op": "r", "after": {"id": 2}});
    assert!(matches!(
        envelope(&snapshot).map(|e| e.action()),
        Ok(Ok(Some(Action::Upsert(_))))
    ));
    let message = json!({"op": "m", "message": {"prefix": "x"}});
    assert_eq!(envelope(&message).map(|e| e.action()), Ok(Ok(None)));
    for refused in [json!({"op": "t"}), json!({"op": "u", "after": null})] {
        let action = envelope(&refused).map(|e| e.action());
        assert!(matches!(action, Ok(Err(_))), "{refused}: {action:?}");
    }
}

#[test]
fn what_is_no_envelope_says_why() {
    for value in [
        json!(null),
        json!([1, 2]),
        json!({"after": {"id": 1}}),
        json!({"op": "x"}),
        json!({"op": "c", "after": 7}),
        json!({"op": 3}),
    ] {
        let refused = envelope(&value);
        assert!(refused.is_err(), "{value}: {refused:?}");
    }
}

proptest! {
    /// Within one partition, the fold is the last change of each key in offset
    /// order, whatever order the batch comes in.
    #[test]
    fn the_fold_is_the_sequential_replay_in_any_order(
        steps in prop::collection::vec((0u8..6, prop::option::of(0u32..100)), 0..60),
        seed in any::<u64>(),
    ) {
        let changes: Vec<Change<u8, u32>> = steps
            .iter()
            .enumerate()
            .map(|(offset, (key, value))| change(*key, *value, 0, offset as i64))
            .collect();
        let mut reference: BTreeMap<u8, Action<u32>> = BTreeMap::new();
        for c in &changes {
            reference.insert(c.key, c.action.clone());
        }
        let mut shuffled = changes.clone();
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let folded: BTreeMap<u8, Action<u32>> = fold(shuffled)
            .into_iter()
            .map(|(key, c)| (key, c.action))
            .collect();
        prop_assert_eq!(folded, reference);
    }

    /// Over several partitions, folding a batch gives the same result in any input
    /// order (every committer folds alike).
    #[test]
    fn the_fold_of_many_partitions_is_deterministic(
        steps in prop::collection::vec((0u8..4, prop::option::of(0u32..9), 0i32..3, 0i64..50), 0..40),
    ) {
        let changes: Vec<Change<u8, u32>> = steps
            .iter()
            .enumerate()
            .map(|(at, (key, value, partition, ts))| {
                let mut c = change(*key, *value, *partition, at as i64);
                c.timestamp_ms = *ts;
                c
            })
            .collect();
        let mut reversed = changes.clone();
        reversed.reverse();
        prop_assert_eq!(fold(changes), fold(reversed));
    }
}
