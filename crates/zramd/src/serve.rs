//! `zramd serve`: devices, their NBD exports, the control socket and metrics, until SIGINT
//! or SIGTERM.

use std::io::IsTerminal as _;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Deserialize;
use zram::{Algorithm, AlgorithmParams};

use crate::device::{Device, Settings};
use crate::export::Export;
use crate::registry::{Endpoint, Registry};

/// The default NBD address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

/// One device's settings (a `[[device]]` table of the config file, or the command line's).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Device and export name.
    pub name: String,
    /// Size, with K/M/G suffixes.
    #[serde(default = "default_size")]
    pub size: String,
    /// Compression algorithm.
    #[serde(default = "default_algorithm")]
    pub algorithm: String,
    /// Compression level (zstd).
    pub level: Option<i32>,
    /// zsmalloc chain size.
    #[serde(default = "default_chain")]
    pub chain_size: usize,
    /// Memory limit, with K/M/G suffixes ("0" = none).
    #[serde(default = "default_limit")]
    pub mem_limit: String,
    /// Refuse writes.
    #[serde(default)]
    pub read_only: bool,
    /// zsmalloc shards per size class (0 = one per CPU).
    #[serde(default)]
    pub shards: usize,
    /// Where zsmalloc objects keep their handle: "omitted" (the default, 8 bytes less per
    /// object) or "handle" (the kernel's layout, for like-for-like comparisons).
    #[serde(default = "default_header")]
    pub object_header: String,
    /// Bytes compressed as one stream, with K suffixes: "4K" (the kernel's page at a
    /// time) up to "128K", a power of two.
    #[serde(default = "default_unit")]
    pub unit_size: String,
}

fn default_size() -> String {
    "1G".into()
}
fn default_algorithm() -> String {
    "lz4".into()
}
fn default_chain() -> usize {
    zsmalloc::class::DEFAULT_CHAIN_SIZE
}
fn default_limit() -> String {
    "0".into()
}
fn default_header() -> String {
    "omitted".into()
}
fn default_unit() -> String {
    "4K".into()
}

impl Default for DeviceSpec {
    fn default() -> Self {
        Self {
            name: "zram0".into(),
            size: default_size(),
            algorithm: default_algorithm(),
            level: None,
            chain_size: default_chain(),
            mem_limit: default_limit(),
            read_only: false,
            shards: 0,
            object_header: default_header(),
            unit_size: default_unit(),
        }
    }
}

impl DeviceSpec {
    /// Makes the device, initialized.
    pub fn build(&self) -> anyhow::Result<Device> {
        if self.name.is_empty() || self.name.contains(['/', '\0']) {
            bail!("device name {:?} is not a valid name", self.name);
        }
        let algorithm: Algorithm = self.algorithm.parse()?;
        let disksize = zram::size::parse_size(&self.size)?;
        if disksize == 0 {
            bail!("device {}: size must be more than 0", self.name);
        }
        let unit_size = usize::try_from(zram::size::parse_size(&self.unit_size)?)
            .with_context(|| format!("unit_size {}", self.unit_size))?;
        zram::unit::check_unit_size(unit_size).with_context(|| format!("device {}", self.name))?;
        let settings = Settings {
            algorithm,
            params: AlgorithmParams {
                level: self.level,
                dictionary: None,
            },
            chain_size: self.chain_size,
            mem_limit: zram::size::parse_size(&self.mem_limit)?,
            shards: self.shards,
            header: self
                .object_header
                .parse()
                .map_err(|e: String| anyhow::anyhow!("device {}: {e}", self.name))?,
            unit_size,
        };
        Device::with_size(self.name.clone(), settings, disksize)
            .with_context(|| format!("device {}", self.name))
    }
}

/// The config file (`--config FILE`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// NBD TCP addresses.
    #[serde(default)]
    pub listen: Vec<String>,
    /// NBD unix socket paths.
    #[serde(default)]
    pub unix: Vec<PathBuf>,
    /// Control socket path.
    pub control: Option<PathBuf>,
    /// Metrics address.
    pub metrics: Option<String>,
    /// Devices.
    #[serde(default)]
    pub device: Vec<DeviceSpec>,
}

impl ConfigFile {
    /// Reads and checks a config file.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let config: ConfigFile =
            toml::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
        if config.device.is_empty() {
            bail!("{}: no [[device]] tables", path.display());
        }
        let mut names: Vec<&str> = config.device.iter().map(|d| d.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            bail!("{}: device name {:?} used twice", path.display(), w[0]);
        }
        Ok(config)
    }
}

