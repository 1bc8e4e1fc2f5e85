//! NBD over TLS (`NBD_OPT_STARTTLS`, proto.md "TLS support"), with x509 certificates as
//! qemu and nbdkit use them: a directory holding `server-cert.pem` and `server-key.pem`
//! (qemu's `tls-creds-x509` layout), through rustls; or with pre-shared keys (a `psktool`
//! file, as nbdkit's `--tls-psk` and qemu's `tls-creds-psk`), through OpenSSL (`psk`).
//!
//! After the server acknowledges `NBD_OPT_STARTTLS`, the TLS handshake runs on the socket;
//! then the rest of the negotiation and the transmission run unchanged over a plain unix
//! socket pair whose far end two pump threads connect to the TLS session: one decrypts what
//! the client sends, one encrypts what the server writes. The TLS state is shared under one
//! lock, and encrypted bytes are written to the socket under it, so records leave in the
//! order they were made. The connection's table entry keeps the client's socket, so the
//! reaper's shutdown ends the pumps, and with them the plain side.
//! Both engines sit behind `Engine`, so the pumps do not know which runs.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rustls::ServerConnection;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::stream::Conn;

#[cfg(feature = "tls-psk")]
mod psk;

/// The server's TLS setting.
#[derive(Debug, Clone)]
pub struct Tls {
    creds: Creds,
    /// Refuse clients that do not negotiate TLS (`--tls require`).
    pub require: bool,
}

/// What the server proves itself with.
#[derive(Debug, Clone)]
enum Creds {
    X509(Arc<rustls::ServerConfig>),
    #[cfg(feature = "tls-psk")]
    Psk(psk::Psk),
}

impl Tls {
    /// Loads the `username:hexkey` lines of a `psktool` file (GnuTLS's format, as nbdkit's
    /// `--tls-psk` and qemu's `tls-creds-psk` read it); a malformed one is an error naming
    /// the line.
    #[cfg(feature = "tls-psk")]
    pub fn load_psk(file: &Path, require: bool) -> io::Result<Self> {
        Ok(Self {
            creds: Creds::Psk(psk::Psk::load(file)?),
            require,
        })
    }

