//! The HTTP listener under the axum router: accepts TCP connections up to a cap and serves each
//! with hyper's HTTP/1.1, so that a slow or idle client cannot hold the server. A connection
//! must deliver a request head within the header deadline of its first byte, and sit idle
//! (between exchanges, or before its first) no longer than the idle timeout; beyond the cap a
//! connection is answered 503 and closed. On shutdown it stops accepting, closes idle
//! connections and lets the others finish their exchange.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// What a connection may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections open at once; more are answered 503 and closed.
    pub(crate) max_connections: usize,
    /// From the first byte of a request to the end of its head.
    pub(crate) header_timeout: Duration,
    /// From the end of an exchange (or the connection's start) to the end of the next head.
    pub(crate) idle_timeout: Duration,
}

/// Connections over the cap answered at once; beyond, they are closed without an answer.
const REFUSALS_AT_ONCE: usize = 64;

/// The answer to a connection over the cap.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 46\r\nConnection: close\r\n\r\ntoo many open connections; retry in a second\r\n";

/// How often a warning about refused connections or failed accepts may be logged.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Connections the kernel keeps waiting for `accept` (the default, 128, drops the connection
/// attempts of a burst, which then retry after a second).
const BACKLOG: u32 = 1024;

/// A listener on `addr` with room for bursts of connections.
pub(crate) fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serves `app` on `listener` until `signal` resolves; then stops accepting, closes idle
/// connections and returns once every other connection has finished its exchange.
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    signal: impl Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Every connection task holds a sender; `recv` answers `None` once all have ended.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(1);
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let mut signal = std::pin::pin!(signal);
    let mut last_warning: Option<Instant> = None;
    let mut warn_now = || {
        let due = last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY);
        if due {
            last_warning = Some(Instant::now());
        }
        due
    };
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut signal => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of descriptors, most likely: wait for some to be closed.
                    if warn_now() {
                        tracing::warn!(error = %e, "cannot accept connections");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            if warn_now() {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "connections refused: too many open"
                );
            }
            refuse(stream, &refusing);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let mut stop = stop_rx.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            let state = Arc::new(ConnState::default());
            let io = TokioIo::new(Watched {
                stream,
                state: Arc::clone(&state),
                header_timeout: limits.header_timeout,
                armed: None,
            });
            let tower = TowerToHyperService::new(app);
            let service =
                hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    let busy = Busy::begin(&state);
                    request.extensions_mut().insert(ConnectInfo(peer));
                    let answer = tower.call(request);
                    async move {
                        let answered = answer.await;
                        drop(busy);
                        answered
                    }
                });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.idle_timeout)
                .keep_alive(true);
            let mut conn = std::pin::pin!(builder.serve_connection(io, service));
            let mut stopping = false;
            loop {
                tokio::select! {
                    served = conn.as_mut() => {
                        if let Err(e) = served {
                            tracing::debug!(error = %e, %peer, "connection ended");
                        }
                        break;
                    }
                    _ = stop.wait_for(|s| *s), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(permit);
            drop(done);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(done_tx);
    let _ = done_rx.recv().await;
}

/// Errors of one connection that leave the listener working.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Answers a connection over the cap with 503 and closes it (reading what it sent for a moment,
/// so the answer is not lost to a reset); without a free refusal slot it is closed at once.
fn refuse(stream: TcpStream, refusing: &Arc<Semaphore>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(permit) = Arc::clone(refusing).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let mut stream = stream;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            stream.write_all(REFUSAL).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<_, io::Error>(())
        })
        .await;
    });
}

/// What the reads of a connection need to know of its requests.
#[derive(Debug, Default)]
struct ConnState {
    /// Request heads received so far.
    heads: AtomicU64,
    /// Requests whose answer has not been produced yet.
    busy: AtomicUsize,
}

/// A request in progress on its connection, until dropped.
struct Busy(Arc<ConnState>);

impl Busy {
    fn begin(state: &Arc<ConnState>) -> Busy {
        state.heads.fetch_add(1, Ordering::AcqRel);
        state.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(state))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's stream that fails its reads once a request head has taken longer than the
/// header deadline since its first byte (hyper's own timer runs from the moment the connection
/// went idle, which is the idle timeout).
struct Watched {
    stream: TcpStream,
    state: Arc<ConnState>,
    header_timeout: Duration,
    /// The deadline of the head being read, with the count of heads when it was set.
    armed: Option<(u64, Pin<Box<tokio::time::Sleep>>)>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let heads = this.state.heads.load(Ordering::Acquire);
        if this.armed.as_ref().is_some_and(|(at, _)| *at != heads) {
            // The head arrived.
            this.armed = None;
        }
        if let Some((_, deadline)) = &mut this.armed
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request head did not arrive within the header deadline",
            )));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && this.armed.is_none()
            && this.state.busy.load(Ordering::Acquire) == 0
        {
            // The first bytes of a head: its deadline starts now.
            let mut deadline = Box::pin(tokio::time::sleep(this.header_timeout));
            // Registers the waker, so the deadline wakes a read waiting for more.
            let _ = deadline.as_mut().poll(cx);
            this.armed = Some((heads, deadline));
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The cap on open connections: the one asked for, and below the open-files limit with room
/// for the database, the indexes and the process's other files.
pub(crate) fn connection_cap(asked: usize, open_files: Option<u64>) -> usize {
    /// Descriptors kept for everything but connections.
    const RESERVED: u64 = 256;
    match open_files {
        Some(limit) => {
            let room = limit.saturating_sub(RESERVED).max(limit / 2).max(1);
            asked
                .min(usize::try_from(room).unwrap_or(usize::MAX))
                .max(1)
        }
        None => asked.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_the_open_files_limit() {
        assert_eq!(connection_cap(1024, Some(1_048_576)), 1024);
        assert_eq!(connection_cap(1024, Some(1024)), 768);
        assert_eq!(connection_cap(1024, Some(256)), 128);
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(0, Some(4096)), 1);
        assert_eq!(
            REFUSAL.len() - REFUSAL.windows(4).position(|w| w == b"\r\n\r\n").unwrap() - 4,
            46
        );
    }
}
