//! The command line's enumerated options, each a [`clap::ValueEnum`] (so that `--help`
//! lists the values and clap refuses any other with the list), and their mapping onto
//! the core's enums and names, here and nowhere else. The spellings are the ones the
//! configuration file takes, case-insensitively.

use kfs_plan::lfs::LfsMode;
use kfs_plan::mode::TableMode;
use kfs_plan::naming::{KeyFormat, ValueFormat};
use kfs_segment::Compression;
use kfs_workload::CodecChoice;

/// `--value-format`: how tables created by a run store record values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ValueFormatArg {
    /// Key and value as bytes.
    Raw,
    /// The fields of JSON object values as typed columns.
    Json,
    /// Avro, Protobuf or JSON Schema values framed for a schema registry.
    Registry,
}

impl From<ValueFormatArg> for ValueFormat {
    fn from(arg: ValueFormatArg) -> Self {
        match arg {
            ValueFormatArg::Raw => Self::Raw,
            ValueFormatArg::Json => Self::Json,
            ValueFormatArg::Registry => Self::Registry,
        }
    }
}

/// `--table-mode`: how tables created by a run treat their records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableModeArg {
    /// Every record is a row.
    Append,
    /// One row per key, its last change; a tombstone deletes the key.
    Upsert,
    /// One row per key of Debezium change events.
    Cdc,
}

impl From<TableModeArg> for TableMode {
    fn from(arg: TableModeArg) -> Self {
        match arg {
            TableModeArg::Append => Self::Append,
            TableModeArg::Upsert => Self::Upsert,
            TableModeArg::Cdc => Self::Cdc,
        }
    }
}

/// `--key-format`: how registry tables read record keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyFormatArg {
    /// Bytes only.
    Raw,
    /// Keys framed for the schema registry, decoded into `key_fields` as well.
    Registry,
}

impl From<KeyFormatArg> for KeyFormat {
    fn from(arg: KeyFormatArg) -> Self {
        match arg {
            KeyFormatArg::Raw => Self::Raw,
            KeyFormatArg::Registry => Self::Registry,
        }
    }
}

/// `--lfs-mode`: what is done with large-file claim-check records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LfsModeArg {
    /// Values as they came.
    Off,
    /// Each blob fetched into `value`.
    Resolve,
    /// The envelope kept, described by `lfs_*` columns.
    Reference,
    /// Not written.
    Skip,
    /// Resolved up to `--lfs-max-inline-size`, referenced above.
    Hybrid,
}

impl From<LfsModeArg> for LfsMode {
    fn from(arg: LfsModeArg) -> Self {
        match arg {
            LfsModeArg::Off => Self::Off,
            LfsModeArg::Resolve => Self::Resolve,
            LfsModeArg::Reference => Self::Reference,
            LfsModeArg::Skip => Self::Skip,
            LfsModeArg::Hybrid => Self::Hybrid,
        }
    }
}

/// `--catalog-type`: the catalog a command works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CatalogTypeArg {
    /// The SQL catalog: SQLite (embedded, the default) or PostgreSQL.
    #[default]
    Sql,
    /// An Iceberg REST catalog (Apache Polaris, Unity Catalog, ...).
    Rest,
    /// The AWS Glue Data Catalog.
    Glue,
    /// An S3 Tables table bucket.
    S3tables,
    /// A catalog that ends with the command.
    Memory,
}

impl CatalogTypeArg {
    /// The type's name, as the settings (`[catalog] type`, `CATALOG_TYPE`) spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sql => "sql",
            Self::Rest => "rest",
            Self::Glue => "glue",
            Self::S3tables => "s3tables",
            Self::Memory => "memory",
        }
    }
}

impl std::fmt::Display for CatalogTypeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `gen --codec`: the codecs of the generated batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CodecArg {
    /// No compression.
    None,
    /// gzip.
    Gzip,
    /// Snappy (xerial framing).
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
    /// A codec drawn at random per batch, both snappy framings included.
    Mixed,
}

impl From<CodecArg> for CodecChoice {
    fn from(arg: CodecArg) -> Self {
        match arg {
            CodecArg::None => Self::Single(Compression::None),
            CodecArg::Gzip => Self::Single(Compression::Gzip),
            CodecArg::Snappy => Self::Single(Compression::Snappy),
            CodecArg::Lz4 => Self::Single(Compression::Lz4),
            CodecArg::Zstd => Self::Single(Compression::Zstd),
            CodecArg::Mixed => Self::Mixed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn every_value_maps_onto_the_name_the_core_parses() {
        for arg in ValueFormatArg::value_variants() {
            let name = arg.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(ValueFormat::from(*arg).name()));
        }
        for arg in KeyFormatArg::value_variants() {
            let name = arg.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(KeyFormat::from(*arg).name()));
        }
        for arg in LfsModeArg::value_variants() {
            let name = arg.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(LfsMode::from(*arg).name()));
        }
        for arg in CatalogTypeArg::value_variants() {
            let name = arg.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(name.as_deref(), Some(arg.name()));
        }
        for arg in CodecArg::value_variants() {
            let name = arg.to_possible_value().map(|v| v.get_name().to_owned());
            let parsed = name.as_deref().map(str::parse::<CodecChoice>);
            assert_eq!(parsed, Some(Ok(CodecChoice::from(*arg))), "{arg:?}");
        }
    }
}
