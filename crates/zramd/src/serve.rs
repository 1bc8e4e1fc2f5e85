//! `zramd serve`: devices, their NBD exports, the control socket and metrics, until SIGINT,
//! SIGTERM or SIGHUP.

use std::io::{IsTerminal as _, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use zram::config::DEFAULT_DISKSIZE;
use zram::{Size, ZramConfig};

use crate::device::Device;
use crate::export::Export;
use crate::listen::{Listener, SocketAccess, bind_unix};
use crate::nbd::{ServerConfig, Service};
use crate::registry::{Endpoint, Registry};

mod check;
use check::same_file;
pub use check::{MAX_CONFIG, MAX_NAME, check_devices, check_settings, read_config};

/// The default NBD address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

/// One device: its name, size and settings. The same fields, names and defaults serve the
/// command line (`zramd serve --size 2G --algorithm zstd …`) and a config file's
/// `[[device]]` tables (`size = "2G"`, `algorithm = "zstd"`, …); the settings are the
/// device's own [`ZramConfig`], passed down whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
pub struct DeviceSpec {
    /// Device and export name (1 to 255 bytes; not `.` or `..`; no `/` or control
    /// characters).
    #[arg(long, default_value = "zram0")]
    pub name: String,
    /// Device size (K/M/G suffixes).
    #[arg(long, default_value_t = DEFAULT_DISKSIZE)]
    #[serde(default = "default_size")]
    pub size: Size,
    /// Export read-only.
    #[arg(long)]
    #[serde(default)]
    pub read_only: bool,
    /// A file loaded into the device at start; it must fit in the device's size.
    #[arg(long, value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<PathBuf>,
    /// The device's settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub config: ZramConfig,
}

fn default_size() -> Size {
    DEFAULT_DISKSIZE
}

impl Default for DeviceSpec {
    fn default() -> Self {
        Self {
            name: "zram0".into(),
            size: DEFAULT_DISKSIZE,
            read_only: false,
            image: None,
            config: ZramConfig::default(),
        }
    }
}

impl DeviceSpec {
    /// Makes the device, initialized, holding its image if it has one.
    pub fn build(&self) -> anyhow::Result<Device> {
        self.check()?;
        let device = Device::with_size(self.name.clone(), self.config.clone(), self.size.bytes())
            .with_context(|| format!("device {}", self.name))?;
        if let Some(image) = &self.image {
            crate::image::load(&device, image)?;
        }
        Ok(device)
    }
}

/// The server-level settings: the NBD server's limits and who may use its unix sockets.
/// The same fields, names and defaults serve `zramd serve`'s options and a config file's
/// top-level keys (`--max-connections 64` = `max_connections = 64`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, clap::Args)]
pub struct ServerSettings {
    /// The NBD server's limits.
    #[command(flatten)]
    #[serde(flatten)]
    pub nbd: ServerConfig,
    /// Mode and group of the NBD unix sockets.
    #[command(flatten)]
    #[serde(flatten)]
    pub sockets: SocketAccess,
    /// Ready the server to back swap: lock its memory (mlockall), mark its threads I/O
    /// flushers (PR_SET_IO_FLUSHER), keep the OOM killer off it; needs root (docs/swap.md).
    #[arg(long)]
    #[serde(default)]
    pub swap_safe: bool,
    /// Do not cap the devices' `mem_limit` under a memory cgroup's limit (docs/design.md,
    /// "Limits": by default the devices' pools hold at most the limit less room for the
    /// rest, all of them together).
    #[arg(long)]
    #[serde(default)]
    pub no_cgroup_cap: bool,
    /// All devices' pools together hold at most this (K/M/G suffixes; 0 = no such limit;
    /// beyond the kernel): past it a write fails with ENOSPC, as past a device's
    /// `mem_limit`. In a memory cgroup with a limit, the lower of it and the cgroup's
    /// budget applies.
    #[arg(long, default_value_t = Size(0))]
    #[serde(default)]
    pub total_mem_limit: Size,
}

/// The config file (`--config FILE`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ConfigFile {
    /// NBD TCP addresses.
    #[serde(default)]
    pub listen: Vec<String>,
    /// NBD unix socket paths.
    #[serde(default)]
    pub unix: Vec<PathBuf>,
    /// Control socket path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<PathBuf>,
    /// Metrics address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// The server's limits and socket permissions.
    #[serde(flatten)]
    pub settings: ServerSettings,
    /// Devices.
    #[serde(default)]
    pub device: Vec<DeviceSpec>,
}