/// Everything `serve` needs.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Devices to make.
    pub devices: Vec<DeviceSpec>,
    /// NBD TCP addresses (none and no unix paths: the default address).
    pub listen: Vec<String>,
    /// NBD unix socket paths.
    pub unix: Vec<PathBuf>,
    /// Control socket path (None: the default path).
    pub control: Option<PathBuf>,
    /// Metrics address.
    pub metrics: Option<String>,
    /// Mount the FUSE export here.
    pub fuse: Option<PathBuf>,
    /// Show the live summary line (only when stdout is a terminal).
    pub status_line: bool,
}

/// A running server: its threads stop when `shutdown` is set.
#[derive(Debug)]
pub struct Server {
    /// The devices.
    pub registry: Arc<Registry>,
    /// Set to stop.
    pub shutdown: Arc<AtomicBool>,
    /// The control socket path.
    pub control_path: PathBuf,
    /// Bound NBD TCP addresses.
    pub tcp_addrs: Vec<SocketAddr>,
    /// Bound metrics address.
    pub metrics_addr: Option<SocketAddr>,
    threads: Vec<std::thread::JoinHandle<()>>,
    unix_paths: Vec<PathBuf>,
    fuse: Option<fuser::BackgroundSession>,
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs as _;
    addr.to_socket_addrs()
        .with_context(|| format!("address {addr:?}"))?
        .next()
        .with_context(|| format!("address {addr:?} resolves to nothing"))
}

impl Server {
    /// Makes the devices, binds everything and starts serving.
    pub fn start(options: &ServeOptions) -> anyhow::Result<Self> {
        let mut exports = Vec::new();
        for spec in &options.devices {
            exports.push(Arc::new(Export::new(
                spec.name.clone(),
                Arc::new(spec.build()?),
                spec.read_only,
            )));
        }
        let mut registry = Registry::new(exports);
        let listen: Vec<String> =
            if options.listen.is_empty() && options.unix.is_empty() && options.fuse.is_none() {
                vec![DEFAULT_LISTEN.to_owned()]
            } else {
                options.listen.clone()
            };
        let mut tcp = Vec::new();
        for addr in &listen {
            let addr = resolve(addr)?;
            let l = TcpListener::bind(addr).with_context(|| format!("listen on {addr}"))?;
            let bound = l.local_addr()?;
            registry.served_at.push(Endpoint::Tcp(bound));
            tcp.push((bound, l));
        }
        let mut unix = Vec::new();
        for path in &options.unix {
            if path.exists() && std::os::unix::net::UnixStream::connect(path).is_err() {
                std::fs::remove_file(path)
                    .with_context(|| format!("remove stale socket {}", path.display()))?;
            }
            let l = UnixListener::bind(path)
                .with_context(|| format!("listen on {}", path.display()))?;
            registry.served_at.push(Endpoint::Unix(path.clone()));
            unix.push((path.clone(), l));
        }
        let control_path = options
            .control
            .clone()
            .unwrap_or_else(crate::control::default_path);
        let control = crate::control::bind(&control_path)?;
        let metrics = match &options.metrics {
            Some(addr) => {
                let addr = resolve(addr)?;
                Some(TcpListener::bind(addr).with_context(|| format!("metrics on {addr}"))?)
            }
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(TcpListener::local_addr).transpose()?;

        let fuse = match &options.fuse {
            Some(dir) => {
                let session = crate::fuse::mount(Arc::clone(registry.exports()), dir)
                    .with_context(|| format!("mount the FUSE export at {}", dir.display()))?;
                registry.served_at.push(Endpoint::Fuse(dir.clone()));
                Some(session)
            }
            None => None,
        };
        let registry = Arc::new(registry);
        let shutdown = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(f)
                .with_context(|| format!("start {name} thread"))
        };
        let config = crate::nbd::ServerConfig::default();
        let tcp_addrs = tcp.iter().map(|(a, _)| *a).collect();
        for (addr, l) in tcp {
            let (exports, stop, config) = (
                Arc::clone(registry.exports()),
                Arc::clone(&shutdown),
                config.clone(),
            );
            threads.push(spawn(
                "nbd-tcp",
                Box::new(move || {
                    if let Err(e) = crate::nbd::serve_tcp(l, exports, config, stop) {
                        tracing::error!("NBD on {addr}: {e}");
                    }
                }),
            )?);
        }
        let unix_paths: Vec<PathBuf> = unix.iter().map(|(p, _)| p.clone()).collect();
        for (path, l) in unix {
            let (exports, stop, config) = (
                Arc::clone(registry.exports()),
                Arc::clone(&shutdown),
                config.clone(),
            );
            threads.push(spawn(
                "nbd-unix",
                Box::new(move || {
                    if let Err(e) = crate::nbd::serve_unix(l, exports, config, stop) {
                        tracing::error!("NBD on {}: {e}", path.display());
                    }
                }),
            )?);
        }
        {
            let (reg, stop) = (Arc::clone(&registry), Arc::clone(&shutdown));
            threads.push(spawn(
                "control",
                Box::new(move || {
                    if let Err(e) = crate::control::serve(control, reg, stop) {
                        tracing::error!("control socket: {e}");
                    }
                }),
            )?);
        }
        if let Some(l) = metrics {
            let (reg, stop) = (Arc::clone(&registry), Arc::clone(&shutdown));
            threads.push(spawn(
                "metrics",
                Box::new(move || {
                    if let Err(e) = crate::metrics::serve(l, reg, stop) {
                        tracing::error!("metrics: {e}");
                    }
                }),
            )?);
        }
        Ok(Self {
            registry,
            shutdown,
            control_path,
            tcp_addrs,
            metrics_addr,
            threads,
            unix_paths,
            fuse,
        })
    }

