//! CPU time from `/proc` (Linux): the whole process's (every thread, exited ones included), a
//! child's (`redis-server`), and the calling thread's, so that a suite can tell the server's CPU
//! from its own clients' when both run in one process (`mixed`). Elsewhere the figures are
//! `None`.

use std::time::Duration;

/// Clock ticks per second of `/proc/*/stat`'s times (`sysconf(_SC_CLK_TCK)`): 100 on every
/// Linux architecture the project runs on (the workspace denies the `unsafe` a `sysconf` call
/// would need).
const CLOCK_TICKS_PER_S: u64 = 100;

/// User plus system CPU time, in clock ticks, from the text of a `/proc/{pid}/stat` (fields 14
/// and 15). The command name (field 2) may hold spaces and parentheses: fields are counted
/// after its last `)`.
pub(crate) fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (the state): utime and stime are its 12th and 13th.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The time a thread has run on a CPU, from the text of its `/proc/.../schedstat` (the first
/// field, in nanoseconds).
pub(crate) fn parse_schedstat_nanos(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
}

fn ticks(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 1000 / CLOCK_TICKS_PER_S)
}

/// A process's CPU time, user and system, all its threads (those that exited too), to the
/// clock tick (10 ms).
pub(crate) fn pid_cpu(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_ticks(&stat).map(ticks)
}

/// This process's CPU time ([`pid_cpu`]).
pub(crate) fn process_cpu() -> Option<Duration> {
    pid_cpu("self")
}

/// The calling thread's CPU time: to the nanosecond from its `schedstat`, else to the clock
/// tick from its `stat`; zero where neither can be read.
pub(crate) fn thread_cpu() -> Duration {
    if let Some(nanos) = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| parse_schedstat_nanos(&s))
    {
        return Duration::from_nanos(nanos);
    }
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| parse_stat_ticks(&s))
        .map_or(Duration::ZERO, ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_are_fields_14_and_15() {
        let stat = "20307 (cat) R 20304 20304 19609 0 -1 4194304 99 0 0 0 52 7 0 0 20 0 1 0 \
                    1090987 3133440 393";
        assert_eq!(parse_stat_ticks(stat), Some(59));
        // A command name with spaces and parentheses.
        let odd = "1 (a b) (c)) S 0 0 0 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 1";
        assert_eq!(parse_stat_ticks(odd), Some(7));
        assert_eq!(parse_stat_ticks("1 (short) R 0"), None);
        assert_eq!(
            parse_schedstat_nanos("530458935 41398127 42\n"),
            Some(530_458_935)
        );
        assert_eq!(parse_schedstat_nanos(""), None);
    }

    #[test]
    fn a_busy_thread_uses_cpu() {
        if process_cpu().is_none() {
            return; // Not Linux.
        }
        let before = thread_cpu();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let used = thread_cpu() - before;
        assert!(used >= Duration::from_millis(20), "{used:?}");
        assert!(
            used <= start.elapsed() + Duration::from_millis(20),
            "{used:?}"
        );
    }
}
