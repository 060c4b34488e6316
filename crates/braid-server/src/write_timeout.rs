//! A connection whose client stops reading is closed after `--write-timeout-secs`.
//!
//! A streamed answer whose client never reads fills the socket's buffers; hyper then stops
//! polling the body, and without a limit the connection, its sequence and the sequence's KV
//! blocks are held for as long as the socket stays open (24 such streams held theirs for up to
//! 506 s). HTTP servers bound header reads, not writes, so the bound is on the socket itself:
//! a write that has made no progress for the limit fails, hyper drops the connection, and
//! dropping the response body cancels its generation, which frees the sequence. Only time
//! spent unable to write counts: a stream waiting for its next token is not stalled.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

pub struct WriteTimeout<T> {
    inner: T,
    limit: Duration,
    /// Armed while a write is pending; fires `limit` after the first pending write.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteTimeout<T> {
    pub fn new(inner: T, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// After the inner write returned `poll`: progress disarms the timer, a pending write
    /// arms it (once), and a pending write past the limit becomes an error.
    fn check<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(Instant::now() + limit)));
        if timer.as_mut().poll(cx).is_ready() {
            tracing::warn!(
                "closing a connection whose client read nothing for {limit:?} (--write-timeout-secs)"
            );
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            )));
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.check(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.check(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_limit_and_a_slow_reader_does_not() {
        // A 1 KiB pipe: the second KiB cannot be written until the other end reads.
        let (near, mut far) = tokio::io::duplex(1024);
        let mut conn = WriteTimeout::new(near, Duration::from_secs(30));
        conn.write_all(&[7; 1024]).await.unwrap();
        let reader = tokio::spawn(async move {
            // Reads 1 KiB every 20 s: slow, but never 30 s without progress.
            let mut buf = [0u8; 1024];
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                far.read_exact(&mut buf).await.unwrap();
            }
            far // kept open, unread, from here on
        });
        conn.write_all(&[7; 3 * 1024])
            .await
            .expect("progress every 20 s");
        let t = Instant::now();
        let err = conn.write_all(&[7; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t.elapsed(), Duration::from_secs(30));
        drop(reader.await.unwrap());
    }
}
