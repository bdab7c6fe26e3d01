//! A job's exit-code rules (`success_exit_codes`, `skip_exit_codes`,
//! `retry_on_exit_codes`): how a process's exit code is recorded, whether a
//! failure is tried again, and the line that says which rule decided.

use crate::run::RunStatus;

/// The largest exit code: a process's exit status is one byte.
pub(crate) const MAX_EXIT_CODE: i64 = 255;

/// A job's exit-code rules. A code is in one list at most (the file's
/// check refuses one in two).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExitCodes {
    /// The codes recorded `succeeded`, sorted: `[0]` unless set.
    pub(crate) success: Vec<i32>,
    /// The codes recorded `skipped` (nothing to do), sorted: none unless
    /// set. Never retried, never notified as a failure.
    pub(crate) skip: Vec<i32>,
    /// With retries, the codes of the failures tried again, sorted; `None`:
    /// every failed or timed-out attempt is.
    pub(crate) retry_on: Option<Vec<i32>>,
}

impl Default for ExitCodes {
    fn default() -> Self {
        ExitCodes {
            success: vec![0],
            skip: Vec::new(),
            retry_on: None,
        }
    }
}

/// How an exit code is recorded: the status, and the line that says which
/// rule decided it, where one other than "0 succeeds, the rest fail" did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Judged {
    pub(crate) status: RunStatus,
    pub(crate) rule: Option<String>,
}

impl ExitCodes {
    /// Whether they are the rules a job has unless it sets any.
    pub(crate) fn is_default(&self) -> bool {
        *self == ExitCodes::default()
    }

    /// How a process that exited with `code` is recorded.
    pub(crate) fn judge(&self, code: i32) -> Judged {
        let (status, rule) = if self.success.contains(&code) {
            let rule = (code != 0).then(|| format!("exit {code}: success by success_exit_codes"));
            (RunStatus::Succeeded, rule)
        } else if self.skip.contains(&code) {
            let rule = format!("exit {code}: skipped by skip_exit_codes");
            (RunStatus::Skipped, Some(rule))
        } else if code == 0 {
            let rule = format!(
                "exit 0: failed, not in success_exit_codes = {}",
                list(&self.success)
            );
            (RunStatus::Failed, Some(rule))
        } else {
            (RunStatus::Failed, None)
        };
        Judged { status, rule }
    }

    /// Whether an attempt that ended `status` with `exit_code` may be
    /// tried again (if retries are left): a failed or timed-out one, and,
    /// where `retry_on_exit_codes` is set, only a failure with one of its
    /// codes.
    pub(crate) fn retried(&self, status: RunStatus, exit_code: Option<i32>) -> bool {
        if !matches!(status, RunStatus::Failed | RunStatus::TimedOut) {
            return false;
        }
        match &self.retry_on {
            None => true,
            Some(codes) => {
                status == RunStatus::Failed && exit_code.is_some_and(|code| codes.contains(&code))
            }
        }
    }

    /// The line that says why a failed or timed-out attempt with retries
    /// left is not tried again, if `retry_on_exit_codes` is why.
    pub(crate) fn not_retried(&self, status: RunStatus, exit_code: Option<i32>) -> Option<String> {
        let codes = self.retry_on.as_ref()?;
        if self.retried(status, exit_code)
            || !matches!(status, RunStatus::Failed | RunStatus::TimedOut)
        {
            return None;
        }
        let ending = match (status, exit_code) {
            (RunStatus::Failed, Some(code)) => format!("exit {code}"),
            (RunStatus::Failed, None) => "killed by a signal".to_string(),
            _ => status.as_str().replace('_', " "),
        };
        Some(format!(
            "{ending}: not retried (retry_on_exit_codes = {})",
            list(codes)
        ))
    }

