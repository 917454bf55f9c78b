//! The settings read from the environment and from a TOML file, checked.

use super::*;

fn env(pairs: &[(&str, &str)]) -> Result<ValidSettings, SettingsError> {
    let vars: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Settings::from_env(&|name| vars.get(name).cloned())?.validate("")
}

#[test]
fn the_environment_and_a_toml_file_fill_the_same_settings() {
    let from_env = env(&[
        ("TABLE_NAMESPACE", "lake"),
        ("TABLE_PREFIX", "kfs_"),
        ("TOPICS_INCLUDE", "orders.*, payments"),
        ("TOPICS_EXCLUDE", "orders-test"),
        (
            "TABLE_MAPPING",
            r#"[{"topic": "audit-(.*)", "table": "audit.$1"}]"#,
        ),
        ("MAX_SNAPSHOTS", "0"),
        ("ORPHAN_AGE", "off"),
        ("ETCD_GRACE", "30s"),
        ("ETCD_UNREACHABLE", "proceed"),
        ("LFS_MODE", "hybrid"),
        ("LFS_TOPICS", r#"{"audit-x": "skip"}"#),
        ("LFS_MAX_INLINE_SIZE", "1024"),
        ("LFS_VERIFY_CHECKSUMS", "off"),
    ]);
    let toml_text = r#"
        namespace = "lake"
        table_prefix = "kfs_"
        include_topics = ["orders.*", "payments"]
        exclude_topics = ["orders-test"]
        [[table_patterns]]
        topic = "audit-(.*)"
        table = "audit.$1"
        [maintenance]
        max_snapshots = 0
        orphan_age = "off"
        [etcd]
        grace = "30s"
        unreachable = "proceed"
        [lfs]
        mode = "hybrid"
        max_inline_size = 1024
        verify_checksums = false
        [lfs.topics]
        audit-x = "skip"
    "#;
    let from_file = toml::from_str::<Settings>(toml_text)
        .map_err(|e| SettingsError(e.to_string()))
        .and_then(|s| s.validate("file"));
    for valid in [from_env, from_file] {
        let valid = valid.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            valid.naming.table_for("orders-eu").to_string(),
            "lake.kfs_orders_eu"
        );
        assert_eq!(valid.naming.table_for("audit-x").to_string(), "audit.x");
        assert!(!valid.naming.topics.selects("orders-test"));
        assert!(!valid.naming.topics.selects("clicks"));
        let lfs = valid.naming.lfs.for_topic("orders-eu");
        assert_eq!(
            (lfs.mode, lfs.max_inline_size, lfs.min_checksum),
            (
                kfs_plan::lfs::LfsMode::Hybrid,
                1024,
                kfs_plan::lfs::ChecksumAlg::None
            )
        );
        assert_eq!(
            valid.naming.lfs.for_topic("audit-x").mode,
            kfs_plan::lfs::LfsMode::Skip
        );
        let maintenance = valid.maintenance.unwrap_or_default();
        assert_eq!(
            (maintenance.max_snapshots, maintenance.orphan_age),
            (None, None)
        );
        assert_eq!(
            valid.crosscheck,
            CrossCheckPolicy {
                grace_ms: 30_000,
                on_unreachable: UnreachablePolicy::Proceed
            }
        );
    }
}

