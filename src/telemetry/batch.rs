//! A log writer that gathers lines in memory and writes them from a thread of its own, in
//! batches, on a short tick.
//!
//! Logging a request costs the request one append under a lock: the writer thread is not woken
//! per line (a wake-up per line costs a context switch and a write call per line on a busy
//! core). It is woken by the first line of a batch, waits one [`TICK`] (or until [`WAKE_BYTES`]
//! have gathered) and writes the batch; with nothing logged it sleeps. Nothing is dropped:
//! above [`LIMIT_BYTES`] a logging thread waits until the writer has taken the batch.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Longest time a line waits before the writer thread writes it.
pub(super) const TICK: Duration = Duration::from_millis(20);
/// Gathered bytes that wake the writer thread before its tick.
pub(super) const WAKE_BYTES: usize = 256 << 10;
/// Gathered bytes above which logging threads wait for the writer thread.
pub(super) const LIMIT_BYTES: usize = 1 << 20;

struct Gathered {
    lines: Vec<u8>,
    stopping: bool,
}

struct Shared {
    gathered: Mutex<Gathered>,
    /// Signalled when the writer thread should write now.
    wake_writer: Condvar,
    /// Signalled when the writer thread has taken a batch.
    taken: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Gathered> {
        self.gathered.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The writer handed to the log subscriber; cheap to clone.
#[derive(Clone)]
pub(crate) struct BatchedWriter {
    shared: Arc<Shared>,
}

/// Keeps the writer thread running; dropping it writes what has gathered and stops the thread.
pub(crate) struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the writer thread, which writes batches to `out`.
pub(crate) fn batched<W: Write + Send + 'static>(out: W) -> io::Result<(BatchedWriter, FlushGuard)> {
    let shared = Arc::new(Shared {
        gathered: Mutex::new(Gathered {
            lines: Vec::new(),
            stopping: false,
        }),
        wake_writer: Condvar::new(),
        taken: Condvar::new(),
    });
    let thread = std::thread::Builder::new().name("replaygate-log".into()).spawn({
        let shared = shared.clone();
        move || write_batches(&shared, out)
    })?;
    Ok((
        BatchedWriter {
            shared: shared.clone(),
        },
        FlushGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

fn write_batches<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    loop {
        let mut gathered = shared.lock();
        // Idle: sleep until a first line comes (no wake-ups while nothing is logged) ...
        while gathered.lines.is_empty() && !gathered.stopping {
            gathered = shared
                .wake_writer
                .wait(gathered)
                .unwrap_or_else(PoisonError::into_inner);
        }
        // ... then let more lines gather for one tick, unless enough have already.
        if !gathered.stopping && gathered.lines.len() < WAKE_BYTES {
            gathered = shared
                .wake_writer
                .wait_timeout_while(gathered, TICK, |g| !g.stopping && g.lines.len() < WAKE_BYTES)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let stopping = gathered.stopping;
        std::mem::swap(&mut gathered.lines, &mut batch);
        drop(gathered);
        shared.taken.notify_all();
        if !batch.is_empty() {
            // A log that cannot be written (standard output closed) is not the request's
            // problem; the lines are dropped.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
        }
        if stopping {
            return;
        }
    }
}

impl Write for BatchedWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut gathered = self.shared.lock();
        while gathered.lines.len() >= LIMIT_BYTES && !gathered.stopping {
            self.shared.wake_writer.notify_one();
            gathered = self
                .shared
                .taken
                .wait(gathered)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let was_empty = gathered.lines.is_empty();
        gathered.lines.extend_from_slice(line);
        // The writer waits for a batch's first line, then for a tick or WAKE_BYTES: only those
        // two moments need to wake it.
        if was_empty || gathered.lines.len() >= WAKE_BYTES {
            self.shared.wake_writer.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedWriter {
    type Writer = BatchedWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.wake_writer.notify_one();
        self.shared.taken.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Records each write call separately.
    #[derive(Clone, Default)]
    struct Calls(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Write for Calls {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().push(bytes.to_vec());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Calls {
        fn joined(&self) -> Vec<u8> {
            self.0.lock().unwrap().concat()
        }
        fn count(&self) -> usize {
            self.0.lock().unwrap().len()
        }
    }

    #[test]
    fn lines_are_written_in_order_in_few_writes_and_all_by_the_guards_drop() {
        let out = Calls::default();
        let (writer, guard) = batched(out.clone()).unwrap();
        let mut expected = Vec::new();
        for i in 0..1000 {
            let line = format!("line {i}\n");
            writer.make_writer().write_all(line.as_bytes()).unwrap();
            expected.extend_from_slice(line.as_bytes());
        }
        drop(guard);
        assert_eq!(out.joined(), expected);
        assert!(out.count() < 100, "{} write calls for 1000 lines", out.count());
    }

    #[test]
    fn a_line_is_written_within_a_few_ticks_without_more_logging() {
        let out = Calls::default();
        let (writer, _guard) = batched(out.clone()).unwrap();
        writer.make_writer().write_all(b"alone\n").unwrap();
        let deadline = Instant::now() + TICK * 50;
        while out.joined() != b"alone\n" {
            assert!(Instant::now() < deadline, "the line was not written");
            std::thread::sleep(TICK / 4);
        }
    }

    #[test]
    fn logging_past_the_limit_waits_for_the_writer_and_loses_nothing() {
        let out = Calls::default();
        let (writer, guard) = batched(out.clone()).unwrap();
        let line = vec![b'x'; 64 << 10];
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let writer = writer.clone();
                let line = line.clone();
                std::thread::spawn(move || {
                    for _ in 0..64 {
                        writer.make_writer().write_all(&line).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        assert_eq!(out.joined().len(), 4 * 64 * line.len());
        assert!(out
            .0
            .lock()
            .unwrap()
            .iter()
            .all(|batch| batch.len() <= LIMIT_BYTES + line.len()));
    }
}
