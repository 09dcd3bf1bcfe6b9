//! The process's limit on open files: raised to the hard limit when the HTTP transport starts
//! (every connection holds a descriptor, and the soft limit is often 1,024), and read back so the
//! cap on open connections stays below it, with room for the database and the indexes.

/// Raises the soft limit on open files to the hard one (Linux; best effort) and returns the
/// soft limit in force afterwards, or `None` where it cannot be read.
pub(crate) fn raise_to_hard_limit() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` writes the struct it is given, which lives for the call.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot read the open-files limit");
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            // SAFETY: `setrlimit` reads the struct it is given, which lives for the call.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                tracing::debug!(
                    from = limit.rlim_cur,
                    to = limit.rlim_max,
                    "raised the open-files limit"
                );
                limit.rlim_cur = limit.rlim_max;
            } else {
                tracing::debug!(
                    error = %std::io::Error::last_os_error(),
                    "cannot raise the open-files limit"
                );
            }
        }
        Some(limit.rlim_cur)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let soft = raise_to_hard_limit().expect("a limit");
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(soft, limit.rlim_cur);
        assert_eq!(limit.rlim_cur, limit.rlim_max);
    }
}
