//! 2 MiB pages under the memory a vector search reads. A graph search reads a few thousand
//! vectors of 512 bytes at random places among tens of megabytes (100,000 memories: about 70 MB
//! of vectors and links); with 4 KiB pages nearly every read also misses the TLB, and while
//! the text half and the database run beside it the page tables' own lines leave the caches,
//! so a read can cost two trips to memory. With 2 MiB pages the tables of the whole graph fit
//! in a few dozen TLB entries.
//!
//! usearch maps its memory itself, so the index cannot ask for huge pages when it allocates.
//! Instead, when a graph is loaded and before any search reaches it, the loading thread asks
//! Linux (6.1 or later, `MADV_COLLAPSE`) to back every 2 MiB stretch of the process's anonymous
//! memory that is wholly resident with one huge page. Only wholly resident stretches: a stretch
//! with untouched pages would be filled, and the process would grow by memory it never used.
//! Only at load: a pass while searches run stalled them (a recall's worst case 2.6 ms → 120–170
//! ms: a collapse holds the memory map every page fault waits for), so a graph grown by writes
//! gets its huge pages at the next start. Best effort: on other systems, older kernels or with
//! transparent huge pages turned off, nothing changes.

#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};

/// Fewest graph points worth a pass: below it the graph's pages fit the TLB anyway.
pub(crate) const MIN_POINTS: usize = 16_384;

/// Whether the kernel can collapse at all; `false` after it answered that it cannot.
#[cfg(target_os = "linux")]
static SUPPORTED: AtomicBool = AtomicBool::new(true);

/// Runs a pass on this thread (see the module's comment), unless the kernel cannot collapse.
pub(crate) fn collapse() {
    #[cfg(target_os = "linux")]
    if SUPPORTED.load(Ordering::Relaxed) {
        let done = collapse_resident();
        tracing::debug!(
            bytes = done.bytes,
            refused = done.refused,
            "vector memory on huge pages"
        );
    }
}

/// What a pass did.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Collapsed {
    /// Bytes now backed by huge pages (those already were count too).
    bytes: usize,
    /// Wholly resident 2 MiB stretches the kernel would not collapse…
    refused: usize,
    /// …of which those it takes no such advice for (`EINVAL`: before 6.1, huge pages turned
    /// off, or a mapping that must not have them, such as a thread's stack).
    unadvisable: usize,
}

/// Backs each wholly resident 2 MiB stretch of the process's private anonymous memory with a
/// huge page (see the module's comment).
#[cfg(target_os = "linux")]
fn collapse_resident() -> Collapsed {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Collapsed::default();
    };
    let mut done = Collapsed::default();
    for (start, end) in anonymous_regions(&maps) {
        collapse_region(start, end, &mut done);
    }
    if done.bytes == 0 && done.unadvisable > 0 {
        // No such advice (before 6.1), or transparent huge pages turned off: no pass again.
        SUPPORTED.store(false, Ordering::Relaxed);
    }
    done
}

/// 2 MiB.
#[cfg(target_os = "linux")]
const HUGE: usize = 2 << 20;

/// `MADV_COLLAPSE` (Linux 6.1), which the `libc` crate does not name yet.
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// Start and end of each private, writable mapping of no file (the heap included) that spans at
/// least one aligned 2 MiB stretch, from the text of `/proc/self/maps`.
#[cfg(target_os = "linux")]
fn anonymous_regions(maps: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            // offset, device, inode, then the path if any.
            let path = f.nth(3);
            if perms != "rw-p" || path.is_some_and(|p| p != "[heap]") {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let start = usize::from_str_radix(a, 16).ok()?.next_multiple_of(HUGE);
            let end = usize::from_str_radix(b, 16).ok()? / HUGE * HUGE;
            (end > start).then_some((start, end))
        })
        .collect()
}

