//! `kfs-iceberg quarantine`: a malformed segment is listed with its key and a
//! positioned error and holds back only its own partition; after the segment is fixed,
//! `retry` releases it and the next run commits it and the segments behind it.

mod support;

use support::{kfs, output_of, succeed, tempdir};

fn ok(args: &[&str]) -> String {
    String::from_utf8_lossy(&succeed(kfs().args(args), &args.join(" ")).stdout).into_owned()
}

#[test]
fn a_quarantined_segment_is_listed_and_retried_after_a_fix() {
    let dir = tempdir();
    let (source, warehouse) = (dir.path().join("bucket"), dir.path().join("wh"));
    let (src, wh) = (source.to_string_lossy(), warehouse.to_string_lossy());
    ok(&[
        "gen",
        "--out",
        &src,
        "--topics",
        "1",
        "--partitions",
        "2",
        "--segments",
        "3",
        "--records",
        "20",
        "--codec",
        "none",
    ]);
    let key = "default/orders/0/segment-00000000000000000020.kfs";
    let path = source.join(key);
    let good = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut bad = good.clone();
    bad[200] ^= 0xff;
    std::fs::write(&path, &bad).unwrap_or_else(|e| panic!("{e}"));

    let first = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    assert!(
        first.contains("5 converted") && first.contains("1 quarantined"),
        "{first}"
    );
    // Partition 1 moved on; partition 0 stops before the quarantined segment.
    assert!(first.contains("0→20 1→60"), "{first}");
    let listed = ok(&["quarantine", "list", "--warehouse", &wh]);
    assert!(
        listed.starts_with(key) && listed.contains("at byte") && listed.contains("CRC"),
        "{listed}"
    );

    // Retrying something that is not quarantined is refused, clearly.
    let refused = output_of(kfs().args(["quarantine", "retry", "--warehouse", &wh, "nope"]));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not quarantined: nope"));

    std::fs::write(&path, &good).unwrap_or_else(|e| panic!("{e}"));
    let released = ok(&["quarantine", "retry", "--warehouse", &wh, key]);
    assert!(released.contains("released"), "{released}");
    let second = ok(&["run", "--quiet", "--source", &src, "--warehouse", &wh]);
    assert!(second.contains("1 converted"), "{second}");
    assert!(second.contains("0→60 1→60"), "{second}");
    assert!(ok(&["quarantine", "list", "--warehouse", &wh]).contains("no quarantined segments"));
}
