//! The configurations the locking bench compares, each an ext4 filesystem mounted on a
//! device: one zramd device per locking mode (one in-process server, exported through FUSE,
//! a loop device on each device's `disk` file) and a kernel zram device. Everything made
//! here is undone when [`Sides`] is dropped, also after a failure half-way: filesystems
//! unmounted and loop devices detached first, then the server stopped and the kernel's
//! device reset and removed.

use std::path::{Path, PathBuf};

use anyhow::Context;

use zram::{Algorithm, Locking, Size, ZramConfig};
use zramd::serve::{DeviceSpec, ServeOptions, Server};

use crate::bench::untar::side::Mounted;
use crate::kernel::{KernelZram, unavailable_reason};

/// A mounted configuration.
pub struct Side {
    /// `zramd pool`, …, `kernel`.
    pub name: String,
    /// The locking mode (`None`: the kernel's zram).
    pub locking: Option<Locking>,
    /// The filesystem.
    pub mounted: Mounted,
    /// The device's `compact` attribute.
    compact: PathBuf,
}

impl Side {
    /// Compacts the device (after a run's delete, sync and trim), so that the next run
    /// starts from a settled device rather than beside a compaction of what the trim
    /// freed: zramd's automatic compaction would otherwise run in the background of the
    /// next runs (the kernel compacts only when told). Both sides are compacted alike.
    pub fn compact(&self) -> anyhow::Result<()> {
        std::fs::write(&self.compact, b"1\n")
            .with_context(|| format!("writing {}", self.compact.display()))
    }
}

/// Stops the server when dropped.
struct ServerGuard(Option<Server>);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Some(server) = self.0.take() {
            server.stop();
        }
    }
}

/// Every configuration, mounted. Field order is drop order: the filesystems go first.
pub struct Sides {
    /// The configurations, zramd's modes first.
    pub sides: Vec<Side>,
    server: ServerGuard,
    kernel: Option<KernelZram>,
    /// Why the kernel's zram is missing, if it is.
    pub kernel_skipped: Option<String>,
}

/// zramd's device name for a locking mode.
fn device_name(locking: Locking) -> String {
    format!("locking-{locking}")
}

impl Sides {
    /// Sets up a zramd device of `size` with `algorithm` per mode of `modes` and, unless
    /// `no_kernel` or it is unavailable, a kernel zram device; ext4 on each, under `tmp`.
    pub fn new(
        modes: &[Locking],
        algorithm: Algorithm,
        size: Size,
        no_kernel: bool,
        tmp: &Path,
    ) -> anyhow::Result<Self> {
        let mut me = Self {
            sides: Vec::new(),
            server: ServerGuard(None),
            kernel: None,
            kernel_skipped: None,
        };
        let fuse = tmp.join("fuse");
        std::fs::create_dir_all(&fuse)?;
        let devices = modes
            .iter()
            .map(|&locking| {
                let mut config = ZramConfig {
                    algorithm,
                    ..ZramConfig::default()
                };
                config.pool.locking = locking;
                DeviceSpec {
                    name: device_name(locking),
                    size,
                    config,
                    ..DeviceSpec::default()
                }
            })
            .collect();
        me.server.0 = Some(Server::start(&ServeOptions {
            devices,
            control: Some(tmp.join("control.sock")),
            fuse: Some(fuse.clone()),
            ..ServeOptions::default()
        })?);
        for &locking in modes {
            let dir = fuse.join(device_name(locking));
            let mounted =
                Mounted::new(&dir.join("disk"), true, tmp.join(format!("ext4-{locking}")))?;
            me.sides.push(Side {
                name: format!("zramd {locking}"),
                locking: Some(locking),
                mounted,
                compact: dir.join("compact"),
            });
        }
        if no_kernel {
            me.kernel_skipped = Some("--no-kernel".into());
        } else if let Some(why) = unavailable_reason(algorithm.name(), None) {
            me.kernel_skipped = Some(why);
        } else {
            let dev = me
                .kernel
                .insert(KernelZram::with(algorithm.name(), None, size.bytes())?);
            let mounted = Mounted::new(&dev.dev_path(), false, tmp.join("ext4-kernel"))?;
            me.sides.push(Side {
                name: "kernel".into(),
                locking: None,
                mounted,
                compact: dev.attr("compact"),
            });
        }
        Ok(me)
    }
}
