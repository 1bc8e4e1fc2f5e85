//! What the server needs from a stream socket (TCP or unix), and reads and writes bounded
//! by a deadline.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A connected stream socket.
pub(crate) trait Conn: Read + Write + Send + Sync + Sized + 'static {
    /// A second handle on the same socket (for the writer side or the registry).
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

/// Sets the socket's timeouts to the time left before `deadline` (an error once past it).
fn arm<C: Conn>(conn: &C, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "handshake timed out",
        ));
    }
    conn.set_timeouts(Some(left))
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