    /// A code that is in two of the lists, with the two lists' keys.
    pub(crate) fn shared(&self) -> Option<(i32, &'static str, &'static str)> {
        let lists: [(&[i32], &'static str); 3] = [
            (&self.success, "success_exit_codes"),
            (&self.skip, "skip_exit_codes"),
            (
                self.retry_on.as_deref().unwrap_or_default(),
                "retry_on_exit_codes",
            ),
        ];
        for (i, (codes, key)) in lists.iter().enumerate() {
            for (others, other) in &lists[i + 1..] {
                if let Some(code) = codes.iter().find(|c| others.contains(c)) {
                    return Some((*code, *key, *other));
                }
            }
        }
        None
    }
}

/// Whether a run recorded `status` with `exit_code` was skipped by its
/// exit code (`skip_exit_codes`): it ran and had nothing to do. A run
/// skipped without running (a shared lock stayed held) has no exit code.
pub(crate) fn skipped_by_code(status: RunStatus, exit_code: Option<i32>) -> bool {
    status == RunStatus::Skipped && exit_code.is_some()
}

/// Codes as the job file writes them: `[0, 3]`.
pub(crate) fn list(codes: &[i32]) -> String {
    let codes: Vec<String> = codes.iter().map(ToString::to_string).collect();
    format!("[{}]", codes.join(", "))
}

/// The codes `raw` lists, sorted and each once; or why it cannot be.
pub(crate) fn parse(key: &str, raw: &[i64]) -> Result<Vec<i32>, String> {
    let mut codes = Vec::with_capacity(raw.len());
    for &code in raw {
        match i32::try_from(code) {
            Ok(code) if (0..=MAX_EXIT_CODE).contains(&i64::from(code)) => codes.push(code),
            _ => {
                return Err(format!(
                    "exit code {code} in {key} is out of range 0–{MAX_EXIT_CODE} (a process's exit \
                     status is one byte)"
                ));
            }
        }
    }
    codes.sort_unstable();
    codes.dedup();
    if codes.is_empty() && key == "success_exit_codes" {
        return Err(
            "success_exit_codes must list at least one code: with none, no run could succeed"
                .to_string(),
        );
    }
    Ok(codes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(success: &[i32], skip: &[i32], retry_on: Option<&[i32]>) -> ExitCodes {
        ExitCodes {
            success: success.to_vec(),
            skip: skip.to_vec(),
            retry_on: retry_on.map(<[i32]>::to_vec),
        }
    }

    #[test]
    fn each_code_is_judged_by_its_list_and_the_rule_is_named() {
        let default = ExitCodes::default();
        assert_eq!(default.judge(0).status, RunStatus::Succeeded);
        assert_eq!(default.judge(0).rule, None);
        assert_eq!(default.judge(3).status, RunStatus::Failed);
        assert_eq!(default.judge(3).rule, None);

        let r = rules(&[0, 3], &[99], None);
        let three = r.judge(3);
        assert_eq!(three.status, RunStatus::Succeeded);
        assert_eq!(
            three.rule.as_deref(),
            Some("exit 3: success by success_exit_codes")
        );
        let skip = r.judge(99);
        assert_eq!(skip.status, RunStatus::Skipped);
        assert_eq!(
            skip.rule.as_deref(),
            Some("exit 99: skipped by skip_exit_codes")
        );
        assert_eq!(r.judge(2).status, RunStatus::Failed);

        let no_zero = rules(&[3], &[], None);
        let zero = no_zero.judge(0);
        assert_eq!(zero.status, RunStatus::Failed);
        assert_eq!(
            zero.rule.as_deref(),
            Some("exit 0: failed, not in success_exit_codes = [3]")
        );
    }

    #[test]
    fn only_the_listed_failures_are_retried() {
        let all = ExitCodes::default();
        assert!(all.retried(RunStatus::Failed, Some(2)));
        assert!(all.retried(RunStatus::TimedOut, None));
        assert!(!all.retried(RunStatus::Skipped, Some(99)));
        assert_eq!(all.not_retried(RunStatus::Failed, Some(2)), None);

        let r = rules(&[0], &[], Some(&[75]));
        assert!(r.retried(RunStatus::Failed, Some(75)));
        assert!(!r.retried(RunStatus::Failed, Some(2)));
        assert!(!r.retried(RunStatus::TimedOut, None));
        assert_eq!(r.not_retried(RunStatus::Failed, Some(75)), None);
        assert_eq!(
            r.not_retried(RunStatus::Failed, Some(2)).as_deref(),
            Some("exit 2: not retried (retry_on_exit_codes = [75])")
        );
        assert_eq!(
            r.not_retried(RunStatus::TimedOut, None).as_deref(),
            Some("timed out: not retried (retry_on_exit_codes = [75])")
        );
        assert_eq!(r.not_retried(RunStatus::Succeeded, Some(0)), None);
    }

    #[test]
    fn a_code_in_two_lists_is_found() {
        assert_eq!(ExitCodes::default().shared(), None);
        assert_eq!(
            rules(&[0], &[0], None).shared(),
            Some((0, "success_exit_codes", "skip_exit_codes"))
        );
        assert_eq!(
            rules(&[0], &[99], Some(&[75, 99])).shared(),
            Some((99, "skip_exit_codes", "retry_on_exit_codes"))
        );
        assert_eq!(rules(&[0, 3], &[99], Some(&[75])).shared(), None);
    }

    #[test]
    fn codes_are_bytes() {
        assert_eq!(parse("skip_exit_codes", &[99, 3, 99]), Ok(vec![3, 99]));
        assert_eq!(parse("skip_exit_codes", &[]), Ok(vec![]));
        assert!(
            parse("skip_exit_codes", &[256])
                .expect_err("out of range")
                .contains("exit code 256 in skip_exit_codes is out of range 0–255")
        );
        assert!(parse("retry_on_exit_codes", &[-1]).is_err());
        assert!(parse("success_exit_codes", &[i64::MAX]).is_err());
        assert!(parse("success_exit_codes", &[]).is_err());
    }
}
