//! The control endpoint: a unix socket (never reachable from the network, mode 0600) that
//! `zramd stat`, `compact`, `fold`, `reset`, `clear`, `add`, `remove`, `set`, `idle`,
//! `writeback`, `recompress` and `policy` talk to. One request per
//! connection: a line of JSON in, a line of JSON out.
//!
//! Bounded as every endpoint (`crate::endpoint`): at most [`MAX_CONNECTIONS`] at once (when
//! full, the oldest one still sending its request makes way), 5 s for the whole request,
//! [`MAX_REQUEST`] bytes of it. A request too long or too slow gets an error line, then the
//! connection closes.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::device::{Device, DeviceError};
use crate::endpoint::{self, Endpoint, REQUEST_DEADLINE, Unanswered};
use crate::figures::PolicyFigures;
use crate::listen::Listener;
use crate::registry::{DeviceStat, Registry};

/// Longest request accepted, in bytes.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Control connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// What a control client asks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Figures of every device.
    Stat,
    /// Compact one device, or all; with `backing`, also move written-back objects out of
    /// their backing files' sparse segments (`zram::clean`; devices without one are left
    /// out, a named one is an error).
    Compact {
        /// Device name; all when absent.
        device: Option<String>,
        /// Clean the backing files too.
        #[serde(default)]
        backing: bool,
    },
    /// Fold identical stored objects into one (seed 004's `fold`) on one device, or all.
    Fold {
        /// Device name; all when absent.
        device: Option<String>,
    },
    /// The kernel's reset: free all data and make the device uninitialized, its settings
    /// back at their defaults ([`crate::device::reset_settings`]).
    Reset {
        /// Device name.
        device: String,
    },
    /// Free all data and zero the counters, keeping the size and settings (beyond the
    /// kernel; not a reset).
    Clear {
        /// Device name.
        device: String,
    },
    /// Add an uninitialized device `zramN` with the default settings (the kernel's
    /// `hot_add`); the answer names it.
    Add,
    /// Remove a device (the kernel's `hot_remove`; refused while a client has it open).
    Remove {
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
    /// Mark slots idle (the kernel's `idle`): `all`, or an age in seconds.
    Idle {
        /// Device name.
        device: String,
        /// `all` or seconds.
        age: String,
    },
    /// Write slots back to the backing file (the kernel's `writeback` words: `idle`,
    /// `huge`, `type=huge_idle page_indexes=0-99`, ...).
    Writeback {
        /// Device name.
        device: String,
        /// The words.
        args: String,
    },
    /// Recompress slots (the kernel's `recompress` words: `type=idle priority=1`, ...).
    Recompress {
        /// Device name.
        device: String,
        /// The words.
        args: String,
    },
    /// Show the device's policy and what it did (no words), or apply words over it
    /// (`run`: one round now).
    Policy {
        /// Device name.
        device: String,
        /// The words (empty: show).
        #[serde(default)]
        words: String,
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
    /// What each device's pass did (`fold`).
    #[serde(default)]
    pub folded: Vec<Folded>,
    /// What each device's cleaning pass did (`compact` with `backing`).
    #[serde(default)]
    pub cleaned: Vec<Cleaned>,
    /// Slots marked idle (`idle`).
    #[serde(default)]
    pub idle_marked: Option<u64>,
    /// What the pass did (`writeback`).
    #[serde(default)]
    pub written_back: Option<zram::WritebackReport>,
    /// What the pass did (`recompress`).
    #[serde(default)]
    pub recompressed: Option<zram::RecompressReport>,
    /// The policy and its figures, after the change or round asked for (`policy`).
    #[serde(default)]
    pub policy: Option<PolicyFigures>,
    /// The device made (`add`).
    #[serde(default)]
    pub added: Option<String>,
}

/// What a `fold` pass did on one device.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Folded {
    /// The device.
    pub device: String,
    /// The pass's figures.
    #[serde(flatten)]
    pub report: zram::FoldReport,
}

