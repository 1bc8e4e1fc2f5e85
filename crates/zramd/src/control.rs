//! The control endpoint: a unix socket (never reachable from the network, mode 0600) that
//! `zramd stat`, `zramd compact`, `zramd reset` and `zramd set` talk to. One request per
//! connection: a line of JSON in, a line of JSON out.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::device::{Device, DeviceError};
use crate::registry::{DeviceStat, Registry};

/// Longest request accepted.
const MAX_REQUEST: u64 = 64 * 1024;

/// What a control client asks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Figures of every device.
    Stat,
    /// Compact one device, or all.
    Compact {
        /// Device name; all when absent.
        device: Option<String>,
    },
    /// The kernel's reset: free all data and make the device uninitialized.
    Reset {
        /// Device name.
        device: String,
    },
    /// Free all data and zero the counters, keeping the size and settings (beyond the
    /// kernel).
    Clear {
        /// Device name.
        device: String,
    },
    /// Change an attribute at run time: `mem_limit` (a size) or `mem_used_max` (`0`
    /// restarts it from the current use), as the kernel allows.
    Set {
        /// Device name.
        device: String,
        /// Attribute name.
        attr: String,
        /// New value.
        value: String,
    },
}

/// The answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Response {
    /// Did the request succeed?
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
    /// Device figures (`stat`).
    pub devices: Vec<DeviceStat>,
    /// Pages freed (`compact`).
    pub pages_freed: Option<usize>,
}

impl Response {
    fn error(e: impl std::fmt::Display) -> Self {
        Self {
            ok: false,
            error: Some(e.to_string()),
            ..Self::default()
        }
    }
}

/// Where the control socket lives by default: `/run/zramd.sock` for root, else under
/// `$XDG_RUNTIME_DIR` (or `/tmp`) with the user id in the name.
pub fn default_path() -> PathBuf {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or("0")
        .to_owned();
    if uid == "0" {
        return PathBuf::from("/run/zramd.sock");
    }
    let dir =
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    dir.join(format!("zramd-{uid}.sock"))
}

/// Answers one request against the registry.
pub fn handle(registry: &Registry, request: &Request) -> Response {
    let device = |name: &str| {
        registry
            .device(name)
            .ok_or_else(|| format!("no device named {name:?}"))
    };
    match request {
        Request::Stat => Response {
            ok: true,
            devices: registry.stats(),
            ..Response::default()
        },
        Request::Compact { device: None } => Response {
            ok: true,
            pages_freed: Some(
                registry
                    .exports()
                    .iter()
                    .filter_map(|e| e.device.zram())
                    .map(|z| z.compact())
                    .sum(),
            ),
            ..Response::default()
        },
        Request::Compact { device: Some(name) } => match device(name).map(|d| d.zram()) {
            Ok(Some(z)) => Response {
                ok: true,
                pages_freed: Some(z.compact()),
                ..Response::default()
            },
            Ok(None) => Response::error(format!("{name} is not initialized")),
            Err(e) => Response::error(e),
        },
        Request::Reset { device: name } => life_cycle(registry, name, Device::reset),
        Request::Clear { device: name } => life_cycle(registry, name, Device::clear),
        Request::Set {
            device: name,
            attr,
            value,
        } => match device(name) {
            Err(e) => Response::error(e),
            Ok(d) => match attr.as_str() {
                "mem_limit" => match zram::size::parse_size(value) {
                    Ok(bytes) => {
                        d.set_mem_limit(bytes);
                        Response {
                            ok: true,
                            ..Response::default()
                        }
                    }
                    Err(e) => Response::error(e),
                },
                "mem_used_max" if value.trim() == "0" => {
                    if let Some(z) = d.zram() {
                        z.reset_mem_used_max();
                    }
                    Response {
                        ok: true,
                        ..Response::default()
                    }
                }
                "mem_used_max" => {
                    Response::error("mem_used_max only accepts 0 (restart from the current use)")
                }
                other => Response::error(format!(
                    "attribute {other:?} cannot be changed at run time (mem_limit, mem_used_max can)"
                )),
            },
        },
    }
}

/// Resets or clears device `name`, saying who holds it when it is busy.
fn life_cycle(
    registry: &Registry,
    name: &str,
    change: impl FnOnce(&Device) -> Result<(), DeviceError>,
) -> Response {
    let Some(d) = registry.device(name) else {
        return Response::error(format!("no device named {name:?}"));
    };
    match change(d) {
        Ok(()) => Response {
            ok: true,
            ..Response::default()
        },
        Err(DeviceError::Busy) => Response::error(format!(
            "{name} is busy: {} client(s) have it open (the kernel refuses a reset too)",
            d.openers()
        )),
        Err(e) => Response::error(format!("{name}: {e}")),
    }
}

/// Binds the control socket (replacing a stale one left by a crash) with mode 0600.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("{} is in use by a running server", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("remove stale {}", path.display()))?;
    }
    let listener = UnixListener::bind(path)
        .with_context(|| format!("bind control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves control requests until `shutdown` is set.
pub fn serve(
    listener: UnixListener,
    registry: Arc<Registry>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    while !shutdown.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let registry = Arc::clone(&registry);
                std::thread::spawn(move || {
                    if let Err(e) = serve_one(stream, &registry) {
                        tracing::debug!("control connection: {e}");
                    }
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => tracing::warn!("control accept: {e}"),
        }
    }
    Ok(())
}

fn serve_one(stream: UnixStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = Vec::new();
    BufReader::new((&stream).take(MAX_REQUEST)).read_until(b'\n', &mut line)?;
    let response = match serde_json::from_slice::<Request>(&line) {
        Ok(req) => handle(registry, &req),
        Err(e) => Response::error(format!("bad request: {e}")),
    };
    let mut out = serde_json::to_vec(&response).map_err(std::io::Error::other)?;
    out.push(b'\n');
    (&stream).write_all(&out)
}

/// Sends one request to the server at `path` and returns its answer.
pub fn call(path: &Path, request: &Request) -> anyhow::Result<Response> {
    let stream = UnixStream::connect(path).with_context(|| {
        format!(
            "connect to the control socket {} (is `zramd serve` running? pass --control PATH)",
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut out = serde_json::to_vec(request)?;
    out.push(b'\n');
    (&stream).write_all(&out)?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let response: Response = serde_json::from_str(&line).context("parse the server's answer")?;
    if !response.ok {
        bail!(
            "{}",
            response.error.unwrap_or_else(|| "request failed".into())
        );
    }
    Ok(response)
}
