//! `replaygate serve` as a child process: started on 127.0.0.1:0, its log read line by line on
//! a thread of its own, killed when the test ends.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

/// A running `replaygate serve`.
pub struct Serve {
    pub child: Child,
    /// The address it listens on, from its listening line.
    pub address: String,
    /// The listening line itself.
    pub listening: String,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// `replaygate serve --listen 127.0.0.1:0 --config CONFIG` at log level info, to which a
    /// test adds its environment.
    pub fn command(config: &Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_replaygate"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .env("RUST_LOG", "info");
        command
    }

    /// Spawns `command` and waits (boundedly) for its listening line.
    pub async fn start(mut command: Command) -> Serve {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (address, listening) = loop {
            let line = tokio::time::timeout(Duration::from_secs(20), lines.recv())
                .await
                .expect("no listening line")
                .expect("serve exited early");
            if let Some(address) = listening_address(&line) {
                break (address, line);
            }
        };
        Serve {
            child,
            address,
            listening,
            lines,
        }
    }

    /// Waits (boundedly) for a log line containing `text`.
    pub async fn until_logged(&mut self, text: &str) -> String {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(15), self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no log line with {text}"))
                .expect("serve exited");
            if line.contains(text) {
                return line;
            }
        }
    }

    /// The next log line, waiting up to `limit`; `None` once the process has closed its output
    /// (or nothing came in time).
    pub async fn next_line(&mut self, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, self.lines.recv())
            .await
            .ok()
            .flatten()
    }

    /// Sends a signal (`-HUP`, `-INT`, `-TERM`) to the process.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap()
            .success());
    }

    /// Waits up to `limit` for the process to exit, polling; its status, or `None`.
    pub async fn exited_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if started.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The address of a listening line, text (`address=HOST:PORT`) or JSON (`"address":"HOST:PORT"`).
fn listening_address(line: &str) -> Option<String> {
    if let Some(at) = line.find("address=") {
        return line[at + 8..].split_whitespace().next().map(str::to_owned);
    }
    let json: serde_json::Value = serde_json::from_str(line).ok()?;
    json["address"].as_str().map(str::to_owned)
}