/// What a cleaning pass of a backing file did on one device.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Cleaned {
    /// The device.
    pub device: String,
    /// The pass's figures.
    #[serde(flatten)]
    pub report: zram::CleanReport,
    /// Why the pass did not run (all devices asked for: busy, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    fn ok() -> Self {
        Self {
            ok: true,
            ..Self::default()
        }
    }

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
    let uid = rustix::process::geteuid();
    if uid.is_root() {
        return PathBuf::from("/run/zramd.sock");
    }
    let dir =
        std::env::var_os("XDG_RUNTIME_DIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    dir.join(format!("zramd-{}.sock", uid.as_raw()))
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
        Request::Compact {
            device: name,
            backing,
        } => match initialized(registry, name.as_deref()) {
            Ok(zrams) => {
                let mut cleaned = Vec::new();
                // All devices: one without a backing file is left out, one that is busy
                // (or fails) says so in its entry and the others go on.
                for (device, z) in zrams.iter().filter(|_| *backing) {
                    let (report, error) = match z.clean_backing() {
                        Ok(report) => (report, None),
                        Err(zram::Error::NoBackingDev) if name.is_none() => continue,
                        Err(e) if name.is_some() => {
                            return Response::error(format!("{device}: {e}"));
                        }
                        Err(e) => (zram::CleanReport::default(), Some(e.to_string())),
                    };
                    cleaned.push(Cleaned {
                        device: device.clone(),
                        report,
                        error,
                    });
                }
                Response {
                    pages_freed: Some(zrams.iter().map(|(_, z)| z.compact()).sum()),
                    cleaned,
                    ..Response::ok()
                }
            }
            Err(e) => Response::error(e),
        },
        // A named device on an allocator that cannot fold refuses; all devices: those
        // that can fold do.
        Request::Fold { device: name } => match initialized(registry, name.as_deref()) {
            Ok(zrams) => {
                let mut folded = Vec::new();
                for (device, z) in zrams {
                    match z.fold() {
                        Ok(report) => folded.push(Folded { device, report }),
                        Err(e) if name.is_some() => {
                            return Response::error(format!("{device}: {e}"));
                        }
                        Err(_) => {}
                    }
                }
                Response {
                    folded,
                    ..Response::ok()
                }
            }
            Err(e) => Response::error(e),
        },
        Request::Reset { device: name } => life_cycle(registry, name, Device::reset),
        Request::Clear { device: name } => life_cycle(registry, name, Device::clear),
        Request::Add => Response {
            added: Some(crate::hotplug::add(registry.exports()).1.name.clone()),
            ..Response::ok()
        },
        Request::Remove { device: name } => {
            match crate::hotplug::remove(registry.exports(), name) {
                Ok(()) => Response::ok(),
                Err(e) => Response::error(e),
            }
        }
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
        Request::Idle { device, .. }
        | Request::Writeback { device, .. }
        | Request::Recompress { device, .. }
        | Request::Policy { device, .. } => match registry.device(device) {
            None => Response::error(format!("no device named {device:?}")),
            Some(d) => post_process(&d, request)
                .unwrap_or_else(|e| Response::error(format!("{device}: {e}"))),
        },
    }
}

/// The initialized devices `compact` and `fold` work on, by name: device `name` (an error
/// when it is not initialized), or, without a name, every initialized one.
fn initialized(
    registry: &Registry,
    name: Option<&str>,
) -> Result<Vec<(String, Arc<zram::Zram>)>, String> {
    match name {
        None => Ok(registry
            .exports()
            .iter()
            .filter_map(|e| e.device.zram().map(|z| (e.name.clone(), z)))
            .collect()),
        Some(name) => match registry.device(name).map(|d| d.zram()) {
            None => Err(format!("no device named {name:?}")),
            Some(None) => Err(format!("{name} is not initialized")),
            Some(Some(z)) => Ok(vec![(name.to_owned(), z)]),
        },
    }
}

