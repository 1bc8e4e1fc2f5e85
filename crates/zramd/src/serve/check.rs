//! What `zramd serve` checks before it makes anything: device names and sizes, the config
//! file's length, and backing files that would destroy an image or the config file.

use std::path::Path;

use anyhow::{Context as _, bail};

use super::{DeviceSpec, ServerSettings};

/// Longest name a device may have: a file name's, since the FUSE tree makes one of it.
pub const MAX_NAME: usize = 255;

/// Longest config file (or zram-generator.conf) read; a longer one is refused unread.
pub const MAX_CONFIG: u64 = 16 << 20;

/// The text of a config file of at most [`MAX_CONFIG`] bytes.
pub fn read_config(path: &Path) -> anyhow::Result<String> {
    let what = || format!("read {}", path.display());
    let file = std::fs::File::open(path).with_context(what)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_CONFIG + 1), &mut text)
        .with_context(what)?;
    if text.len() as u64 > MAX_CONFIG {
        bail!("{}: longer than {} MiB", what(), MAX_CONFIG >> 20);
    }
    Ok(text)
}

/// Do `a` and `b` name one existing file?
pub(super) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Checks every device before any is made: names and sizes, and that no backing file is a
/// device's image (making the device discards its backing file's contents, which would
/// empty the image before it is loaded).
pub fn check_devices(specs: &[DeviceSpec]) -> anyhow::Result<()> {
    for spec in specs {
        spec.check()?;
        let Some(backing) = &spec.config.backing_dev else {
            continue;
        };
        for other in specs {
            if let Some(image) = &other.image
                && same_file(backing, image)
            {
                bail!(
                    "device {}: backing_dev {} is device {}'s image (a backing file's \
                     contents are discarded)",
                    spec.name,
                    backing.display(),
                    other.name
                );
            }
        }
    }
    Ok(())
}

impl DeviceSpec {
    /// Refuses a name a front end could not serve (empty, `.`, `..`, with `/` or a control
    /// character, longer than [`MAX_NAME`] bytes) and a size of 0.
    pub fn check(&self) -> anyhow::Result<()> {
        let name = &self.name;
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.len() > MAX_NAME
            || name.chars().any(|c| c == '/' || c.is_control())
        {
            bail!(
                "device name {name:?} is not a valid name (1 to {MAX_NAME} bytes, not . or .., \
                 no / or control characters)"
            );
        }
        if self.size.bytes() == 0 {
            bail!("device {name}: size must be more than 0");
        }
        Ok(())
    }
}

/// Refuses server limits of 0 that would serve no one: NBD connections and handshakes.
/// (`max_in_flight = 0` still serves, one request at a time: a request larger than the
/// budget proceeds alone.)
pub fn check_settings(settings: &ServerSettings) -> anyhow::Result<()> {
    let nbd = &settings.nbd;
    for (key, value) in [
        ("max_connections", nbd.max_connections),
        ("max_handshakes", nbd.max_handshakes),
    ] {
        if value == 0 {
            bail!("{key} = 0 would serve no one (give at least 1)");
        }
    }
    Ok(())
}