#[test]
fn every_bad_setting_is_named() {
    for (name, value) in [
        ("TOPICS_INCLUDE", "("),
        ("TABLE_MAPPING", r#"{"topic": "x"}"#),
        (
            "TABLE_PROPERTIES",
            r#"{"write.parquet.compression-codec": "lzma"}"#,
        ),
        ("TABLE_PROPERTIES", r#"{"format-version": "4"}"#),
        ("VALUE_FORMAT", "avro"),
        ("KEY_FORMAT", "avro"),
        ("SCHEMA_REGISTRY_URL", "ftp://registry"),
        ("SCHEMA_REGISTRY_URL", "glue://Not A Region"),
        ("PARTITION_BY", "week(timestamp)"),
        ("MAINTENANCE", "sometimes"),
        ("MAX_SNAPSHOTS", "many"),
        ("ETCD_UNREACHABLE", "skip"),
        ("ETCD_GRACE", "soon"),
        ("LFS_MODE", "sometimes"),
        ("LFS_TOPICS", r#"{"orders": "fetch"}"#),
        ("LFS_TOPICS", "orders=resolve"),
        ("LFS_MAX_INLINE_SIZE", "0"),
        ("LFS_CONCURRENCY", "1000"),
        ("LFS_VERIFY_CHECKSUMS", "maybe"),
        ("LFS_MIN_CHECKSUM_ALG", "blake3"),
    ] {
        let error = env(&[(name, value)]).err().map(|e| e.to_string());
        assert!(
            error.as_deref().is_some_and(|e| e.contains(name)),
            "{name}={value}: {error:?}"
        );
    }
    assert!(toml::from_str::<Settings>("unknown = 1").is_err());
    // Keys are decoded in registry tables only.
    let error = env(&[("KEY_FORMAT", "registry")]).err();
    assert!(
        error
            .as_ref()
            .is_some_and(|e| e.0.contains("registry tables only")),
        "{error:?}"
    );
    let glue = env(&[
        ("VALUE_FORMAT", "registry"),
        ("KEY_FORMAT", "registry"),
        ("SCHEMA_REGISTRY_URL", "glue://eu-west-1"),
    ]);
    assert!(glue.is_ok_and(|valid| valid.schema_registry
        == Some(kfs_values::registry::RegistryLocation::Glue {
            region: Some("eu-west-1".into())
        })
        && valid.naming.key_format == KeyFormat::Registry),);
    // The checksum minimum and switching verification off must agree.
    let error = env(&[
        ("LFS_VERIFY_CHECKSUMS", "off"),
        ("LFS_MIN_CHECKSUM_ALG", "sha256"),
    ])
    .err();
    assert!(
        error
            .as_ref()
            .is_some_and(|e| e.0.contains("LFS_MIN_CHECKSUM_ALG")),
        "{error:?}"
    );
    let crc32 = env(&[("LFS_MIN_CHECKSUM_ALG", "crc32")]);
    assert!(crc32.is_ok_and(
        |valid| valid.naming.lfs.policy.min_checksum == kfs_plan::lfs::ChecksumAlg::Crc32
    ));
    // Claim checks are handled in raw tables only.
    let error = env(&[("VALUE_FORMAT", "json"), ("LFS_MODE", "resolve")]).err();
    assert!(
        error
            .as_ref()
            .is_some_and(|e| e.0.contains("raw tables only")),
        "{error:?}"
    );
}

#[test]
fn the_catalog_kind_comes_from_one_place() {
    let none = |_: &str| None;
    let sql = CatalogSettings::default().kind(
        "sql",
        Some(Path::new("/state/catalog.db")),
        RestCredentials::default(),
        &none,
    );
    assert_eq!(
        sql,
        Ok(CatalogKind::Sql {
            database: PathBuf::from("/state/catalog.db")
        })
    );
    let postgres = CatalogSettings {
        kind: Some("sql".into()),
        uri: Some("postgres://db/iceberg".into()),
        ..CatalogSettings::default()
    };
    assert!(matches!(
        postgres.kind("glue", None, RestCredentials::default(), &none),
        Ok(CatalogKind::SqlPostgres { .. })
    ));
    let s3tables = CatalogSettings {
        kind: Some("s3tables".into()),
        table_bucket_arn: Some("lake".into()),
        ..CatalogSettings::default()
    };
    assert!(
        s3tables
            .kind("glue", None, RestCredentials::default(), &none)
            .is_err()
    );
    let rest = CatalogSettings {
        kind: Some("rest".into()),
        ..CatalogSettings::default()
    };
    assert!(
        rest.kind("glue", None, RestCredentials::default(), &none)
            .is_err()
    );
}

#[test]
fn a_change_log_is_kept_by_every_mirror_and_needs_one() -> Result<(), SettingsError> {
    let mode_of = |settings: &ValidSettings, topic: &str| settings.naming.mode_for(topic).clone();
    // On for a stack whose rules make mirrors, its default mode append.
    let rules = r#"[{"topic": "cdc-(.*)", "table": "lake.$1", "table_mode": "cdc"}]"#;
    let settings = env(&[
        ("CHANGE_LOG", "on"),
        ("TABLE_MAPPING", rules),
        ("VALUE_FORMAT", "json"),
    ])?;
    assert!(mode_of(&settings, "cdc-orders").change_log);
    assert!(!mode_of(&settings, "clicks").change_log);
    // Off: the template's default, whatever the mode.
    let settings = env(&[("CHANGE_LOG", "off"), ("TABLE_MODE", "upsert")])?;
    assert!(!mode_of(&settings, "orders").change_log);
    let settings = env(&[("CHANGE_LOG", "on"), ("TABLE_MODE", "upsert")])?;
    assert!(mode_of(&settings, "orders").change_log);
    // On with no table to mirror, or given in an append rule: refused with the name.
    let error = env(&[("CHANGE_LOG", "on")]).err().map(|e| e.to_string());
    assert!(error.is_some_and(|e| e.contains("CHANGE_LOG") && e.contains("no table mirrors")));
    let append = r#"[{"topic": "x", "table": "x", "table_mode": "append", "change_log": true}]"#;
    let error = env(&[("TABLE_MAPPING", append)])
        .err()
        .map(|e| e.to_string());
    assert!(error.is_some_and(|e| e.contains("append mode")));
    Ok(())
}
