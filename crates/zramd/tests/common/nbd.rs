//! Shared by the `nbd_*` tests: an in-process NBD server on a unix socket (or loopback TCP)
//! with a shutdown flag, and a small raw NBD client that speaks the wire format byte by
//! byte, so tests can send anything, including what a real client never would.
//!
//! Each test speaks only part of the protocol, so the tests that include this file say so
//! with `#[expect(dead_code)]` on the module.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use zramd::export::{Export, ExportSet};
use zramd::human::Timeout;
use zramd::listen::Listener;
use zramd::nbd::proto::*;
use zramd::nbd::{ServerConfig, Service, Stats};

/// An initialized zram device of `size` bytes.
pub fn device(size: u64) -> Arc<zramd::device::Device> {
    Arc::new(
        zramd::device::Device::with_size("zram0", zram::ZramConfig::default(), size)
            .expect("device"),
    )
}

/// Where a test server listens.
#[derive(Debug, Clone)]
pub enum Addr {
    /// A unix socket path.
    Unix(PathBuf),
    /// A loopback TCP address.
    Tcp(std::net::SocketAddr),
}

/// A server running in a thread; stopped (and checked to return) on drop.
#[derive(Debug)]
pub struct Server {
    pub addr: Addr,
    pub exports: Arc<ExportSet>,
    pub service: Arc<Service>,
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Exports `zram0` (read-write, `size` bytes) and `ro` (read-only, 1 MiB) on a unix
    /// socket.
    pub fn start(size: u64, config: ServerConfig) -> Self {
        Self::with_exports(default_exports(size), config, false)
    }

    /// The same exports on 127.0.0.1 with a kernel-chosen port.
    pub fn start_tcp(size: u64, config: ServerConfig) -> Self {
        Self::with_exports(default_exports(size), config, true)
    }

    pub fn with_exports(exports: Vec<Arc<Export>>, config: ServerConfig, tcp: bool) -> Self {
        // `RUST_LOG=zramd=debug cargo test ...` shows the server's log.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let exports = Arc::new(ExportSet::new(exports));
        let shutdown = Arc::new(AtomicBool::new(false));
        let service = Service::new(Arc::clone(&exports), config);
        let (addr, dir, listener) = if tcp {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            let addr = l.local_addr().expect("local addr");
            (Addr::Tcp(addr), None, Listener::Tcp(l))
        } else {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("nbd.sock");
            let l = UnixListener::bind(&path).expect("bind unix socket");
            (Addr::Unix(path), Some(dir), Listener::Unix(l))
        };
        let thread = {
            let (service, stop) = (Arc::clone(&service), Arc::clone(&shutdown));
            std::thread::spawn(move || service.serve(vec![listener], &stop))
        };
        Self {
            addr,
            exports,
            service,
            shutdown,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// What the server holds now.
    pub fn stats(&self) -> Stats {
        self.service.stats()
    }

    /// Waits (at most 20 s) until the server's figures satisfy `ok`; returns them.
    pub fn wait_for(&self, what: &str, ok: impl Fn(&Stats) -> bool) -> Stats {
        let start = std::time::Instant::now();
        loop {
            let s = self.stats();
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "never {what}: {s:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn export(&self, name: &str) -> Arc<Export> {
        self.exports.get(name).expect("export")
    }

    /// An NBD URI for libnbd-based tools and fio.
    pub fn uri(&self, export: &str) -> String {
        match &self.addr {
            Addr::Unix(p) => format!("nbd+unix:///{export}?socket={}", p.display()),
            Addr::Tcp(a) => format!("nbd://{a}/{export}"),
        }
    }

    /// A qemu `--image-opts`/json target.
    pub fn qemu_target(&self, export: &str) -> String {
        match &self.addr {
            Addr::Unix(p) => format!("nbd:unix:{}:exportname={export}", p.display()),
            Addr::Tcp(a) => format!("nbd:{}:{}:exportname={export}", a.ip(), a.port()),
        }
    }

    /// A raw client connection (not yet greeted).
    pub fn connect(&self) -> Client {
        let stream: Box<dyn Stream> = match &self.addr {
            Addr::Unix(p) => Box::new(UnixStream::connect(p).expect("connect unix")),
            Addr::Tcp(a) => Box::new(TcpStream::connect(a).expect("connect tcp")),
        };
        stream
            .set_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Client { s: stream }
    }

    /// Stops the server and checks that it returns cleanly.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join().expect("server thread panicked");
            r.expect("server returned an error");
        }
    }

    /// A fresh client can still negotiate, write and read back: the server is alive.
    pub fn assert_serving(&self) {
        let mut c = self.connect();
        c.greet();
        c.go("zram0", true);
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let off = 64 * 1024;
        c.request(CMD_WRITE, 0, 1, off, 4096);
        c.send(&data);
        assert_eq!(c.simple_reply(1), 0);
        c.request(CMD_READ, 0, 2, off, 4096);
        let (chunk, payload) = c.chunk();
        assert_eq!(chunk.reply_type, REPLY_TYPE_OFFSET_DATA);
        assert_eq!(&payload[8..], &data[..]);
        c.request(CMD_DISC, 0, 3, 0, 0);
        c.expect_eof();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.stop_inner();
        } else {
            self.shutdown.store(true, Ordering::Relaxed);
        }
    }
}

