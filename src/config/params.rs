//! A job's parameters (`params`): the names a run may be given values for
//! (`replicron trigger JOB --param NAME=VALUE`, the API, the dashboard),
//! which it gets as environment variables. A name declared alone must be
//! given; `NAME=VALUE` declares one with a default. Values come only from
//! whoever starts the run, never from the daemon's environment.

use std::fmt;
use std::path::PathBuf;

use crate::run::Params;

/// The longest value a parameter may have, in bytes.
pub(crate) const MAX_VALUE_LEN: usize = 4096;

/// The largest value a `secret_env` file may hold, in bytes.
pub(crate) const MAX_SECRET_ENV: u64 = 64 * 1024;

/// One declared parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Param {
    /// Its name, the environment variable the run gets.
    pub(crate) name: String,
    /// Its value when a run is given none; `None`: it must be given.
    pub(crate) default: Option<String>,
    /// Where the default of a secret parameter is read at each run's
    /// start, when it is `file:PATH` or `credential:NAME`.
    pub(crate) source: Option<SecretSource>,
}

/// Where a secret parameter's default is read from, so that the secret is
/// not written in the job file: `file:/PATH`, or `credential:NAME`, the
/// file `NAME` of systemd's `$CREDENTIALS_DIRECTORY` (`LoadCredential=`).
/// Read by replicron at each run's start; one trailing newline is left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SecretSource {
    /// An absolute path.
    File(PathBuf),
    /// A systemd credential's name.
    Credential(String),
}

