//! TLS with pre-shared keys, as nbdkit's `--tls-psk` and qemu's `tls-creds-psk` use them:
//! a file in GnuTLS `psktool` format, one `username:hexkey` per line. rustls has no external
//! PSK, so this engine is OpenSSL's (its PSK server callback: the client's identity is
//! looked up in the file; an unknown one fails the handshake). TLS 1.3 and 1.2 are allowed.
//!
//! OpenSSL reads through [`Io`]: what the pumps read from the socket is queued there, and
//! a read with nothing queued says "would block", so a read never holds the session's lock
//! while it waits on the socket (the same shape as rustls's `read_tls`). Writes go straight
//! to the socket.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::path::Path;
use std::time::Instant;

use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream, SslVersion,
};

use crate::stream::Conn;

/// The longest key OpenSSL's PSK callback takes (`PSK_MAX_PSK_LEN` before OpenSSL 3).
const MAX_KEY: usize = 256;

/// A loaded PSK file, ready to serve handshakes.
#[derive(Clone)]
pub(crate) struct Psk {
    context: SslContext,
    users: usize,
}

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys.
        f.debug_struct("Psk").field("users", &self.users).finish()
    }
}

/// Parses a `psktool` file: `username:hexkey` per line (blank lines skipped). Errors name
/// the line.
pub(crate) fn parse(text: &str) -> Result<HashMap<Vec<u8>, Vec<u8>>, String> {
    let mut keys = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        let at = |why: &str| format!("line {}: {why}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let Some((user, hex)) = line.split_once(':') else {
            return Err(at("no ':' (want username:hexkey)"));
        };
        if user.is_empty() {
            return Err(at("empty username"));
        }
        let key = unhex(hex.trim()).ok_or_else(|| at("the key is not hexadecimal bytes"))?;
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(at(&format!("the key must be 1 to {MAX_KEY} bytes")));
        }
        if keys.insert(user.as_bytes().to_vec(), key).is_some() {
            return Err(at(&format!("username {user:?} again")));
        }
    }
    if keys.is_empty() {
        return Err("no keys in it".into());
    }
    Ok(keys)
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

impl Psk {
    /// Loads the keys of `file` (once: it is not read again).
    pub(crate) fn load(file: &Path) -> io::Result<Self> {
        let bad = |e: &dyn fmt::Display| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", file.display()),
            )
        };
        let text = std::fs::read_to_string(file).map_err(|e| bad(&e))?;
        let keys = parse(&text).map_err(|e| bad(&e))?;
        let users = keys.len();
        let mut b = SslContextBuilder::new(SslMethod::tls_server()).map_err(|e| bad(&e))?;
        b.set_min_proto_version(Some(SslVersion::TLS1_2))
            .map_err(|e| bad(&e))?;
        // TLS 1.2: PSK suites, with ECDHE first. TLS 1.3: OpenSSL's PSK callback gives a
        // key for SHA-256 suites, so TLS_AES_128_GCM_SHA256 must be among them.
        b.set_cipher_list("ECDHE-PSK:PSK:!NULL")
            .map_err(|e| bad(&e))?;
        b.set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256")
            .map_err(|e| bad(&e))?;
        b.set_options(SslOptions::NO_RENEGOTIATION | SslOptions::NO_TICKET);
        b.set_num_tickets(0).map_err(|e| bad(&e))?;
        b.set_psk_server_callback(move |_, identity, out| {
            // 0: unknown identity; OpenSSL then fails the handshake.
            let key = identity.and_then(|id| keys.get(id));
            Ok(key.map_or(0, |k| {
                let n = k.len().min(out.len());
                out[..n].copy_from_slice(&k[..n]);
                n
            }))
        });
        Ok(Self {
            context: b.build(),
            users,
        })
    }

    /// Runs the handshake on `conn` by `deadline`; returns the session and what the client
    /// sent right behind it, decrypted.
    pub(crate) fn handshake<C: Conn>(
        &self,
        conn: &C,
        deadline: Instant,
    ) -> io::Result<(Session<C>, Vec<u8>)> {
        let ssl = Ssl::new(&self.context).map_err(io::Error::other)?;
        let io = Io {
            queued: Vec::new(),
            at: 0,
            sock: conn.duplicate()?,
        };
        let mut stream = SslStream::new(ssl, io).map_err(io::Error::other)?;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake"));
            }
            stream.get_ref().sock.set_timeouts(Some(left))?;
            match stream.accept() {
                Ok(()) => break,
                Err(e) if e.code() == ErrorCode::WANT_READ => {
                    let n = stream.get_mut().sock.read(&mut buf)?;
                    if n == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                    stream.get_mut().queued.extend_from_slice(&buf[..n]);
                }
                Err(e) => {
                    let why = format!("TLS (PSK) handshake: {e}");
                    return Err(io::Error::new(io::ErrorKind::InvalidData, why));
                }
            }
        }
        stream.get_ref().sock.set_timeouts(None)?;
        let mut session = Session { stream };
        let mut early = Vec::new();
        session.drain(&mut early)?;
        Ok((session, early))
    }
}

