//! Which allocator a pool is: zsmalloc (this crate's reference) or one of the alternatives
//! seed 003 and the lab compare it with. Chosen per device (`allocator` in a config file,
//! the `allocator` attribute before `disksize`, `--allocator` on `serve` and `bench`).

use serde::{Deserialize, Serialize};

/// An object allocator a device may store its compressed pages in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Allocator {
    /// zsmalloc: size classes, zspages of up to `chain_size` pages, compaction (the kernel's).
    #[default]
    Zsmalloc,
    /// afmalloc (seed 003): objects built from power-of-two chunks of page-backed chunk
    /// caches, compacted by moving chunks out of sparse pages.
    Afmalloc,
    /// zbud: at most two objects per page, one from each end (the kernel's zswap allocator
    /// of old); no compaction.
    Zbud,
    /// The system allocator (`malloc`), one allocation per object: a baseline.
    Malloc,
}

impl Allocator {
    /// Every allocator, zsmalloc first.
    pub const ALL: [Allocator; 4] = [
        Allocator::Zsmalloc,
        Allocator::Afmalloc,
        Allocator::Zbud,
        Allocator::Malloc,
    ];

    /// Its name, as settings and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Allocator::Zsmalloc => "zsmalloc",
            Allocator::Afmalloc => "afmalloc",
            Allocator::Zbud => "zbud",
            Allocator::Malloc => "malloc",
        }
    }
}

impl std::fmt::Display for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Allocator {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Allocator::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown allocator {s:?} (zsmalloc, afmalloc, zbud or malloc)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for a in Allocator::ALL {
            assert_eq!(a.name().parse::<Allocator>().unwrap(), a);
            assert_eq!(a.to_string(), a.name());
        }
        assert!("slab".parse::<Allocator>().unwrap_err().contains("slab"));
        assert!("".parse::<Allocator>().is_err());
        assert!(" zbud".parse::<Allocator>().is_err(), "names are exact");
    }
}
