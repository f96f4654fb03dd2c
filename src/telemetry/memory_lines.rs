//! Log lines written to memory, for the tests of this module's formatting.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A log writer whose clones share one buffer.
#[derive(Clone, Default)]
pub(super) struct MemoryLines(Arc<Mutex<Vec<u8>>>);

impl Write for MemoryLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl MemoryLines {
    /// Everything written so far.
    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}