/// The socket as OpenSSL sees it: reads from what the pumps queued, writes to the socket.
#[derive(Debug)]
pub(crate) struct Io<C> {
    queued: Vec<u8>,
    at: usize,
    sock: C,
}

impl<C: Conn> Read for Io<C> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = &self.queued[self.at..];
        if left.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = left.len().min(buf.len());
        buf[..n].copy_from_slice(&left[..n]);
        self.at += n;
        if self.at == self.queued.len() {
            self.queued.clear();
            self.at = 0;
        }
        Ok(n)
    }
}

impl<C: Conn> Write for Io<C> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// An established OpenSSL session.
#[derive(Debug)]
pub(crate) struct Session<C> {
    stream: SslStream<Io<C>>,
}

impl<C: Conn> Session<C> {
    /// Decrypts `data` (bytes from the socket) onto `plain`; true once the client closed.
    pub(crate) fn feed(&mut self, data: &[u8], plain: &mut Vec<u8>) -> io::Result<bool> {
        self.stream.get_mut().queued.extend_from_slice(data);
        self.drain(plain)
    }

    fn drain(&mut self, plain: &mut Vec<u8>) -> io::Result<bool> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.stream.ssl_read(&mut buf) {
                Ok(0) => return Ok(true),
                Ok(n) => plain.extend_from_slice(&buf[..n]),
                Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(false),
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(true),
                Err(e) => {
                    let e = e
                        .into_io_error()
                        .unwrap_or_else(|e| io::Error::new(io::ErrorKind::InvalidData, e));
                    return Err(e);
                }
            }
        }
    }

    /// Encrypts `data` to the socket.
    pub(crate) fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.stream.write_all(data)
    }

    /// Sends close_notify.
    pub(crate) fn finish(&mut self) {
        let _ = self.stream.shutdown();
    }

    /// Shuts the socket down.
    pub(crate) fn close(&self) {
        self.stream.get_ref().sock.close(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_parse_or_name_the_line() {
        let keys = parse("alice:00ff\n\nbob:0A0b0c\r\n").unwrap();
        assert_eq!(keys[&b"alice"[..]], [0, 0xff]);
        assert_eq!(keys[&b"bob"[..]], [10, 11, 12]);
        for (bad, why) in [
            ("", "no keys"),
            ("\n\n", "no keys"),
            ("alice:00\nbob\n", "line 2: no ':'"),
            ("alice:0g\n", "line 1: the key is not hexadecimal"),
            ("alice:012\n", "line 1: the key is not hexadecimal"),
            ("alice:\n", "line 1: the key must be"),
            (":00\n", "line 1: empty username"),
            ("a:00\na:01\n", "line 2: username \"a\" again"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
