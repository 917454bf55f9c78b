//! The per-table switches of maintenance: a table property per step
//! (`kfs.maintenance.<step>.enabled=false`), one for all of them
//! (`kfs.maintenance.enabled=false`), and Iceberg's own `gc.enabled=false`, which no
//! engine may override: it says the table's files may be shared with another table, so
//! neither snapshot expiry nor orphan cleanup deletes anything. For tables another
//! engine maintains (S3 Tables, Glue table optimizers, scheduled Spark jobs).

use std::collections::HashMap;

use super::MaintenanceError;

/// Table property turning every maintenance step of kfs-iceberg off (`false`).
pub const MAINTENANCE_ENABLED_PROPERTY: &str = "kfs.maintenance.enabled";

/// Iceberg's table property allowing garbage collection (expiry's and orphan
/// cleanup's deletes); `false` forbids both, whatever else is set.
pub const GC_ENABLED_PROPERTY: &str = "gc.enabled";

/// One step of maintenance, each with its table property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MaintenanceStep {
    /// Compaction of small files (`compact`).
    Compaction,
    /// Snapshot expiry (`expire-snapshots`).
    SnapshotExpiry,
    /// Manifest rewrite (`rewrite-manifests`).
    ManifestRewrite,
    /// Orphan cleanup (`remove-orphans`).
    OrphanRemoval,
}

impl MaintenanceStep {
    /// Every step, in the order maintenance runs them.
    pub const ALL: [Self; 4] = [
        Self::Compaction,
        Self::SnapshotExpiry,
        Self::ManifestRewrite,
        Self::OrphanRemoval,
    ];

    /// The table property that turns the step off (`false`) or on (`true`, the default).
    pub fn property(self) -> &'static str {
        match self {
            Self::Compaction => "kfs.maintenance.compaction.enabled",
            Self::SnapshotExpiry => "kfs.maintenance.snapshot-expiry.enabled",
            Self::ManifestRewrite => "kfs.maintenance.manifest-rewrite.enabled",
            Self::OrphanRemoval => "kfs.maintenance.orphan-removal.enabled",
        }
    }

    /// The step's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Compaction => "compaction",
            Self::SnapshotExpiry => "snapshot expiry",
            Self::ManifestRewrite => "manifest rewrite",
            Self::OrphanRemoval => "orphan removal",
        }
    }

    /// Whether the step deletes files (and so obeys `gc.enabled`).
    fn collects_garbage(self) -> bool {
        matches!(self, Self::SnapshotExpiry | Self::OrphanRemoval)
    }
}

/// Why a step does not run on a table: the property that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOff {
    /// The step.
    pub step: MaintenanceStep,
    /// `property=value` that turned it off.
    pub by: String,
    /// Whether an operator's explicit override may run it anyway (not for
    /// `gc.enabled=false`: the files may belong to another table too).
    pub overridable: bool,
}

impl std::fmt::Display for StepOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is off by {}", self.step.name(), self.by)
    }
}

/// Reads a boolean property: `None` when unset; a value other than `true` or `false`
/// (any case) is a configuration error naming the table, the property and the value.
fn flag(
    table: &str,
    properties: &HashMap<String, String>,
    key: &str,
) -> Result<Option<bool>, MaintenanceError> {
    let Some(text) = properties.get(key) else {
        return Ok(None);
    };
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        _ => Err(MaintenanceError::Refused {
            table: table.to_owned(),
            reason: format!("table property {key}={text:?}: expected true or false"),
        }),
    }
}

/// Whether `step` may run on the table with `properties`: `Ok(None)` when it may,
/// `Ok(Some(off))` when a property turns it off, an error when a switch's value is
/// not a boolean (maintenance of the table stops until it is fixed).
pub fn step_off(
    table: &str,
    properties: &HashMap<String, String>,
    step: MaintenanceStep,
) -> Result<Option<StepOff>, MaintenanceError> {
    // Every switch is read, so a bad value is reported whatever the others say.
    let gc = flag(table, properties, GC_ENABLED_PROPERTY)?;
    let all = flag(table, properties, MAINTENANCE_ENABLED_PROPERTY)?;
    let own = flag(table, properties, step.property())?;
    let off = |key: &str, overridable| {
        Some(StepOff {
            step,
            by: format!("{key}=false"),
            overridable,
        })
    };
    Ok(if step.collects_garbage() && gc == Some(false) {
        off(GC_ENABLED_PROPERTY, false)
    } else if own == Some(false) {
        off(step.property(), true)
    } else if all == Some(false) && own != Some(true) {
        off(MAINTENANCE_ENABLED_PROPERTY, true)
    } else {
        None
    })
}

/// Refuses `step` on `table` when a property turns it off, unless `override_switch`
/// (an operator's explicit flag) and the switch allows it: what a command running one
/// step on demand calls.
pub fn ensure_step_on(
    table: &iceberg::table::Table,
    step: MaintenanceStep,
    override_switch: bool,
) -> Result<(), MaintenanceError> {
    let name = table.identifier().to_string();
    match step_off(&name, table.metadata().properties(), step)? {
        Some(off) if !(override_switch && off.overridable) => Err(MaintenanceError::Refused {
            table: name,
            reason: if off.overridable {
                format!(
                    "{off} (the platform or another engine maintains it; override explicitly to run it anyway)"
                )
            } else {
                format!("{off}: its files may be shared with another table, nothing is deleted")
            },
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn switches_turn_steps_off_and_gc_disabled_cannot_be_overridden() {
        let off = |pairs: &[(&str, &str)], step| {
            step_off("ns.t", &props(pairs), step)
                .ok()
                .flatten()
                .map(|o| (o.by, o.overridable))
        };
        for step in MaintenanceStep::ALL {
            assert_eq!(off(&[], step), None);
            assert_eq!(
                off(&[(step.property(), "FALSE")], step),
                Some((format!("{}=false", step.property()), true))
            );
            // The step's own switch wins over the table-wide one.
            assert_eq!(
                off(
                    &[
                        (MAINTENANCE_ENABLED_PROPERTY, "false"),
                        (step.property(), "true")
                    ],
                    step
                ),
                None
            );
            assert!(off(&[(MAINTENANCE_ENABLED_PROPERTY, "false")], step).is_some());
        }
        let gc = [(GC_ENABLED_PROPERTY, "false")];
        assert_eq!(off(&gc, MaintenanceStep::Compaction), None);
        assert_eq!(off(&gc, MaintenanceStep::ManifestRewrite), None);
        assert_eq!(
            off(&gc, MaintenanceStep::OrphanRemoval),
            Some(("gc.enabled=false".into(), false))
        );
        assert_eq!(
            off(
                &[
                    (GC_ENABLED_PROPERTY, "false"),
                    ("kfs.maintenance.snapshot-expiry.enabled", "true")
                ],
                MaintenanceStep::SnapshotExpiry
            ),
            Some(("gc.enabled=false".into(), false))
        );
        let bad = step_off(
            "ns.t",
            &props(&[("kfs.maintenance.enabled", "no")]),
            MaintenanceStep::Compaction,
        );
        let text = bad.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.contains("ns.t") && text.contains("kfs.maintenance.enabled=\"no\""),
            "{text}"
        );
    }
}