    /// Stops every thread and removes the sockets this server made.
    pub fn stop(mut self) {
        if let Some(session) = self.fuse.take()
            && let Err(e) = session.umount_and_join()
        {
            tracing::warn!("unmount the FUSE export: {e}");
        }
        self.shutdown.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.control_path);
        for p in &self.unix_paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// One line summing every device: data, compressed, total memory, ratio.
pub fn summary(registry: &Registry) -> String {
    let stats = registry.stats();
    let data: u64 = stats.iter().map(|d| d.data).sum();
    let compr: u64 = stats.iter().map(|d| d.compr).sum();
    let total: u64 = stats.iter().map(|d| d.total).sum();
    let ratio = if total == 0 {
        0.0
    } else {
        data as f64 / total as f64
    };
    format!(
        "{} device(s): data {}  compressed {}  total memory {}  ratio {ratio:.2}",
        stats.len(),
        crate::human::size(data),
        crate::human::size(compr),
        crate::human::size(total)
    )
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(options: &ServeOptions) -> anyhow::Result<()> {
    let server = Server::start(options)?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&server.shutdown))
            .context("install signal handler")?;
    }
    println!("zramd: serving {} device(s)", options.devices.len());
    for spec in &options.devices {
        for at in &server.registry.served_at {
            println!(
                "  {:8} {} {} -> {}",
                spec.name,
                spec.size,
                spec.algorithm,
                at.uri(&spec.name)
            );
        }
    }
    if let Some(dir) = &options.fuse {
        println!(
            "FUSE: {} (e.g. cat {}/mm_stat)",
            dir.display(),
            dir.join(&options.devices[0].name).display()
        );
    }
    if let Some(Endpoint::Tcp(addr)) = server.registry.served_at.first() {
        let host = if addr.ip().is_loopback() && addr.port() == 10809 {
            "127.0.0.1".to_owned()
        } else {
            addr.to_string()
        };
        println!("connect with e.g.: nbdinfo nbd://{host}   or   qemu-img info nbd://{host}");
    }
    println!(
        "control: {} (zramd stat --control {})",
        server.control_path.display(),
        server.control_path.display()
    );
    if let Some(m) = server.metrics_addr {
        println!("metrics: http://{m}/metrics");
    }
    let tty = options.status_line && std::io::stdout().is_terminal();
    let mut last = Instant::now() - Duration::from_secs(1);
    while !server.shutdown.load(Ordering::Relaxed) {
        if tty && last.elapsed() >= Duration::from_secs(1) {
            print!("\r\x1b[K{}", summary(&server.registry));
            let _ = std::io::Write::flush(&mut std::io::stdout());
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if tty {
        println!();
    }
    tracing::info!("shutting down");
    server.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zsmalloc::class::Header;

    fn header_of(spec: &DeviceSpec) -> anyhow::Result<Header> {
        let dev = spec.build()?;
        let zram = dev.zram().context("initialized")?;
        Ok(zram.pool().classes().header())
    }

    #[test]
    fn object_header_setting() {
        let mut spec = DeviceSpec {
            size: "1M".into(),
            ..DeviceSpec::default()
        };
        assert_eq!(header_of(&spec).unwrap(), Header::Omitted);
        spec.object_header = "handle".into();
        assert_eq!(header_of(&spec).unwrap(), Header::Handle);
        spec.object_header = "inline".into();
        let err = header_of(&spec).unwrap_err().to_string();
        assert!(err.contains("unknown object header"), "{err}");
    }
}
