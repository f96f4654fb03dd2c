//! The `replaygate` binary run as a user runs it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `replaygate` with `args` (and no `REPLAYGATE_CONFIG` from the environment), `stdin` on
/// its standard input, and returns what it printed and how it exited.
pub fn replaygate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_replaygate"))
        .args(args)
        .env_remove("REPLAYGATE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Err(error) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        // A run that fails before reading its input (a bad config, a file argument) may have
        // closed the pipe already.
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    child.wait_with_output().unwrap()
}
