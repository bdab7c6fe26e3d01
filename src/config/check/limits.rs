//! The rules of each `[[limit]]`, and of a job's `limits`.

use super::*;
use crate::config::Limit;

impl Checker<'_> {
    /// One `[[limit]]`: a name of a lock's form, not declared before, and
    /// `max_running` from 1 to [`MAX_LIMIT_RUNNING`].
    pub(super) fn limit(&mut self, span: Range<usize>, raw: RawLimit) -> Option<Limit> {
        let scope = Scope::Table("limit");
        let name = self.table_name(raw.name, span.clone(), "limit");
        let label = name
            .as_deref()
            .map_or_else(String::new, |n| format!("limit {n:?}: "));
        let max_running = match raw.max_running {
            None => {
                self.report(
                    Some(span),
                    Some(scope),
                    Some("max_running"),
                    format!("{label}a limit needs max_running, how many of its jobs' runs may run at once"),
                );
                None
            }
            Some(max) => match u32::try_from(*max.get_ref()) {
                Ok(n @ 1..=MAX_LIMIT_RUNNING) => Some(n),
                _ => {
                    self.report(
                        Some(max.span()),
                        Some(scope),
                        Some("max_running"),
                        format!(
                            "{label}max_running {} is out of range 1–{MAX_LIMIT_RUNNING}",
                            max.get_ref()
                        ),
                    );
                    None
                }
            },
        };
        Some(Limit {
            name: name?,
            max_running: max_running?,
        })
    }

    /// A job's `limits`: each a declared `[[limit]]`, sorted by name and
    /// without repeats.
    pub(super) fn job_limits(
        &mut self,
        raw: Option<Spanned<Vec<String>>>,
        declared: &[Limit],
        scope: Scope<'_>,
    ) -> Vec<Limit> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        let span = raw.span();
        let mut limits: Vec<Limit> = Vec::new();
        for name in raw.into_inner() {
            match declared.iter().find(|l| l.name == name) {
                Some(limit) => limits.push(limit.clone()),
                None => {
                    let known = declared
                        .iter()
                        .map(|l| format!("{:?}", l.name))
                        .collect::<Vec<_>>();
                    self.report(
                        Some(span.clone()),
                        Some(scope),
                        Some("limits"),
                        format!(
                            "no [[limit]] named {name:?} ({})",
                            if known.is_empty() {
                                "the file declares none".to_string()
                            } else {
                                format!("the file declares {}", known.join(", "))
                            }
                        ),
                    );
                }
            }
        }
        limits.sort_by(|a, b| a.name.cmp(&b.name));
        limits.dedup_by(|a, b| a.name == b.name);
        limits
    }
}
