//! What the load generator's connections counted, merged, and its summary as JSON.

use std::time::Duration;

use serde::Serialize;

/// One connection's counts (merged into the run's at the end).
#[derive(Default)]
pub(crate) struct Tally {
    /// Each 200 answer's latency, from the request's first byte sent to the answer's last read.
    latencies_us: Vec<u32>,
    body_bytes: u64,
    non_200: u64,
    errors: u64,
    sessions: u64,
    turns_in_sessions: u64,
    /// The first few problems, for the error message.
    problems: Vec<String>,
}

impl Tally {
    /// A 200 answer to a body of `bytes` that took `latency`.
    pub(crate) fn answered(&mut self, bytes: usize, latency: Duration) {
        let micros = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        self.latencies_us.push(micros);
        self.body_bytes += bytes as u64;
    }

    /// An answer other than 200 (`status`), with the start of its body.
    pub(crate) fn refused(&mut self, status: u16, body: &[u8]) {
        self.non_200 += 1;
        let start = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        self.problem(format!("{status}: {start}"));
    }

    /// A request that got no answer, or an answer the generator could not read.
    pub(crate) fn failed(&mut self, what: String) {
        self.errors += 1;
        self.problem(what);
    }

    /// A session that reached its size goal after `turns` turns.
    pub(crate) fn session_done(&mut self, turns: u32) {
        self.sessions += 1;
        self.turns_in_sessions += u64::from(turns);
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < 5 {
            self.problems.push(what);
        }
    }

    pub(crate) fn merge(&mut self, other: Tally) {
        self.latencies_us.extend(other.latencies_us);
        self.body_bytes += other.body_bytes;
        self.non_200 += other.non_200;
        self.errors += other.errors;
        self.sessions += other.sessions;
        self.turns_in_sessions += other.turns_in_sessions;
        for problem in other.problems {
            self.problem(problem);
        }
    }

    /// Whether every request was answered 200.
    pub(crate) fn clean(&self) -> bool {
        self.non_200 == 0 && self.errors == 0
    }

    pub(crate) fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The run's summary over `seconds`.
    pub(crate) fn summary(mut self, seconds: f64, client_cpu_s: Option<f64>) -> Summary {
        self.latencies_us.sort_unstable();
        let requests = self.latencies_us.len() as u64;
        let quantile = |q: f64| percentile(&self.latencies_us, q) as f64 / 1000.0;
        Summary {
            requests,
            seconds,
            requests_per_s: requests as f64 / seconds,
            latency_ms: Latency {
                p50: quantile(0.50),
                p99: quantile(0.99),
            },
            non_200: self.non_200,
            errors: self.errors,
            mean_body_bytes: self.body_bytes.checked_div(requests).unwrap_or(0),
            sessions: self.sessions,
            turns_per_session: if self.sessions == 0 {
                0.0
            } else {
                self.turns_in_sessions as f64 / self.sessions as f64
            },
            client_cpu_s,
        }
    }
}

/// The nearest-rank `q` quantile of `sorted` (0 when empty).
fn percentile(sorted: &[u32], q: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The JSON the generator prints.
#[derive(Serialize)]
pub(crate) struct Summary {
    /// Requests answered 200 before the deadline (one cut by it is not counted).
    pub(crate) requests: u64,
    pub(crate) seconds: f64,
    pub(crate) requests_per_s: f64,
    pub(crate) latency_ms: Latency,
    pub(crate) non_200: u64,
    pub(crate) errors: u64,
    /// The mean size of the bodies answered 200.
    pub(crate) mean_body_bytes: u64,
    /// Sessions that reached the size goal, and their mean number of turns.
    pub(crate) sessions: u64,
    pub(crate) turns_per_session: f64,
    /// The CPU time the generator's thread took, where the system says (Linux).
    pub(crate) client_cpu_s: Option<f64>,
}

#[derive(Serialize)]
pub(crate) struct Latency {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 0.5), 50);
        assert_eq!(percentile(&sorted, 0.99), 99);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn merged_tallies_sum_and_the_summary_reads_them() {
        let mut one = Tally::default();
        one.answered(1000, Duration::from_micros(2000));
        one.answered(3000, Duration::from_micros(4000));
        one.session_done(2);
        let mut two = Tally::default();
        two.answered(2000, Duration::from_micros(1000));
        two.refused(422, b"{\"error\":{}}");
        one.merge(two);
        assert!(!one.clean());
        assert_eq!(one.problems(), ["422: {\"error\":{}}"]);
        let summary = one.summary(2.0, None);
        assert_eq!(summary.requests, 3);
        assert_eq!(summary.requests_per_s, 1.5);
        assert_eq!(summary.mean_body_bytes, 2000);
        assert_eq!(summary.latency_ms.p50, 2.0);
        assert_eq!(summary.latency_ms.p99, 4.0);
        assert_eq!(summary.non_200, 1);
        assert_eq!(summary.turns_per_session, 2.0);
    }
}
