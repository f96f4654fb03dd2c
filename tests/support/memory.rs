//! A process's memory as Linux reports it in `/proc/PID/status`.

/// A `kB` line of `/proc/{pid}/status` (`pid` may be `self`), in bytes: `VmRSS` is the resident
/// set now, `VmHWM` its peak so far. `None` off Linux.
pub fn status_bytes(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?;
    Some(line.split_whitespace().next()?.parse::<u64>().ok()? * 1024)
}