/// The first key of `given` that does not come back when `parsed` (what serde made of
/// `given`) is written out: a key serde ignored, which would otherwise pass unnoticed
/// (flattened structs cannot refuse unknown keys themselves).
fn unknown_key(given: &toml::Table, parsed: &impl Serialize) -> anyhow::Result<Option<String>> {
    let known = toml::Table::try_from(parsed)?;
    Ok(given.keys().find(|k| !known.contains_key(*k)).cloned())
}

impl ConfigFile {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = read_config(path)?;
        let config = Self::parse(&text).with_context(|| format!("parse {}", path.display()))?;
        for spec in &config.device {
            if let Some(backing) = &spec.config.backing_dev
                && same_file(backing, path)
            {
                bail!(
                    "device {}: backing_dev {} is the config file",
                    spec.name,
                    backing.display()
                );
            }
        }
        Ok(config)
    }

    /// Parses and checks a config file's text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let raw: toml::Table = toml::from_str(text)?;
        let config: ConfigFile = raw.clone().try_into()?;
        if let Some(key) = unknown_key(&raw, &config)? {
            bail!("unknown setting {key:?}");
        }
        if config.device.is_empty() {
            bail!("no [[device]] tables");
        }
        let given = raw.get("device").and_then(toml::Value::as_array);
        for (table, spec) in given.into_iter().flatten().zip(&config.device) {
            let Some(table) = table.as_table() else {
                continue;
            };
            if let Some(key) = unknown_key(table, spec)? {
                bail!("device {:?}: unknown setting {key:?}", spec.name);
            }
            let recomp = table
                .get("recomp_algorithm")
                .and_then(toml::Value::as_array);
            for (entry, parsed) in recomp
                .into_iter()
                .flatten()
                .zip(&spec.config.recomp_algorithm)
            {
                if let Some(entry) = entry.as_table()
                    && let Some(key) = unknown_key(entry, parsed)?
                {
                    bail!(
                        "device {:?}: recomp_algorithm: unknown setting {key:?}",
                        spec.name
                    );
                }
            }
        }
        let mut names: Vec<&str> = config.device.iter().map(|d| d.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            bail!("device name {:?} used twice", w[0]);
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
    /// The NBD server's limits and the unix sockets' permissions.
    pub settings: ServerSettings,
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
    /// The NBD server (its connections and bytes in flight: [`Service::stats`]).
    pub nbd: Arc<Service>,
    threads: Vec<std::thread::JoinHandle<()>>,
    unix_paths: Vec<PathBuf>,
    fuse: Option<crate::fuse::Mounted>,
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs as _;
    addr.to_socket_addrs()
        .with_context(|| format!("address {addr:?}"))?
        .next()
        .with_context(|| format!("address {addr:?} resolves to nothing"))
}

/// Socket files a start made, removed again unless the start succeeds.
#[derive(Debug, Default)]
struct Made(Vec<PathBuf>);

impl Made {
    /// Binds a unix socket and remembers its file.
    fn unix(&mut self, path: &Path, access: &SocketAccess) -> anyhow::Result<UnixListener> {
        let l = bind_unix(path, access)?;
        self.0.push(path.to_owned());
        Ok(l)
    }

