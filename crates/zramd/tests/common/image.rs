//! Disk images of real data, not random bytes: this test binary and the system's shared
//! libraries and license texts, with runs of zeroes of varying length between them.

use std::path::{Path, PathBuf};

/// Writes an image of `len` bytes of real data to `path` and returns its bytes.
pub fn real_image(path: &Path, len: usize) -> Vec<u8> {
    let mut sources: Vec<PathBuf> = vec![std::env::current_exe().expect("exe")];
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/share/common-licenses",
    ] {
        if let Ok(rd) = std::fs::read_dir(d) {
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            sources.extend(files.into_iter().take(40));
        }
    }
    let mut img = Vec::with_capacity(len);
    let mut i = 0;
    while img.len() < len {
        let data = std::fs::read(&sources[i % sources.len()]).unwrap_or_default();
        let take = data.len().min(len - img.len()).min(3 << 20);
        img.extend_from_slice(&data[..take]);
        // Zero runs of varying length, some page-aligned and some not.
        let zeros = ((i * 37_000) % 300_000).min(len - img.len());
        img.resize(img.len() + zeros, 0);
        i += 1;
    }
    std::fs::write(path, &img).expect("write image");
    img
}
