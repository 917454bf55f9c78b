//! How a table stores its records' values and reads their keys: the formats a table
//! is created with (`value_format`, `key_format`), as configured and as recorded in
//! its properties.

/// How record values are stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ValueFormat {
    /// Key and value as bytes (the default).
    #[default]
    Raw,
    /// The fields of JSON object values as typed columns; a value that cannot be
    /// written goes to the dead-letter table ([`crate::naming::TableName::dead_letters`]).
    Json,
    /// Values framed for a schema registry (Confluent's framing: magic byte 0, a
    /// 4-byte schema id), decoded with the writer schema their id names into typed
    /// columns; a value that cannot be goes to the dead-letter table.
    Registry,
}

impl ValueFormat {
    /// The format's name, as configured and as recorded in a table's properties.
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Json => "json",
            Self::Registry => "registry",
        }
    }

    /// Parses `raw`, `json` or `registry`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "raw" => Ok(Self::Raw),
            "json" => Ok(Self::Json),
            "registry" => Ok(Self::Registry),
            other => Err(format!(
                "value format {other:?}: expected raw, json or registry"
            )),
        }
    }
}

/// How record keys are read (the raw `key` column always holds their bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyFormat {
    /// Bytes only (the default).
    #[default]
    Raw,
    /// Keys framed for the schema registry, as a registry table's values are,
    /// decoded into the struct column `key_fields` as well; a key that is not (no
    /// framing, an unknown schema, a payload that does not decode) sends its record to
    /// the dead-letter table. A null key is a null `key_fields`.
    Registry,
}

impl KeyFormat {
    /// The format's name, as configured.
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Registry => "registry",
        }
    }

    /// Parses `raw` or `registry`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "raw" => Ok(Self::Raw),
            "registry" => Ok(Self::Registry),
            other => Err(format!("key format {other:?}: expected raw or registry")),
        }
    }
}
