//! Parsers for the scalar values the config file writes as strings:
//! humantime durations and `64KiB`-style sizes.

use std::time::Duration;

/// Whether a zero duration is meaningful for a key (`catch_up = "0s"` turns
/// catch-up off) or a mistake (`timeout = "0s"` would kill every run at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Zero {
    /// `"0s"` is accepted.
    Allowed,
    /// `"0s"` is an error.
    Rejected,
}

/// Parses a humantime duration such as `"90s"` or `"1h 30m"`.
pub(crate) fn parse_duration(text: &str, zero: Zero) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(format!("duration {text:?} is negative"));
    }
    let duration = humantime::parse_duration(trimmed).map_err(|e| {
        format!("invalid duration {text:?}: {e} (write it like \"90s\", \"10m\" or \"1h 30m\")")
    })?;
    if zero == Zero::Rejected && duration.is_zero() {
        return Err(format!("duration {text:?} must be greater than zero"));
    }
    Ok(duration)
}

/// Parses a size such as `"64KiB"`, `"1 MiB"`, `"500kB"`, `"1G"` (`K`, `M`
/// and `G` are 1024-based, as systemd reads them) or `"4096"` (bytes).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let invalid = || {
        format!("invalid size {text:?} (write it like \"64KiB\", \"1MiB\" or \"4096\" for bytes)")
    };
    let number: u64 = digits.parse().map_err(|_| invalid())?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(invalid()),
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("90s", Zero::Rejected),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("1h 30m", Zero::Rejected),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(parse_duration("0s", Zero::Allowed), Ok(Duration::ZERO));
        assert!(
            parse_duration("0s", Zero::Rejected)
                .unwrap_err()
                .contains("greater than zero")
        );
        assert!(
            parse_duration("-5s", Zero::Allowed)
                .unwrap_err()
                .contains("negative")
        );
        assert!(
            parse_duration("soon", Zero::Allowed)
                .unwrap_err()
                .contains("invalid duration")
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_size("500kB"), Ok(500_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("64 furlongs").is_err());
        assert!(parse_size("KiB").is_err());
        assert!(
            parse_size("99999999999999GiB")
                .unwrap_err()
                .contains("too large")
        );
    }
}
