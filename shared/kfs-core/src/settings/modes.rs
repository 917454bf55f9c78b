//! The modes the settings give: of new tables, and of each topic → table rule, with
//! their keys and change logs.

use kfs_plan::mode::ModeSetting;
use kfs_plan::naming::TablePattern;

use super::Settings;

impl Settings {
    /// The mode of new tables and the topic → table rules, each with its mode; or
    /// what is wrong (the setting's name, the reason). `change_log` on keeps the log
    /// of every mirror, the rules' too, and needs one.
    pub(super) fn modes(&self) -> Result<(ModeSetting, Vec<TablePattern>), (&'static str, String)> {
        let logged = self.change_log == Some(true);
        let (mode, key) = (self.table_mode.as_deref(), self.upsert_key.as_deref());
        let mode = mode_setting(mode, key, (None, logged))
            .map_err(|e| ("table_mode", e))?
            .unwrap_or_default();
        let mut patterns = Vec::new();
        for rule in &self.table_patterns {
            let mut pattern = TablePattern::new(&rule.topic, &rule.table)
                .map_err(|e| ("table_patterns", e.to_string()))?;
            let (mode, key) = (rule.table_mode.as_deref(), rule.upsert_key.as_deref());
            if let Some(mode) = mode_setting(mode, key, (rule.change_log, logged))
                .map_err(|e| ("table_patterns", e))?
            {
                pattern = pattern.with_mode(mode);
            }
            patterns.push(pattern);
        }
        if logged && !mode.mirrors() && !patterns.iter().any(TablePattern::mirrors) {
            return Err((
                "change_log",
                "it is on, but no table mirrors its topic: set table_mode upsert or cdc (here or in a rule)".into(),
            ));
        }
        Ok((mode, patterns))
    }
}

/// The mode `mode` keyed by `key`, when either is given (a key alone is refused: it
/// needs a mirror's mode). Its mirrors keep their change log as `change_log` says
/// (given here: refused for an append table) or else as `inherited` (the setting
/// above: mirrors only).
fn mode_setting(
    mode: Option<&str>,
    key: Option<&str>,
    (change_log, inherited): (Option<bool>, bool),
) -> Result<Option<ModeSetting>, String> {
    let setting = match (mode, key) {
        (None, None) if change_log == Some(true) => {
            return Err("change_log is given without table_mode upsert or cdc".into());
        }
        (None, None) => return Ok(None),
        (None, Some(_)) => return Err("upsert_key is given without table_mode upsert".into()),
        (Some(mode), key) => ModeSetting::parse(mode, key)?,
    };
    let logged = change_log.unwrap_or(inherited && setting.mirrors());
    setting.with_change_log(logged).map(Some)
}