    /// Without the `tls-psk` feature: an error saying how to get it.
    #[cfg(not(feature = "tls-psk"))]
    pub fn load_psk(file: &Path, _require: bool) -> io::Result<Self> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "--tls-psk {}: this zramd was built without pre-shared keys; build it with \
                 `--features zramd/tls-psk` (needs OpenSSL's headers: libssl-dev, pkg-config)",
                file.display()
            ),
        ))
    }

    /// Loads `server-cert.pem` (the chain, leaf first) and `server-key.pem` from `dir`.
    pub fn load(dir: &Path, require: bool) -> io::Result<Self> {
        let bad = |what: &str, e: &dyn std::fmt::Display| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}: {e}", dir.display()),
            )
        };
        let certs = CertificateDer::pem_file_iter(dir.join("server-cert.pem"))
            .map_err(|e| bad("server-cert.pem", &e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("server-cert.pem", &e))?;
        if certs.is_empty() {
            return Err(bad("server-cert.pem", &"no certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_file(dir.join("server-key.pem"))
            .map_err(|e| bad("server-key.pem", &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS versions", &e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad("certificate and key", &e))?;
        Ok(Self {
            creds: Creds::X509(Arc::new(config)),
            require,
        })
    }

    /// Runs the TLS handshake on `conn` (by `deadline`), then returns the plain side of the
    /// session: a socket whose reads are what the client sent and whose writes reach it
    /// encrypted.
    pub(crate) fn start<C: Conn>(&self, conn: &C, deadline: Instant) -> io::Result<UnixStream> {
        let (engine, early) = match &self.creds {
            Creds::X509(config) => x509_handshake(config, conn, deadline)?,
            #[cfg(feature = "tls-psk")]
            Creds::Psk(psk) => {
                let (session, early) = psk.handshake(conn, deadline)?;
                (Engine::Openssl(session), early)
            }
        };
        let (plain, far) = UnixStream::pair()?;
        // What the client sent right behind its last handshake message (its next option,
        // often in the same segment) is already decrypted: pass it on before the pumps
        // start, or it would wait for the client's next bytes, which wait for its answer.
        (&far).write_all(&early)?;
        let shared = Arc::new(Mutex::new(engine));
        let inbound = (Arc::clone(&shared), conn.duplicate()?, far.try_clone()?);
        std::thread::Builder::new()
            .name("nbd-tls-in".into())
            .spawn(move || {
                let (shared, sock, far) = inbound;
                let _ = pump_in(&shared, sock, &far);
                far.shutdown(Shutdown::Both).ok();
            })?;
        std::thread::Builder::new()
            .name("nbd-tls-out".into())
            .spawn(move || {
                let _ = pump_out(&shared, &far);
                let guard = shared.lock().unwrap_or_else(PoisonError::into_inner);
                guard.close();
            })?;
        Ok(plain)
    }
}

/// The rustls handshake on `conn` by `deadline`: the session and what the client sent
/// right behind it, decrypted.
fn x509_handshake<C: Conn>(
    config: &Arc<rustls::ServerConfig>,
    conn: &C,
    deadline: Instant,
) -> io::Result<(Engine<C>, Vec<u8>)> {
    let mut tls = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
    let mut sock = conn.duplicate()?;
    while tls.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake"));
        }
        sock.set_timeouts(Some(left))?;
        tls.complete_io(&mut sock)?;
    }
    sock.set_timeouts(None)?;
    let state = tls
        .process_new_packets()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut early = vec![0u8; state.plaintext_bytes_to_read()];
    tls.reader().read_exact(&mut early)?;
    Ok((Engine::Rustls(Box::new(tls), sock), early))
}

/// A TLS session after its handshake, with the socket it writes to.
#[derive(Debug)]
enum Engine<C> {
    /// x509 certificates.
    Rustls(Box<ServerConnection>, C),
    /// Pre-shared keys.
    #[cfg(feature = "tls-psk")]
    Openssl(psk::Session<C>),
}

impl<C: Conn> Engine<C> {
    /// Decrypts `data` (bytes from the socket) onto `plain`, writing to the socket what the
    /// session has to say back; true once the client closed.
    fn feed(&mut self, mut data: &[u8], plain: &mut Vec<u8>) -> io::Result<bool> {
        let (tls, out) = match self {
            #[cfg(feature = "tls-psk")]
            Self::Openssl(session) => return session.feed(data, plain),
            Self::Rustls(tls, out) => (tls, out),
        };
        let mut closed = false;
        while !data.is_empty() && !closed {
            tls.read_tls(&mut data)?;
            let state = tls.process_new_packets().map_err(|e| {
                // Tell the client why before the session ends.
                let _ = tls.write_tls(out);
                io::Error::new(io::ErrorKind::InvalidData, e)
            })?;
            let start = plain.len();
            plain.resize(start + state.plaintext_bytes_to_read(), 0);
            tls.reader().read_exact(&mut plain[start..])?;
            closed = state.peer_has_closed();
        }
        while tls.wants_write() {
            tls.write_tls(out)?;
        }
        Ok(closed)
    }

    /// Encrypts `data` to the socket; empty: says close_notify.
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            #[cfg(feature = "tls-psk")]
            Self::Openssl(session) if data.is_empty() => session.finish(),
            #[cfg(feature = "tls-psk")]
            Self::Openssl(session) => session.send(data)?,
            Self::Rustls(tls, out) => {
                if data.is_empty() {
                    tls.send_close_notify();
                } else {
                    tls.writer().write_all(data)?;
                }
                while tls.wants_write() {
                    tls.write_tls(out)?;
                }
            }
        }
        Ok(())
    }

    /// Shuts the socket down.
    fn close(&self) {
        match self {
            Self::Rustls(_, out) => out.close(Shutdown::Both),
            #[cfg(feature = "tls-psk")]
            Self::Openssl(session) => session.close(),
        }
    }
}

type Shared<C> = Mutex<Engine<C>>;

/// Client → server: decrypts what arrives on the socket into the plain side.
fn pump_in<C: Conn>(shared: &Shared<C>, mut sock: C, far: &UnixStream) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut plain = Vec::new();
    loop {
        let n = sock.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let closed = shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .feed(&buf[..n], &mut plain)?;
        (&*far).write_all(&plain)?;
        plain.clear();
        if closed {
            return Ok(());
        }
    }
}

/// Server → client: encrypts what the server writes on the plain side.
fn pump_out<C: Conn>(shared: &Shared<C>, far: &UnixStream) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = (&*far).read(&mut buf)?;
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(&buf[..n])?;
        if n == 0 {
            return Ok(());
        }
    }
}
