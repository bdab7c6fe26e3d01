//! Giving back the memory start-up touched and an idle replica does not
//! use: the allocator's freed pages, and the pages of this binary's code
//! that parsing the config, migrating and building the scheduler mapped.
//!
//! The code is mapped from the executable, privately and never written, so
//! its pages may be unmapped at any time: what runs next faults back in
//! from the page cache, one page at a time (the mapping is marked random
//! access, so a fault no longer maps the 64 KiB around it). What an idle
//! replica's loops run comes back; the rest stays out of its memory.

use std::io::BufRead as _;

/// Trims the allocator and unmaps this binary's code pages (see the
/// module's comment). Failures are ignored: nothing depends on it.
#[expect(
    unsafe_code,
    reason = "malloc_trim and madvise have no safe form; the range is this process's own code mapping"
)]
pub(crate) fn shed_startup_pages() {
    #[cfg(target_env = "gnu")]
    // SAFETY: returns freed heap memory to the system; no pointer is given.
    unsafe {
        libc::malloc_trim(0);
    }
    for (start, len) in own_code() {
        // SAFETY: the range is a private, read-only, executable file mapping
        // of this binary: never written, so unmapping its pages loses
        // nothing, and they fault back in from the file when run.
        unsafe {
            let start = start as *mut libc::c_void;
            libc::madvise(start, len, libc::MADV_RANDOM);
            libc::madvise(start, len, libc::MADV_DONTNEED);
        }
    }
}

/// The executable mappings of this binary's own file: `(start, length)`.
fn own_code() -> Vec<(usize, usize)> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(maps) = std::fs::File::open("/proc/self/maps") else {
        return Vec::new();
    };
    let mut code = Vec::new();
    for line in std::io::BufReader::new(maps).lines().map_while(Result::ok) {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // offset, device, inode, then the path.
        let path = fields.nth(3);
        if perms != "r-xp" || path.map(std::path::Path::new) != Some(exe.as_path()) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) && end > start
        {
            code.push((start, end - start));
        }
    }
    code
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_binary_has_code_and_runs_on_after_its_pages_are_unmapped() {
        assert!(!super::own_code().is_empty());
        super::shed_startup_pages();
        // Code that ran before (formatting, allocation) runs again.
        assert_eq!(format!("{}", 41 + 1), "42");
    }
}