fn default_exports(size: u64) -> Vec<Arc<Export>> {
    vec![
        Arc::new(Export::new("zram0", device(size), false)),
        Arc::new(Export::new("ro", device(1 << 20), true)),
    ]
}

/// A short handshake timeout and small maximum request for the bad-input tests.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        max_request_bytes: 1 << 20,
        handshake_timeout: Timeout::secs(5),
        max_connections: 64,
        ..ServerConfig::default()
    }
}

pub trait Stream: Read + Write + Send {
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn shutdown_write(&self) -> io::Result<()>;
}

/// `UnixStream` and `TcpStream` have the same inherent methods but no trait for them.
macro_rules! impl_stream {
    ($($t:ty),*) => {$(
        impl Stream for $t {
            fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(t)?;
                self.set_write_timeout(t)
            }
            fn shutdown_write(&self) -> io::Result<()> {
                self.shutdown(std::net::Shutdown::Write)
            }
        }
    )*};
}

impl_stream!(UnixStream, TcpStream);

/// A structured reply chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub flags: u16,
    pub reply_type: u16,
    pub handle: u64,
    pub length: u32,
}

/// An option reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

/// A raw NBD client.
pub struct Client {
    pub s: Box<dyn Stream>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Client")
    }
}

impl Client {
    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("send");
    }

    pub fn recv(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).expect("recv");
        b
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.recv(2).try_into().expect("2"))
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.recv(4).try_into().expect("4"))
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.recv(8).try_into().expect("8"))
    }

    /// Reads the greeting, checks it, and answers with fixed newstyle + no zeroes.
    pub fn greet(&mut self) {
        self.greet_with(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    }

    pub fn greet_with(&mut self, client_flags: u32) {
        assert_eq!(self.u64(), NBDMAGIC);
        assert_eq!(self.u64(), IHAVEOPT);
        let flags = self.u16();
        assert_eq!(flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        self.send(&client_flags.to_be_bytes());
    }

    pub fn option(&mut self, option: u32, data: &[u8]) {
        self.send(&Self::option_bytes(option, data));
    }

    /// Sends an option the server is expected to hang up on before it has read it all: the
    /// write may then fail (broken pipe, reset), which is what the test wants to see.
    pub fn option_cut_short(&mut self, option: u32, data: &[u8]) {
        let _ = self.s.write_all(&Self::option_bytes(option, data));
    }

    fn option_bytes(option: u32, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    pub fn opt_reply(&mut self) -> OptReply {
        assert_eq!(self.u64(), OPTION_REPLY_MAGIC);
        let option = self.u32();
        let reply_type = self.u32();
        let len = self.u32() as usize;
        assert!(len <= 1 << 20, "option reply of {len} bytes");
        let data = self.recv(len);
        OptReply {
            option,
            reply_type,
            data,
        }
    }

    /// The export names `NBD_OPT_LIST` gives.
    pub fn list(&mut self) -> Vec<String> {
        self.option(OPT_LIST, &[]);
        let mut names = Vec::new();
        loop {
            let r = self.opt_reply();
            match r.reply_type {
                REP_SERVER => {
                    let len = u32::from_be_bytes(r.data[0..4].try_into().unwrap()) as usize;
                    names.push(String::from_utf8(r.data[4..4 + len].to_vec()).unwrap());
                }
                REP_ACK => return names,
                t => panic!("reply {t:#x}"),
            }
        }
    }

    /// INFO/GO data for `name` with these information requests.
    pub fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(requests.len() as u16).to_be_bytes());
        for r in requests {
            d.extend_from_slice(&r.to_be_bytes());
        }
        d
    }

    /// Meta context option data.
    pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    /// Negotiates (optionally structured replies + base:allocation) and enters
    /// transmission with GO; returns (size, transmission flags).
    pub fn go(&mut self, name: &str, structured: bool) -> (u64, u16) {
        if structured {
            self.option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(self.opt_reply().reply_type, REP_ACK);
            self.option(
                OPT_SET_META_CONTEXT,
                &Self::meta_data(name, &[BASE_ALLOCATION]),
            );
            let r = self.opt_reply();
            assert_eq!(r.reply_type, REP_META_CONTEXT);
            assert_eq!(&r.data[4..], BASE_ALLOCATION.as_bytes());
            assert_eq!(self.opt_reply().reply_type, REP_ACK);
        }
        self.option(OPT_GO, &Self::info_data(name, &[INFO_BLOCK_SIZE]));
        let mut export = None;
        loop {
            let r = self.opt_reply();
            match r.reply_type {
                REP_INFO => {
                    let info = u16::from_be_bytes([r.data[0], r.data[1]]);
                    if info == INFO_EXPORT {
                        let size = u64::from_be_bytes(r.data[2..10].try_into().expect("8"));
                        let flags = u16::from_be_bytes([r.data[10], r.data[11]]);
                        export = Some((size, flags));
                    }
                }
                REP_ACK => return export.expect("NBD_INFO_EXPORT before ACK"),
                t => panic!("GO failed with reply type {t:#x}"),
            }
        }
    }

    pub fn request(&mut self, kind: u16, flags: u16, handle: u64, offset: u64, length: u32) {
        let r = Request {
            flags,
            kind,
            handle,
            offset,
            length,
        };
        self.send(&r.encode());
    }

    /// Reads a simple reply for `handle`; returns its error.
    pub fn simple_reply(&mut self, handle: u64) -> u32 {
        assert_eq!(self.u32(), SIMPLE_REPLY_MAGIC);
        let error = self.u32();
        assert_eq!(self.u64(), handle);
        error
    }

    /// Reads any reply header: simple (`Err(error, handle)`) or a structured chunk
    /// (`Ok`, with its payload).
    pub fn any_reply(&mut self) -> Result<(Chunk, Vec<u8>), (u32, u64)> {
        match self.u32() {
            SIMPLE_REPLY_MAGIC => {
                let error = self.u32();
                let handle = self.u64();
                Err((error, handle))
            }
            STRUCTURED_REPLY_MAGIC => Ok(self.chunk_after_magic()),
            m => panic!("bad reply magic {m:#x}"),
        }
    }

    /// Reads a structured chunk (header and payload).
    pub fn chunk(&mut self) -> (Chunk, Vec<u8>) {
        assert_eq!(self.u32(), STRUCTURED_REPLY_MAGIC);
        self.chunk_after_magic()
    }

    fn chunk_after_magic(&mut self) -> (Chunk, Vec<u8>) {
        let flags = self.u16();
        let reply_type = self.u16();
        let handle = self.u64();
        let length = self.u32();
        let payload = self.recv(length as usize);
        (
            Chunk {
                flags,
                reply_type,
                handle,
                length,
            },
            payload,
        )
    }

    /// Reads a structured error chunk and returns its error value.
    pub fn error_chunk(&mut self, handle: u64) -> u32 {
        let (c, p) = self.chunk();
        assert_eq!(c.handle, handle);
        assert_eq!(c.reply_type, REPLY_TYPE_ERROR);
        assert_ne!(c.flags & REPLY_FLAG_DONE, 0);
        let msg_len = u16::from_be_bytes([p[4], p[5]]) as usize;
        assert_eq!(p.len(), 6 + msg_len);
        u32::from_be_bytes(p[0..4].try_into().expect("4"))
    }

    /// The server closes the connection: the next read ends (possibly after bytes still in
    /// flight are drained).
    pub fn expect_eof(&mut self) {
        let mut buf = [0u8; 4096];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                    ) =>
                {
                    return;
                }
                Err(e) => panic!("expected the server to close, got {e}"),
            }
        }
    }
}