/// `idle`, `writeback`, `recompress` and `policy` on device `d`.
fn post_process(d: &Device, request: &Request) -> Result<Response, DeviceError> {
    Ok(match request {
        Request::Idle { age, .. } => Response {
            idle_marked: Some(d.initialized_zram()?.mark_idle(age.parse()?)),
            ..Response::ok()
        },
        Request::Writeback { args, .. } => Response {
            written_back: Some(d.initialized_zram()?.writeback(&args.parse()?)?),
            ..Response::ok()
        },
        Request::Recompress { args, .. } => Response {
            recompressed: Some(d.initialized_zram()?.recompress(&args.parse()?)?),
            ..Response::ok()
        },
        Request::Policy { words, .. } => {
            let ran = d.update_policy(words)?;
            let stats = ran
                .or_else(|| d.zram().map(|z| z.policy_stats()))
                .unwrap_or_default();
            Response {
                policy: Some(PolicyFigures::new(&d.policy(), &stats)),
                ..Response::ok()
            }
        }
        _ => Response::error("not a post-processing request"),
    })
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
    match change(&d) {
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

/// Serves control requests until `shutdown` is set.
pub fn serve(
    listener: UnixListener,
    registry: Arc<Registry>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    endpoint::serve(Listener::Unix(listener), Control { registry }, &shutdown)
}

/// The control endpoint.
#[derive(Debug)]
struct Control {
    registry: Arc<Registry>,
}

/// An answer as sent: one JSON line.
fn line_of(response: &Response) -> Vec<u8> {
    let mut out = serde_json::to_vec(response).unwrap_or_else(|e| {
        format!("{{\"ok\":false,\"error\":\"cannot write the answer: {e}\"}}").into_bytes()
    });
    out.push(b'\n');
    out
}

impl Endpoint for Control {
    const NAME: &'static str = "control";
    const MAX_CONNECTIONS: usize = MAX_CONNECTIONS;
    const ENDS: &'static [&'static [u8]] = &[b"\n"];
    const MAX_REQUEST: usize = MAX_REQUEST;

    fn answer(&self, request: &[u8]) -> Vec<u8> {
        line_of(&match serde_json::from_slice::<Request>(request) {
            Ok(req) => handle(&self.registry, &req),
            Err(e) => Response::error(format!("bad request: {e}")),
        })
    }

    fn unanswered(&self, why: Unanswered) -> Vec<u8> {
        line_of(&Response::error(match why {
            Unanswered::TooLong => format!(
                "request longer than {} KiB (one line of JSON per connection)",
                MAX_REQUEST / 1024
            ),
            Unanswered::TooSlow => format!(
                "request not received within {}s",
                REQUEST_DEADLINE.as_secs()
            ),
            Unanswered::Busy => format!(
                "too many control connections (at most {MAX_CONNECTIONS} at once); try again"
            ),
        }))
    }
}

/// Sends one request to the server at `path` and returns its answer.
pub fn call(path: &Path, request: &Request) -> anyhow::Result<Response> {
    let response: Response =
        serde_json::from_value(call_value(path, request)?).context("parse the server's answer")?;
    Ok(response)
}

/// Sends one request to the control socket at `path` (a server's, or a program's run by
/// `zramd run`) and returns its answer as JSON, failing if it says it failed.
pub fn call_value(path: &Path, request: &Request) -> anyhow::Result<serde_json::Value> {
    let stream = UnixStream::connect(path).with_context(|| {
        format!(
            "connect to the control socket {} (is `zramd serve` running? pass --control PATH)",
            path.display()
        )
    })?;
    // A pass over a whole device (writeback, recompression, a policy round, compaction,
    // folding) answers when it is done, which on a large device can take minutes: wait for
    // it. Everything else answers at once.
    let long = match request {
        Request::Writeback { .. }
        | Request::Recompress { .. }
        | Request::Compact { .. }
        | Request::Fold { .. } => true,
        Request::Policy { words, .. } => words.split_whitespace().any(|w| w == "run"),
        _ => false,
    };
    stream.set_read_timeout((!long).then_some(Duration::from_secs(60)))?;
    let mut out = serde_json::to_vec(request)?;
    out.push(b'\n');
    // A server too busy to take the request answers so at once and closes: the write may
    // then fail, and the answer waiting to be read says why.
    let sent = (&stream).write_all(&out);
    let mut line = String::new();
    let read = BufReader::new(&stream).read_line(&mut line);
    if line.is_empty() {
        sent?;
        read?;
    }
    let response: serde_json::Value =
        serde_json::from_str(&line).context("parse the server's answer")?;
    if response.get("ok") != Some(&serde_json::Value::Bool(true)) {
        bail!(
            "{}",
            response
                .get("error")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("request failed")
        );
    }
    Ok(response)
}