impl SecretSource {
    /// The source a secret parameter's `default` names, if it names one.
    pub(crate) fn of(default: &str) -> Option<Result<SecretSource, String>> {
        if let Some(path) = default.strip_prefix("file:") {
            let path = PathBuf::from(path);
            return Some(if path.is_absolute() {
                Ok(SecretSource::File(path))
            } else {
                Err(format!(
                    "file:{}: the path must be absolute",
                    path.display()
                ))
            });
        }
        let name = default.strip_prefix("credential:")?;
        Some(
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                Err(format!(
                    "credential:{name}: expected the name of a systemd credential (LoadCredential=)"
                ))
            } else {
                Ok(SecretSource::Credential(name.to_string()))
            },
        )
    }

    /// The file it is read from.
    fn path(&self) -> Result<PathBuf, String> {
        match self {
            SecretSource::File(path) => Ok(path.clone()),
            SecretSource::Credential(name) => std::env::var_os("CREDENTIALS_DIRECTORY")
                .filter(|dir| !dir.is_empty())
                .map(|dir| PathBuf::from(dir).join(name))
                .ok_or_else(|| {
                    format!(
                        "credential:{name}: $CREDENTIALS_DIRECTORY is not set (systemd sets it for a unit with LoadCredential=)"
                    )
                }),
        }
    }

    /// The value for `secret_env` variable `name`, read now: the file's
    /// text without one trailing newline, at most [`MAX_SECRET_ENV`] bytes
    /// and without a NUL byte. The error names the variable and the file,
    /// never what it holds.
    pub(crate) fn read_env(&self, name: &str) -> Result<String, String> {
        use std::io::Read as _;
        let path = self.path().map_err(|e| format!("secret_env {name}: {e}"))?;
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|file| file.take(MAX_SECRET_ENV + 1).read_to_end(&mut bytes))
            .map_err(|e| {
                format!(
                    "secret_env {name}: {self} cannot be read ({}): {e}",
                    path.display()
                )
            })?;
        if bytes.len() as u64 > MAX_SECRET_ENV {
            return Err(format!(
                "secret_env {name}: {self} ({}) is larger than {MAX_SECRET_ENV} bytes",
                path.display()
            ));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            format!(
                "secret_env {name}: {self} ({}) is not UTF-8 text",
                path.display()
            )
        })?;
        let value = one_line_end_off(&text);
        if value.contains('\0') {
            return Err(format!(
                "secret_env {name}: {self} ({}) holds a NUL byte, which no environment variable can",
                path.display()
            ));
        }
        Ok(value.to_string())
    }

    /// Why its file is a risk, if it is one: readable by its group or by
    /// others, who need not be the daemon's user.
    pub(crate) fn exposed(&self) -> Option<String> {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self.path().ok()?;
        let mode = std::fs::metadata(&path).ok()?.permissions().mode();
        (mode & 0o044 != 0).then(|| {
            format!(
                "{} is readable by its group or by others (mode {:04o}): only replicron's user needs to read it (chmod 600)",
                path.display(),
                mode & 0o7777
            )
        })
    }

    /// The value for parameter `name`, read now; the error names the file,
    /// never what it holds.
    pub(crate) fn read(&self, name: &str) -> Result<String, String> {
        let path = self.path()?;
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "parameter {name}: its default {self} cannot be read ({}): {e}",
                path.display()
            )
        })?;
        let value = one_line_end_off(&text);
        check_value(name, value).map_err(|e| format!("{e} (read from {self})"))?;
        Ok(value.to_string())
    }
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "file:{}", path.display()),
            SecretSource::Credential(name) => write!(f, "credential:{name}"),
        }
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.default {
            Some(default) => write!(f, "{}={default}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl Param {
    /// Parses one entry of `params`: `NAME` or `NAME=DEFAULT`.
    pub(crate) fn parse(spec: &str) -> Result<Param, String> {
        let (name, default) = match spec.split_once('=') {
            Some((name, default)) => (name, Some(default.to_string())),
            None => (spec, None),
        };
        check_name(name)?;
        if let Some(default) = &default {
            check_value(name, default).map_err(|e| e.to_string())?;
        }
        Ok(Param {
            name: name.to_string(),
            default,
            source: None,
        })
    }
}

/// `text` without its one trailing line end (`\n` or `\r\n`), as a
/// secret's file is written by an editor or `echo`.
fn one_line_end_off(text: &str) -> &str {
    text.strip_suffix('\n')
        .map(|v| v.strip_suffix('\r').unwrap_or(v))
        .unwrap_or(text)
}

/// A parameter's name: an environment variable's, as a shell writes one
/// (`[A-Za-z_][A-Za-z0-9_]*`), and not one of replicron's own.
fn check_name(name: &str) -> Result<(), String> {
    if !crate::secrets::is_variable_name(name) {
        return Err(format!(
            "invalid parameter name {name:?}: expected an environment variable's name, \
             letters, digits and _ not starting with a digit (\"DAYS\", or \"DAYS=30\" with a default)"
        ));
    }
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("REPLICRON_") {
        return Err(format!(
            "invalid parameter name {name:?}: REPLICRON_* variables are replicron's own"
        ));
    }
    // A caller's value for one of these would decide which program runs
    // or what it loads, not only what the job is given.
    if upper.starts_with("LD_") || matches!(upper.as_str(), "PATH" | "BASH_ENV" | "ENV" | "IFS") {
        return Err(format!(
            "invalid parameter name {name:?}: LD_*, PATH, BASH_ENV, ENV and IFS change how a \
             process loads or runs; name the parameter for what it means to the job"
        ));
    }
    Ok(())
}

/// Why the values given for a run were refused: nothing runs and nothing is
/// recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamError {
    /// `--param` without `=`.
    #[error("parameter {0:?}: expected NAME=VALUE")]
    Malformed(String),
    /// A name the job does not declare.
    #[error("parameter {name} is not declared by job {job} (it declares {})", declared_list(.declared))]
    Undeclared {
        name: String,
        job: String,
        declared: Vec<String>,
    },
    /// A name given twice.
    #[error("parameter {0} is given twice")]
    Repeated(String),
    /// A declared name without a default, not given.
    #[error(
        "parameter {name} of job {job} has no default and was not given (--param {name}=VALUE)"
    )]
    Missing { name: String, job: String },
    /// A declared name without a default, given an empty value.
    #[error("parameter {name} of job {job} has no default and was given an empty value")]
    Empty { name: String, job: String },
    /// A value with a NUL byte, which no environment variable can hold.
    #[error("parameter {0}: its value holds a NUL byte")]
    Nul(String),
    /// A value longer than [`MAX_VALUE_LEN`].
    #[error("parameter {name}: its value is {len} bytes long, more than {MAX_VALUE_LEN}")]
    TooLong { name: String, len: usize },
}

