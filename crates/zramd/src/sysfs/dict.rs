//! Dictionary files (`algorithm_params dict=PATH`): read without waiting on anyone and
//! without holding more than a bounded number of bytes.

use crate::device::DeviceError;

/// The largest dictionary `algorithm_params dict=PATH` takes: 1 MiB. zstd's trainer makes
/// dictionaries of about 110 KiB (`zstd --train`'s default `--maxdict`), so this is ten
/// times what anyone trains, while a device keeps its dictionary (and compression contexts
/// built from it) for life: the kernel's own limit, `INT_MAX`, would let one write make the
/// daemon hold 2 GiB. A larger file is `EINVAL`, as the kernel answers for every dictionary
/// it cannot take (its `comp_params_store` turns even the `EFBIG` of its own size limit
/// into `EINVAL`).
pub const MAX_DICT_BYTES: u64 = 1 << 20;

/// Reads a dictionary file without waiting on anyone and without holding more than
/// [`MAX_DICT_BYTES`]: opened with `O_NONBLOCK` (a FIFO with no writer cannot block the
/// open), then refused unless the opened file is a regular file (`fstat`, so the file
/// checked is the file read), non-empty and at most [`MAX_DICT_BYTES`]. The kernel refuses
/// non-regular files with `EINVAL` too, but blocks first in the open of a FIFO.
pub fn read_dictionary(path: &[u8]) -> Result<Vec<u8>, DeviceError> {
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::OpenOptionsExt as _;

    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let bad = |why: &dyn std::fmt::Display| {
        DeviceError::invalid(
            "algorithm_params",
            format!("dict={}: {why}", path.display()),
        )
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| bad(&e))?;
    let meta = file.metadata().map_err(|e| bad(&e))?;
    if !meta.file_type().is_file() {
        return Err(bad(&"not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_DICT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(&e))?;
    match bytes.len() as u64 {
        0 => Err(bad(&"empty")),
        n if n > MAX_DICT_BYTES => Err(bad(&format!("over {MAX_DICT_BYTES} bytes"))),
        _ => Ok(bytes),
    }
}
