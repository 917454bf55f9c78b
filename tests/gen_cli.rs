//! End to end: `kfs-iceberg gen` writes the broker's bucket layout, deterministically,
//! and every segment it writes verifies with `dump`.

use crate::support;

use std::path::Path;

use support::{files_under, kfs, output_of, tempdir};

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    output_of(kfs().args(args))
}

fn gen_into(dir: &Path, codec: &str, seed: &str) {
    let output = run(&[
        "gen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--namespace".as_ref(),
        "prod".as_ref(),
        "--topics".as_ref(),
        "2".as_ref(),
        "--partitions".as_ref(),
        "3".as_ref(),
        "--segments".as_ref(),
        "2".as_ref(),
        "--records".as_ref(),
        "150".as_ref(),
        "--codec".as_ref(),
        codec.as_ref(),
        "--seed".as_ref(),
        seed.as_ref(),
        // The records' clocks start at a given time (2026-01-01), not before now.
        "--start-ms".as_ref(),
        "1767225600000".as_ref(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn gen_writes_verifiable_segments_in_the_bucket_layout() {
    for codec in ["none", "gzip", "snappy", "lz4", "zstd", "mixed"] {
        let dir = tempdir();
        gen_into(dir.path(), codec, "7");
        let all = files_under(dir.path());
        assert_eq!(all.len(), 2 * 3 * 2 * 2, "{codec}: {all:?}");
        for kfs in all
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "kfs"))
        {
            let relative = kfs
                .strip_prefix(dir.path())
                .unwrap_or(kfs)
                .to_string_lossy()
                .into_owned();
            let parts: Vec<&str> = relative.split('/').collect();
            assert_eq!(parts.len(), 4, "{relative}");
            assert_eq!(parts[0], "prod");
            assert!(parts[2].parse::<u32>().is_ok(), "{relative}");
            assert!(
                parts[3].starts_with("segment-") && parts[3].len() == "segment-".len() + 20 + 4,
                "{relative}"
            );
            let index = kfs.with_extension("index");
            let output = run(&[
                "dump".as_ref(),
                "--index".as_ref(),
                index.as_os_str(),
                kfs.as_os_str(),
            ]);
            assert!(
                output.status.success(),
                "{codec} {relative}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let text = String::from_utf8_lossy(&output.stdout);
            assert!(
                text.contains("150 data records"),
                "{codec} {relative}: {text}"
            );
            if codec != "mixed" {
                assert!(
                    text.contains(&format!("codec {codec}")),
                    "{codec} {relative}"
                );
            }
        }
    }
}

#[test]
fn the_same_seed_writes_the_same_bytes() {
    let a = tempdir();
    let b = tempdir();
    gen_into(a.path(), "mixed", "99");
    gen_into(b.path(), "mixed", "99");
    let (fa, fb) = (files_under(a.path()), files_under(b.path()));
    assert_eq!(fa.len(), fb.len());
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(x.strip_prefix(a.path()).ok(), y.strip_prefix(b.path()).ok());
        assert_eq!(
            std::fs::read(x).ok(),
            std::fs::read(y).ok(),
            "{}",
            x.display()
        );
    }
}

#[test]
fn an_unknown_codec_is_a_usage_error() {
    let dir = tempdir();
    let output = run(&[
        "gen".as_ref(),
        "--out".as_ref(),
        dir.path().as_os_str(),
        "--codec".as_ref(),
        "brotli".as_ref(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    // clap refuses it with the list of codecs.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'brotli'")
            && stderr.contains("possible values: none, gzip, snappy, lz4, zstd, mixed"),
        "{stderr}"
    );
}
