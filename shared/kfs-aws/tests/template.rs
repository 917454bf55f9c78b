//! The SAM template and the ledger table definition the tests use must agree.

use std::process::Command;

use kfs_testkit::workspace_root;

#[test]
fn template_declares_the_ledger_table_the_tests_create() {
    let output = Command::new("python3")
        .arg(workspace_root().join("tests/python/check_template.py"))
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