/// Collapses the wholly resident stretches of `start..end` (2 MiB aligned), counting them in
/// `done`.
#[cfg(target_os = "linux")]
fn collapse_region(start: usize, end: usize, done: &mut Collapsed) {
    let pages = HUGE / 4096;
    let mut resident = vec![0u8; pages];
    for at in (start..end).step_by(HUGE) {
        // SAFETY: `at..at + HUGE` lies in a mapping just listed; `resident` has a byte per page.
        // Had the mapping gone meanwhile, the call fails with ENOMEM and the stretch is skipped.
        let rc = unsafe { libc::mincore(at as *mut libc::c_void, HUGE, resident.as_mut_ptr()) };
        if rc != 0 || resident.iter().any(|&r| r & 1 == 0) {
            continue;
        }
        // SAFETY: advice only: the contents stay as they are, whatever the answer.
        let rc = unsafe { libc::madvise(at as *mut libc::c_void, HUGE, MADV_COLLAPSE) };
        if rc == 0 {
            done.bytes += HUGE;
            continue;
        }
        done.refused += 1;
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            done.unadvisable += 1;
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn maps_give_private_anonymous_writable_regions_aligned_inward() {
        let maps = "\
55d0a0000000-55d0a0800000 rw-p 00000000 00:00 0                          [heap]
7f0000100000-7f0000700000 rw-p 00000000 00:00 0 
7f0000800000-7f0000900000 rw-p 00000000 00:00 0 
7f0001000000-7f0001400000 r--p 00000000 08:01 123                        /usr/lib/libc.so.6
7f0002000000-7f0002400000 rw-s 00000000 00:05 77                         /dev/zero (deleted)
7f0003000000-7f0003400000 rw-p 00000000 08:01 124                        /data/memory.db
7ffc00000000-7ffc00400000 rw-p 00000000 00:00 0                          [stack]
";
        assert_eq!(
            anonymous_regions(maps),
            [
                (0x55d0a0000000, 0x55d0a0800000),
                (0x7f0000200000, 0x7f0000600000),
            ]
        );
    }

    /// A mapping of `len` bytes and a 2 MiB more, none of it touched, and its first 2 MiB
    /// boundary.
    fn mapping(len: usize) -> (*mut libc::c_void, *mut u8) {
        // SAFETY: a fresh private anonymous mapping; unmapped by the test.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        (p, (p as usize).next_multiple_of(HUGE) as *mut u8)
    }

    fn resident_pages(at: *mut u8, len: usize) -> usize {
        let mut v = vec![0u8; len / 4096];
        // SAFETY: `at..at + len` is mapped (see `mapping`).
        assert_eq!(unsafe { libc::mincore(at.cast(), len, v.as_mut_ptr()) }, 0);
        v.iter().filter(|&&r| r & 1 == 1).count()
    }

    #[test]
    fn resident_stretches_are_collapsed_and_untouched_ones_stay_unbacked() {
        let len = 4 * HUGE;
        let (base, at) = mapping(len);
        // The first two stretches written through, the third half, the fourth never.
        for i in (0..2 * HUGE + HUGE / 2).step_by(4096) {
            // SAFETY: within the mapping.
            unsafe { at.add(i).write_volatile(i as u8 | 1) };
        }
        let done = collapse_resident();
        if !SUPPORTED.load(Ordering::Relaxed) {
            // This kernel cannot collapse memory into huge pages: nothing to check.
            return;
        }
        assert!(done.bytes >= 2 * HUGE, "{done:?}");
        // Nothing was filled in: the half-written stretch and the untouched one stay as they were.
        assert_eq!(resident_pages(at, len), (2 * HUGE + HUGE / 2) / 4096);
        // And the contents are what was written.
        for i in (0..2 * HUGE + HUGE / 2).step_by(4096) {
            // SAFETY: within the mapping.
            assert_eq!(unsafe { at.add(i).read_volatile() }, i as u8 | 1);
        }
        // The kernel's own account: the mapping (merged with neighbours, maybe) holds huge
        // pages, at least the two written through.
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let holds = |line: &str| {
            let range = line.split_whitespace().next().unwrap_or("");
            range.split_once('-').is_some_and(|(a, b)| {
                let a = usize::from_str_radix(a, 16).unwrap_or(usize::MAX);
                let b = usize::from_str_radix(b, 16).unwrap_or(0);
                a <= at as usize && (at as usize) < b
            })
        };
        let region: Vec<&str> = smaps
            .lines()
            .skip_while(|l| !holds(l))
            .take_while(|l| !l.starts_with("VmFlags"))
            .collect();
        let huge_kb: usize = region
            .iter()
            .find_map(|l| l.strip_prefix("AnonHugePages:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("AnonHugePages of the mapping");
        assert!(huge_kb >= 2 * HUGE / 1024, "{region:#?}");
        // SAFETY: the mapping made above, no longer used.
        assert_eq!(unsafe { libc::munmap(base, len + HUGE) }, 0);
    }
}
