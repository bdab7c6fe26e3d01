//! A job's resource limits: `memory_max`, `cpu_max`, `tasks_max` and
//! `nofile_max`, as the job file writes them. How a run is held to them (a
//! cgroup v2 of its own, or rlimits) is the runner's.

use std::fmt;
use std::ops::RangeInclusive;

/// The least `memory_max`: below it no program has room to start.
pub(crate) const MIN_MEMORY_MAX: u64 = 1 << 20;

/// `tasks_max`'s range: the kernel's most process ids (`PID_MAX_LIMIT`).
pub(crate) const TASKS_MAX_RANGE: RangeInclusive<u64> = 1..=4_194_304;

/// `nofile_max`'s range: room for the standard streams, up to the
/// kernel's default `fs.nr_open`.
pub(crate) const NOFILE_MAX_RANGE: RangeInclusive<u64> = 3..=1_048_576;

/// `cpu_max`'s range, in percent of the host's CPU time.
pub(crate) const CPU_MAX_RANGE: RangeInclusive<u32> = 1..=100;

/// A job's resource limits; each `None` is not limited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resources {
    /// The most memory its run may use, in bytes.
    pub(crate) memory_max: Option<u64>,
    /// The most of the host's CPU time its run may use, in percent of all
    /// its CPUs.
    pub(crate) cpu_max: Option<u32>,
    /// The most processes and threads.
    pub(crate) tasks_max: Option<u64>,
    /// The most open files of each of its processes.
    pub(crate) nofile_max: Option<u64>,
}

impl Resources {
    /// Whether no limit is set.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Resources::default()
    }
}

impl fmt::Display for Resources {
    /// As the job file writes them, set ones only: `memory_max=512M
    /// cpu_max=50%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(bytes) = self.memory_max {
            parts.push(format!("memory_max={}", fmt_memory(bytes)));
        }
        if let Some(percent) = self.cpu_max {
            parts.push(format!("cpu_max={percent}%"));
        }
        if let Some(tasks) = self.tasks_max {
            parts.push(format!("tasks_max={tasks}"));
        }
        if let Some(files) = self.nofile_max {
            parts.push(format!("nofile_max={files}"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// `memory_max`: a number of bytes with an optional unit, K, M, G or T
/// (powers of 1024, as systemd's `MemoryMax=`; `KiB`… are the same), at
/// least [`MIN_MEMORY_MAX`].
pub(crate) fn parse_memory(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(split);
    let invalid = || {
        format!(
            "memory_max {text:?}: expected a size such as \"512M\" or \"2G\" (K, M, G, T: powers of 1024; no unit: bytes)"
        )
    };
    let number: u64 = digits.parse().map_err(|_| invalid())?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return Err(invalid()),
    };
    let bytes = number
        .checked_mul(1 << shift)
        .filter(|b| *b < i64::MAX as u64)
        .ok_or_else(|| format!("memory_max {text:?} is too large"))?;
    if bytes < MIN_MEMORY_MAX {
        return Err(format!(
            "memory_max {text:?} is too small: at least 1M, room for a program to start"
        ));
    }
    Ok(bytes)
}

/// `bytes` as `memory_max` is written: in the largest unit that divides it.
pub(crate) fn fmt_memory(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `cpu_max`: a whole percentage of the host's CPU time, `"50%"`, in
/// [`CPU_MAX_RANGE`].
pub(crate) fn parse_cpu(text: &str) -> Result<u32, String> {
    let range = || {
        format!(
            "cpu_max {text:?}: expected a share of the host's CPU time (all its CPUs) from {}% to {}%, such as \"50%\"",
            CPU_MAX_RANGE.start(),
            CPU_MAX_RANGE.end()
        )
    };
    let digits = text.trim().strip_suffix('%').ok_or_else(range)?;
    match digits.parse::<u32>() {
        Ok(percent) if CPU_MAX_RANGE.contains(&percent) => Ok(percent),
        _ => Err(range()),
    }
}

/// `tasks_max` or `nofile_max` (`key`): an integer in `range`.
pub(crate) fn parse_count(
    key: &str,
    value: i64,
    range: &RangeInclusive<u64>,
) -> Result<u64, String> {
    match u64::try_from(value) {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "{key} {value} is out of range {}–{}",
            range.start(),
            range.end()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_in_powers_of_1024() {
        assert_eq!(parse_memory("512M"), Ok(512 << 20));
        assert_eq!(parse_memory("2G"), Ok(2 << 30));
        assert_eq!(parse_memory("1024K"), Ok(1 << 20));
        assert_eq!(parse_memory("64MiB"), Ok(64 << 20));
        assert_eq!(parse_memory("1T"), Ok(1 << 40));
        assert_eq!(parse_memory("2097152"), Ok(2 << 20));
        for bad in ["512Q", "", "M", "-5M", "1.5G", "512 MB", "512m"] {
            let e = parse_memory(bad).expect_err(bad);
            assert!(e.contains("expected a size"), "{bad}: {e}");
        }
        for small in ["0", "0M", "1000K", "1"] {
            let e = parse_memory(small).expect_err(small);
            assert!(e.contains("too small"), "{small}: {e}");
        }
        assert!(parse_memory("99999999999T").is_err());
        assert_eq!(fmt_memory(512 << 20), "512M");
        assert_eq!(fmt_memory(3 << 30), "3G");
        assert_eq!(fmt_memory(1536 << 10), "1536K");
        assert_eq!(fmt_memory(1_000_001), "1000001");
    }

    #[test]
    fn cpu_shares_in_whole_percent() {
        assert_eq!(parse_cpu("50%"), Ok(50));
        assert_eq!(parse_cpu("100%"), Ok(100));
        assert_eq!(parse_cpu("1%"), Ok(1));
        for bad in ["150%", "0%", "-5%", "50", "half", "12.5%", "%"] {
            let e = parse_cpu(bad).expect_err(bad);
            assert!(e.contains("from 1% to 100%"), "{bad}: {e}");
        }
    }

    #[test]
    fn counts_in_their_ranges() {
        assert_eq!(parse_count("tasks_max", 64, &TASKS_MAX_RANGE), Ok(64));
        assert_eq!(parse_count("nofile_max", 16, &NOFILE_MAX_RANGE), Ok(16));
        for bad in [0, -1, 4_194_305] {
            let e = parse_count("tasks_max", bad, &TASKS_MAX_RANGE).expect_err("out of range");
            assert_eq!(e, format!("tasks_max {bad} is out of range 1–4194304"));
        }
        assert!(parse_count("nofile_max", 2, &NOFILE_MAX_RANGE).is_err());
    }

    #[test]
    fn shown_as_written() {
        let resources = Resources {
            memory_max: Some(512 << 20),
            cpu_max: Some(50),
            tasks_max: Some(64),
            nofile_max: Some(1024),
        };
        assert_eq!(
            resources.to_string(),
            "memory_max=512M cpu_max=50% tasks_max=64 nofile_max=1024"
        );
        assert!(Resources::default().is_empty());
        assert!(!resources.is_empty());
    }
}
