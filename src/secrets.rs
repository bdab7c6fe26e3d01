//! Secrets no job can read. The database URL (its password), the web token
//! and the variables notifications read tokens from reach replicron through
//! its environment, or through systemd credentials. A job is a child of the
//! daemon: left alone, it could read them from `/proc/PPID/environ` even
//! though they are taken out of its own environment. So, first thing in
//! `main`, while the process has one thread:
//!
//! - each file of `$CREDENTIALS_DIRECTORY` named like a variable
//!   (`LoadCredential=REPLICRON_DATABASE_URL:/etc/replicron/credentials/database-url`)
//!   becomes that variable, over what the environment says (an empty one
//!   sets nothing);
//! - every variable is moved to this process's heap and the environment
//!   block the kernel shows in `/proc/PID/environ` is overwritten with
//!   zeros: it shows nothing, whatever the variables' names;
//! - the process becomes non-dumpable: another process of the same user (a
//!   job running as replicron's own user) cannot attach to it or read its
//!   memory, and its `/proc/PID/` files belong to root.
//!
//! What remains: root (or a job running as root) can read any process's
//! memory, and a job running as replicron's own user can read the files
//! replicron reads (the config file and the credentials directory).

use std::ffi::OsString;
use std::sync::OnceLock;

/// The variable systemd points at the unit's credentials with.
pub(crate) const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";

/// The largest credential read (a URL or a token is far smaller).
const MAX_CREDENTIAL: u64 = 64 * 1024;

/// The variables set from credentials: never passed on to a job or a
/// notification command.
static FROM_CREDENTIALS: OnceLock<Vec<String>> = OnceLock::new();

/// What [`protect`] did, for the log once logging is set up.
#[derive(Debug, Default)]
pub(crate) struct Protected {
    /// The variables set from credentials.
    pub(crate) credentials: Vec<String>,
    /// Problems met on the way (never a secret's value).
    pub(crate) problems: Vec<String>,
}

/// Reads the credentials, scrubs the environment block and makes the
/// process non-dumpable. Call it first thing in `main`, before any thread
/// starts: it changes the environment.
#[expect(
    unsafe_code,
    reason = "the environment is changed, and its first block overwritten, while the process has one thread"
)]
pub(crate) fn protect() -> Protected {
    let mut done = Protected::default();
    // SAFETY: a plain prctl on this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        done.problems.push(format!(
            "cannot make the process non-dumpable: {}",
            std::io::Error::last_os_error()
        ));
    }
    for (name, value) in read_credentials(&mut done.problems) {
        // SAFETY: one thread (the caller's promise).
        unsafe { std::env::set_var(&name, value) };
        done.credentials.push(name);
    }
    let _ = FROM_CREDENTIALS.set(done.credentials.clone());
    // Every variable set again: the C library copies each to the heap, and
    // no pointer into the first block is left to read it through (a name
    // that came twice is removed in both places, and set once).
    let vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (name, value) in &vars {
        // SAFETY: one thread (the caller's promise).
        unsafe {
            std::env::remove_var(name);
            std::env::set_var(name, value);
        }
    }
    if let Err(problem) = scrub_first_block() {
        done.problems.push(problem);
    }
    done
}

/// The variables a job or a notification command never inherits: those
/// set from credentials, and the credentials directory itself.
pub(crate) fn never_inherited() -> impl Iterator<Item = &'static str> {
    FROM_CREDENTIALS
        .get()
        .into_iter()
        .flatten()
        .map(String::as_str)
        .chain([CREDENTIALS_DIRECTORY])
}

/// Whether `name` is an environment variable's name as a shell writes
/// one, `[A-Za-z_][A-Za-z0-9_]*`: a name a credential may give a
/// variable, and a job's parameter's or `secret_env`'s.
pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The credentials named like variables, each without its final newline.
fn read_credentials(problems: &mut Vec<String>) -> Vec<(String, String)> {
    use std::io::Read as _;
    let Some(dir) = std::env::var_os(CREDENTIALS_DIRECTORY).filter(|d| !d.is_empty()) else {
        return Vec::new();
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) => {
            problems.push(format!(
                "cannot read the credentials in {}: {e}",
                std::path::Path::new(&dir).display()
            ));
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !is_variable_name(&name) {
            continue;
        }
        let mut value = String::new();
        let read = std::fs::File::open(&path)
            .and_then(|file| file.take(MAX_CREDENTIAL + 1).read_to_string(&mut value));
        match read {
            Ok(n) if n as u64 > MAX_CREDENTIAL => problems.push(format!(
                "the credential {} is larger than {MAX_CREDENTIAL} bytes: not used",
                path.display()
            )),
            Ok(_) => {
                let value = value
                    .strip_suffix('\n')
                    .map(|v| v.strip_suffix('\r').unwrap_or(v))
                    .unwrap_or(&value);
                // An empty file (as the package ships them) sets nothing:
                // the environment's value, if any, stands.
                if !value.trim().is_empty() {
                    found.push((name, value.to_string()));
                }
            }
            Err(e) => problems.push(format!(
                "cannot read the credential {}: {e} (not used)",
                path.display()
            )),
        }
    }
    found.sort();
    found
}

/// Overwrites the environment block the process started with, which
/// `/proc/PID/environ` shows, once no variable lives in it any more.
#[expect(
    unsafe_code,
    reason = "the block is this process's own memory, which nothing points into any more"
)]
fn scrub_first_block() -> Result<(), String> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|e| format!("cannot read /proc/self/stat: {e}"))?;
    let (start, end) = env_block(&stat).ok_or("cannot find the environment block")?;
    unsafe extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: `environ` is the C library's array of the variables, ended by
    // a null pointer; nothing changes it while this process has one thread.
    let still_inside = unsafe {
        let mut entry = environ;
        let mut inside = false;
        while !entry.is_null() && !(*entry).is_null() {
            let at = *entry as usize;
            inside |= (start..end).contains(&at);
            entry = entry.add(1);
        }
        inside
    };
    if still_inside {
        return Err(
            "a variable still lives in the first environment block: it is not overwritten"
                .to_string(),
        );
    }
    // SAFETY: [start, end) is this process's environment block (the kernel
    // says so), mapped and writable (it is on the stack), and no variable
    // lives in it any more.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
    Ok(())
}

/// `env_start` and `env_end` from `/proc/PID/stat` (fields 50 and 51).
fn env_block(stat: &str) -> Option<(usize, usize)> {
    // The command name (field 2) may hold spaces: count after its `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let start = fields.get(50 - 3)?.parse().ok()?;
    let end = fields.get(51 - 3)?.parse().ok()?;
    (start < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_names() {
        assert!(is_variable_name("REPLICRON_DATABASE_URL"));
        assert!(is_variable_name("_x1"));
        assert!(!is_variable_name("1X"));
        assert!(!is_variable_name("database-url"));
        assert!(!is_variable_name(""));
    }

    #[test]
    fn the_environment_block_of_this_process() {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
        let (start, end) = env_block(&stat).expect("env_start and env_end");
        assert!(end > start);
        // Fields 3 to 49, then env_start, env_end and exit_code.
        let stat = format!("1 (a b) c) {} 10 20 0", vec!["0"; 47].join(" "));
        assert_eq!(env_block(&stat), Some((10, 20)));
    }
}
