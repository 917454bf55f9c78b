//! Durations as operators write them in flags and environment variables: `0s`,
//! `1500ms`, `90m`, `12h`, `5d`.

/// Parses a duration: a whole number followed by `ms`, `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?}: a duration needs a unit (ms, s, m, h, d)"))?;
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a whole number before the unit"))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    };
    value
        .checked_mul(ms_per_unit)
        .map(std::time::Duration::from_millis)
        .ok_or_else(|| format!("{text:?}: too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("0s"), Ok(std::time::Duration::ZERO));
        assert_eq!(
            parse_duration("5d"),
            Ok(std::time::Duration::from_secs(5 * 86_400))
        );
        assert_eq!(
            parse_duration("1500ms"),
            Ok(std::time::Duration::from_millis(1500))
        );
        for bad in ["", "5", "d", "5w", "-1s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