fn declared_list(declared: &[String]) -> String {
    if declared.is_empty() {
        "none".to_string()
    } else {
        declared.join(", ")
    }
}

fn check_value(name: &str, value: &str) -> Result<(), ParamError> {
    if value.contains('\0') {
        return Err(ParamError::Nul(name.to_string()));
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(ParamError::TooLong {
            name: name.to_string(),
            len: value.len(),
        });
    }
    Ok(())
}

/// Whether `value` is one a parameter may have (no NUL, not too long).
pub(crate) fn is_storable(value: &str) -> bool {
    check_value("", value).is_ok()
}

/// Splits `NAME=VALUE` (a `--param`).
pub(crate) fn split(arg: &str) -> Result<(String, String), ParamError> {
    arg.split_once('=')
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .ok_or_else(|| ParamError::Malformed(arg.to_string()))
}

/// The parameters of a run of `job`, which declares `declared`, given
/// `given`: each declared name with its given value or its default (but
/// for a default read from a [`SecretSource`], which the run reads at its
/// start).
pub(crate) fn resolve(
    job: &str,
    declared: &[Param],
    given: &[(String, String)],
) -> Result<Params, ParamError> {
    let mut params = Params::new();
    for (name, value) in given {
        if !declared.iter().any(|p| p.name == *name) {
            return Err(ParamError::Undeclared {
                name: name.clone(),
                job: job.to_string(),
                declared: declared.iter().map(|p| p.name.clone()).collect(),
            });
        }
        check_value(name, value)?;
        if value.is_empty()
            && declared
                .iter()
                .any(|p| p.name == *name && p.default.is_none())
        {
            return Err(ParamError::Empty {
                name: name.clone(),
                job: job.to_string(),
            });
        }
        if params.insert(name.clone(), value.clone()).is_some() {
            return Err(ParamError::Repeated(name.clone()));
        }
    }
    for param in declared {
        if params.contains_key(&param.name) {
            continue;
        }
        match &param.default {
            Some(_) if param.source.is_some() => {}
            Some(default) => {
                params.insert(param.name.clone(), default.clone());
            }
            None => {
                return Err(ParamError::Missing {
                    name: param.name.clone(),
                    job: job.to_string(),
                });
            }
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> Vec<Param> {
        vec![
            Param::parse("DAYS").unwrap(),
            Param::parse("TENANT=all").unwrap(),
        ]
    }

    fn given(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_declaration_is_a_name_with_or_without_a_default() {
        assert_eq!(declared()[0].default, None);
        assert_eq!(declared()[1].default.as_deref(), Some("all"));
        assert_eq!(Param::parse("EMPTY=").unwrap().default.as_deref(), Some(""));
        for bad in [
            "",
            "1DAYS",
            "DAYS-AGO",
            "A B",
            "REPLICRON_JOB",
            "replicron_x",
        ] {
            assert!(Param::parse(bad).is_err(), "{bad:?} accepted");
        }
        // The names that change how a process loads or runs.
        for risky in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "PATH",
            "BASH_ENV",
            "ENV",
            "IFS",
        ] {
            let e = Param::parse(&format!("{risky}=x")).unwrap_err();
            assert!(e.contains(&format!("{risky:?}")), "{e}");
        }
        for fine in ["PATHS", "LOAD", "ENVIRONMENT", "OLD_PATH"] {
            assert!(Param::parse(fine).is_ok(), "{fine:?} refused");
        }
        assert!(Param::parse("X=a\0b").is_err());
    }

    #[test]
    fn given_values_and_defaults_make_the_runs_parameters() {
        let params = resolve("billing", &declared(), &given(&[("DAYS", "30")])).unwrap();
        assert_eq!(params["DAYS"], "30");
        assert_eq!(params["TENANT"], "all");
        // An empty value for one with a default is a value.
        let params = resolve(
            "billing",
            &declared(),
            &given(&[("TENANT", ""), ("DAYS", "1")]),
        )
        .unwrap();
        assert_eq!(
            (params["DAYS"].as_str(), params["TENANT"].as_str()),
            ("1", "")
        );
    }

    #[test]
    fn each_bad_value_is_refused_by_name() {
        let refuse =
            |pairs: &[(&str, &str)]| resolve("billing", &declared(), &given(pairs)).unwrap_err();
        assert!(matches!(refuse(&[]), ParamError::Missing { name, .. } if name == "DAYS"));
        let empty = refuse(&[("DAYS", "")]);
        assert_eq!(
            empty.to_string(),
            "parameter DAYS of job billing has no default and was given an empty value"
        );
        let undeclared = refuse(&[("DAYS", "1"), ("HOST", "x")]);
        assert_eq!(
            undeclared.to_string(),
            "parameter HOST is not declared by job billing (it declares DAYS, TENANT)"
        );
        assert_eq!(
            refuse(&[("DAYS", "1"), ("DAYS", "2")]),
            ParamError::Repeated("DAYS".into())
        );
        assert_eq!(refuse(&[("DAYS", "a\0b")]), ParamError::Nul("DAYS".into()));
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        assert!(
            matches!(refuse(&[("DAYS", &long)]), ParamError::TooLong { len, .. } if len == MAX_VALUE_LEN + 1)
        );
        assert!(
            resolve(
                "billing",
                &declared(),
                &given(&[("DAYS", &"x".repeat(MAX_VALUE_LEN))])
            )
            .is_ok()
        );
        assert_eq!(split("DAYS"), Err(ParamError::Malformed("DAYS".into())));
        assert_eq!(split("Q=a=b"), Ok(("Q".into(), "a=b".into())));
    }

    #[test]
    fn a_secret_default_may_name_a_file_read_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("password");
        std::fs::write(&path, "hunter2\r\n").unwrap();
        let spec = format!("file:{}", path.display());
        let source = SecretSource::of(&spec).unwrap().unwrap();
        assert_eq!(source.read("PASSWORD").unwrap(), "hunter2");
        assert_eq!(source.to_string(), spec);
        std::fs::remove_file(&path).unwrap();
        let e = source.read("PASSWORD").unwrap_err();
        assert!(e.contains("PASSWORD") && e.contains(&spec), "{e}");
        assert!(SecretSource::of("file:relative/path").unwrap().is_err());
        assert!(SecretSource::of("credential:../x").unwrap().is_err());
        assert_eq!(
            SecretSource::of("credential:db"),
            Some(Ok(SecretSource::Credential("db".into())))
        );
        assert_eq!(SecretSource::of("hunter2"), None);
        // A run given no value leaves it to the run to read.
        let declared = vec![Param {
            source: Some(source),
            ..Param::parse(&format!("PASSWORD={spec}")).unwrap()
        }];
        assert!(resolve("load", &declared, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_secret_env_file_is_read_bounded_and_its_value_never_in_an_error() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api-token");
        std::fs::write(&path, "s3cr3t-token\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let source = SecretSource::File(path.clone());
        assert_eq!(source.read_env("API_TOKEN").unwrap(), "s3cr3t-token");
        assert_eq!(source.exposed(), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let exposed = source.exposed().expect("group-readable");
        assert!(exposed.contains("0640"), "{exposed}");
        // Only one newline is left out.
        std::fs::write(&path, "two\n\n").unwrap();
        assert_eq!(source.read_env("API_TOKEN").unwrap(), "two\n");
        std::fs::write(&path, "x".repeat(MAX_SECRET_ENV as usize)).unwrap();
        assert_eq!(
            source.read_env("API_TOKEN").unwrap().len(),
            MAX_SECRET_ENV as usize
        );
        std::fs::write(&path, "s3cr3t".repeat(20_000)).unwrap();
        let e = source.read_env("API_TOKEN").unwrap_err();
        assert!(
            e.contains("larger than 65536 bytes") && !e.contains("s3cr3t"),
            "{e}"
        );
        std::fs::write(&path, "s3cr3t\0x").unwrap();
        let e = source.read_env("API_TOKEN").unwrap_err();
        assert!(e.contains("NUL") && !e.contains("s3cr3t"), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = source.read_env("API_TOKEN").unwrap_err();
        assert!(
            e.contains("secret_env API_TOKEN") && e.contains(&path.display().to_string()),
            "{e}"
        );
    }
}
