//! What the servers need from a stream socket (TCP or unix), and reads and writes bounded
//! by a deadline: the NBD handshake, and the control and metrics requests, each have one
//! deadline for the whole exchange, so a client sending a byte at a time gains nothing.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A connected stream socket.
pub(crate) trait Conn: Read + Write + Send + Sync + Sized + 'static {
    /// A second handle on the same socket (for the writer side or the table of connections).
    fn duplicate(&self) -> io::Result<Self>;
    /// Sets both the read and the write timeout (`None`: block).
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Shuts the socket down; errors (e.g. already closed) are ignored.
    fn close(&self, how: Shutdown);
}

/// Both socket kinds are connections the same way.
macro_rules! impl_conn {
    ($($stream:ty),*) => {$(
        impl Conn for $stream {
            fn duplicate(&self) -> io::Result<Self> {
                self.try_clone()
            }

            fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(timeout)?;
                self.set_write_timeout(timeout)
            }

            fn close(&self, how: Shutdown) {
                let _ = self.shutdown(how);
            }
        }
    )*};
}

impl_conn!(TcpStream, UnixStream);

/// A deadline `limit` from now; a limit too long for the clock is a day.
pub(crate) fn deadline_in(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit)
        .unwrap_or(now + Duration::from_secs(86_400))
}

/// Sets the socket's timeouts to the time left before `deadline` (an error once past it).
fn arm<C: Conn>(conn: &C, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
    }
    conn.set_timeouts(Some(left))
}

/// Is this error a deadline (or a socket timeout) passing?
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// `read_exact` that fails once `deadline` passes.
pub(crate) fn read_exact_by<C: Conn>(
    conn: &mut C,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        arm(conn, deadline)?;
        match conn.read(&mut buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `write_all` that fails once `deadline` passes.
pub(crate) fn write_all_by<C: Conn>(conn: &mut C, buf: &[u8], deadline: Instant) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        arm(conn, deadline)?;
        match conn.write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads until one of `ends` has been read (included in the result) or the peer stops
/// sending (what came so far), failing with `InvalidData` after `max` bytes without an end,
/// and once `deadline` passes.
pub(crate) fn read_until_by<C: Conn>(
    conn: &mut C,
    ends: &[&[u8]],
    max: usize,
    deadline: Instant,
) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let longest = ends.iter().map(|e| e.len()).max().unwrap_or(1);
    loop {
        arm(conn, deadline)?;
        let want = chunk.len().min(max + 1 - buf.len());
        let n = match conn.read(&mut chunk[..want]) {
            Ok(0) => return Ok(buf),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // Look for an end in what is new, and in the few bytes before it one may start in;
        // the first one to end wins.
        let from = buf.len().saturating_sub(longest - 1);
        buf.extend_from_slice(&chunk[..n]);
        let found = ends
            .iter()
            .filter_map(|end| {
                let at = buf[from..].windows(end.len()).position(|w| w == *end)?;
                Some(from + at + end.len())
            })
            .min();
        if let Some(len) = found {
            buf.truncate(len);
            return Ok(buf);
        }
        if buf.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("request longer than {max} bytes"),
            ));
        }
    }
}

/// Sends a last answer and closes: writes it (bounded by `deadline`), ends the sending side,
/// calls `sent`, then reads and drops what the peer still sends until it closes or
/// `deadline` passes, so that closing with unread input does not reset the connection under
/// the answer.
pub(crate) fn answer_and_close<C: Conn>(
    conn: &mut C,
    answer: &[u8],
    deadline: Instant,
    sent: impl FnOnce(),
) {
    if write_all_by(conn, answer, deadline).is_err() {
        conn.close(Shutdown::Both);
        return;
    }
    conn.close(Shutdown::Write);
    sent();
    let mut sink = [0u8; 4096];
    while arm(conn, deadline).is_ok() {
        match conn.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    conn.close(Shutdown::Both);
}

/// Reads and drops `len` bytes through a small buffer.
pub(crate) fn discard(reader: &mut impl Read, len: u64) -> io::Result<()> {
    let copied = io::copy(&mut reader.take(len), &mut io::sink())?;
    if copied < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// `discard` bounded by a deadline.
pub(crate) fn discard_by<C: Conn>(conn: &mut C, len: u64, deadline: Instant) -> io::Result<()> {
    let mut buf = [0u8; 8192];
    let mut left = len;
    while left > 0 {
        let n = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        read_exact_by(conn, &mut buf[..n], deadline)?;
        left -= n as u64;
    }
    Ok(())
}

/// Is this the peer going away (rather than a fault worth a warning)?
pub(crate) fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected
    )
}
