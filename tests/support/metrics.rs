//! Reading the proxy's admin `/metrics`.

use std::net::SocketAddr;
use std::time::Duration;

/// The value of the sample `series` (its name and labels as exposed, e.g. a `_total` counter
/// without labels) on the admin listener at `admin`; panics when it is absent or the scrape
/// takes over 10 s.
pub async fn counter(admin: SocketAddr, series: &str) -> u64 {
    let text = tokio::time::timeout(
        Duration::from_secs(10),
        reqwest::get(format!("http://{admin}/metrics")),
    )
    .await
    .expect("metrics within 10 s")
    .unwrap()
    .text()
    .await
    .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} in {text}"))
}
