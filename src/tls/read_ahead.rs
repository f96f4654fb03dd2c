//! The socket under a TLS connection, read ahead of rustls (docs/operations.md#tls).
//!
//! rustls reads its input at most 4 KiB a call, so a 16 KiB request body would take four or
//! more system calls where a clear connection takes one. Under rustls, one read takes what the
//! socket holds, up to [`READ_AHEAD_BYTES`], and rustls's reads are served from that. The
//! buffer is taken only once the socket has bytes to give and given back once it is drained
//! with the socket empty, so a connection that waits (in its handshake or between requests)
//! holds none.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The most one read of the socket takes.
pub(crate) const READ_AHEAD_BYTES: usize = 64 << 10;

/// A TCP stream whose reads take what the socket holds at once; writes go straight through.
#[derive(Debug)]
pub(crate) struct ReadAhead {
    inner: TcpStream,
    /// Read from the socket and not yet handed on: `buf[start..]`. No allocation while
    /// nothing is held.
    buf: Vec<u8>,
    start: usize,
}

impl ReadAhead {
    /// Reads `inner` ahead.
    pub(crate) fn new(inner: TcpStream) -> ReadAhead {
        ReadAhead {
            inner,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The socket.
    pub(crate) fn get_ref(&self) -> &TcpStream {
        &self.inner
    }

    /// Hands on what is held, as much as `out` takes; gives the buffer back once it is
    /// drained after a read that left the socket empty (one that filled it may have left more
    /// behind, read next into the same buffer).
    fn hand_on(&mut self, out: &mut ReadBuf<'_>) {
        let n = (self.buf.len() - self.start).min(out.remaining());
        out.put_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        if self.start == self.buf.len() {
            let filled = self.buf.len() == READ_AHEAD_BYTES;
            self.start = 0;
            self.buf.clear();
            if !filled {
                self.buf = Vec::new();
            }
        }
    }
}

impl AsyncRead for ReadAhead {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.start < this.buf.len() {
            this.hand_on(out);
            return Poll::Ready(Ok(()));
        }
        // A reader that takes as much as the buffer would: no copy.
        if out.remaining() >= READ_AHEAD_BYTES {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        }
        loop {
            // Nothing is allocated until the socket has something to give.
            ready!(this.inner.poll_read_ready(cx))?;
            this.buf.reserve_exact(READ_AHEAD_BYTES);
            // Into the buffer's spare room, not zeroed first.
            match this.inner.try_read_buf(&mut this.buf) {
                Ok(0) => {
                    // The end of the input: nothing to hand on, nothing to keep.
                    this.buf = Vec::new();
                    return Poll::Ready(Ok(()));
                }
                Ok(_) => {
                    this.hand_on(out);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was spurious (a new socket's first poll is): wait for the next,
                // holding nothing.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    this.buf = Vec::new();
                    continue;
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl AsyncWrite for ReadAhead {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (ReadAhead, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (ReadAhead::new(server), client)
    }

    #[tokio::test]
    async fn small_reads_are_served_from_one_read_of_the_socket_in_order() {
        let (mut ahead, mut client) = pair().await;
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&sent).await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = ahead.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, sent);
        assert_eq!(
            ahead.buf.capacity(),
            0,
            "a drained buffer at the end is given back"
        );
    }

    #[tokio::test]
    async fn a_waiting_connection_holds_no_buffer_and_writes_go_through() {
        let (mut ahead, mut client) = pair().await;
        let read =
            tokio::time::timeout(std::time::Duration::from_millis(50), ahead.read(&mut [0u8; 16])).await;
        assert!(read.is_err(), "nothing was sent");
        assert_eq!(ahead.buf.capacity(), 0);
        client.write_all(b"ping").await.unwrap();
        let mut four = [0u8; 4];
        ahead.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"ping");
        assert_eq!(
            ahead.buf.capacity(),
            0,
            "drained with the socket empty: given back"
        );
        ahead.write_all(b"pong").await.unwrap();
        client.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"pong");
    }
}