    /// The start succeeded: the files stay.
    fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Server {
    /// Makes the devices, binds everything and starts serving. A start that fails leaves
    /// no socket file behind.
    pub fn start(options: &ServeOptions) -> anyhow::Result<Self> {
        check_settings(&options.settings)?;
        check_devices(&options.devices)?;
        if options.settings.swap_safe {
            // First: the threads started from here on inherit the I/O flusher flag.
            tracing::info!("{}", crate::swap::apply()?);
        }
        let mut exports = Vec::new();
        for spec in &options.devices {
            exports.push(Arc::new(Export::new(
                spec.name.clone(),
                Arc::new(spec.build()?),
                spec.read_only,
            )));
        }
        let mut registry = Registry::new(exports);
        // The FUSE tree first: a directory it is refused (something is mounted there) leaves
        // no socket behind.
        let fuse = match &options.fuse {
            Some(dir) => {
                let mounted = crate::fuse::mount(Arc::clone(registry.exports()), dir)
                    .with_context(|| format!("mount the FUSE export at {}", dir.display()))?;
                Some(mounted)
            }
            None => None,
        };
        let listen: Vec<String> =
            if options.listen.is_empty() && options.unix.is_empty() && options.fuse.is_none() {
                vec![DEFAULT_LISTEN.to_owned()]
            } else {
                options.listen.clone()
            };
        let mut made = Made::default();
        let mut nbd = Vec::new();
        let mut tcp_addrs = Vec::new();
        for addr in &listen {
            let addr = resolve(addr)?;
            let l = TcpListener::bind(addr).with_context(|| format!("listen on {addr}"))?;
            let bound = l.local_addr()?;
            registry.served_at.push(Endpoint::Tcp(bound));
            tcp_addrs.push(bound);
            nbd.push(Listener::Tcp(l));
        }
        for path in &options.unix {
            nbd.push(Listener::Unix(made.unix(path, &options.settings.sockets)?));
            registry.served_at.push(Endpoint::Unix(path.clone()));
        }
        if let Some(dir) = &options.fuse {
            registry.served_at.push(Endpoint::Fuse(dir.clone()));
        }
        let control_path = options
            .control
            .clone()
            .unwrap_or_else(crate::control::default_path);
        let control = made.unix(&control_path, &SocketAccess::PRIVATE)?;
        let metrics = match &options.metrics {
            Some(addr) => {
                let addr = resolve(addr)?;
                Some(TcpListener::bind(addr).with_context(|| format!("metrics on {addr}"))?)
            }
            None => None,
        };
        let metrics_addr = metrics.as_ref().map(TcpListener::local_addr).transpose()?;

        let registry = Arc::new(registry);
        let shutdown = Arc::new(AtomicBool::new(false));
        let tls = options.settings.nbd.load_tls().context("NBD TLS")?;
        let service = Service::with_tls(
            Arc::clone(registry.exports()),
            options.settings.nbd.clone(),
            tls,
        );
        let mut threads = Vec::new();
        let mut spawn = |name: &str, f: Box<dyn FnOnce() + Send>| -> anyhow::Result<()> {
            let t = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(f)
                .with_context(|| format!("start the {name} thread"))?;
            threads.push(t);
            Ok(())
        };
        let mut started = Ok(());
        if !nbd.is_empty() {
            let (service, stop) = (Arc::clone(&service), Arc::clone(&shutdown));
            started = spawn(
                "nbd",
                Box::new(move || {
                    if let Err(e) = service.serve(nbd, &stop) {
                        tracing::error!("NBD: {e}");
                    }
                }),
            );
        }
        if started.is_ok() {
            let (reg, stop) = (Arc::clone(&registry), Arc::clone(&shutdown));
            started = spawn(
                "control",
                Box::new(move || {
                    if let Err(e) = crate::control::serve(control, reg, stop) {
                        tracing::error!("control socket: {e}");
                    }
                }),
            );
        }
        if let (Ok(()), Some(l)) = (&started, metrics) {
            let (reg, stop) = (Arc::clone(&registry), Arc::clone(&shutdown));
            let nbd = Arc::clone(&service);
            started = spawn(
                "metrics",
                Box::new(move || {
                    if let Err(e) = crate::metrics::serve(l, reg, &nbd, stop) {
                        tracing::error!("metrics: {e}");
                    }
                }),
            );
        }
        if let Err(e) = started {
            shutdown.store(true, Ordering::Relaxed);
            for t in threads {
                let _ = t.join();
            }
            return Err(e);
        }
        made.keep();
        Ok(Self {
            registry,
            shutdown,
            control_path,
            tcp_addrs,
            metrics_addr,
            nbd: service,
            threads,
            unix_paths: options.unix.clone(),
            fuse,
        })
    }

    /// Stops every thread and removes the sockets this server made. The FUSE tree is
    /// unmounted without waiting for anyone holding a file of it open (see
    /// [`crate::fuse::Mounted::unmount`]).
    pub fn stop(mut self) {
        if let Some(mounted) = self.fuse.take() {
            mounted.unmount();
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

/// Prints a line of the server's report to stdout. A stdout that closes (a pager quit, a log
/// pipe gone) must not stop a running server: `println!` would panic, leaving its sockets
/// behind, so write errors are ignored here (SIGPIPE stays ignored while serving).
macro_rules! say {
    () => {{
        let _ = writeln!(std::io::stdout().lock());
    }};
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Runs the server until SIGINT, SIGTERM or SIGHUP ([`crate::daemon`]).
pub fn run(options: &ServeOptions) -> anyhow::Result<()> {
    let mut options = options.clone();
    let mut shared = Some(options.settings.total_mem_limit.bytes()).filter(|&t| t > 0);
    if let Some(total) = shared {
        say!(
            "total memory limit {}: the devices' pools hold at most that together \
             (past it a write fails with ENOSPC)",
            crate::human::size(total)
        );
    }
    if !options.settings.no_cgroup_cap
        && let Some(limit) = crate::cgroup::enable()
    {
        let budget = crate::cgroup::budget_of(limit);
        shared = Some(shared.map_or(budget, |total| total.min(budget)));
        // Request buffers are outside the pools: at most half the room.
        let buffers = &mut options.settings.nbd.max_in_flight;
        buffers.0 = buffers.0.min(limit.saturating_sub(budget) / 2);
        say!(
            "memory cgroup limit {}: the devices' pools hold at most {} together (each \
             device's mem_limit too), request buffers {} (past the budget a write fails \
             with ENOSPC, not the OOM killer; --no-cgroup-cap to leave them)",
            crate::human::size(limit),
            crate::human::size(budget),
            crate::human::size(buffers.0)
        );
    }
    if let Some(bytes) = shared {
        crate::cgroup::share_total(bytes);
    }
    let options = &options;
    let server = Server::start(options)?;
    let daemon = crate::daemon::Daemon::install(&server.shutdown)?;
    say!("zramd: serving {} device(s)", options.devices.len());
    for spec in &options.devices {
        for at in &server.registry.served_at {
            say!(
                "  {:8} {} {} -> {}",
                spec.name,
                spec.size,
                spec.config.algorithm,
                at.uri(&spec.name)
            );
        }
    }
    if let Some(dir) = &options.fuse {
        say!(
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
        say!("connect with e.g.: nbdinfo nbd://{host}   or   qemu-img info nbd://{host}");
    }
    say!(
        "control: {} (zramd stat --control {})",
        server.control_path.display(),
        server.control_path.display()
    );
    if let Some(m) = server.metrics_addr {
        say!("metrics: http://{m}/metrics");
    }
    daemon.ready(&summary(&server.registry));
    let tty = options.status_line && std::io::stdout().is_terminal();
    let mut last = Instant::now() - Duration::from_secs(1);
    while !server.shutdown.load(Ordering::Relaxed) {
        if tty && last.elapsed() >= Duration::from_secs(1) {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[K{}", summary(&server.registry));
            let _ = out.flush();
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if tty {
        say!();
    }
    daemon.stopping();
    tracing::info!("shutting down");
    server.stop();
    Ok(())
}

#[cfg(test)]
mod tests;
