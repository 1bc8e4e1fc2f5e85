//! `zramd stat`'s columns: zramctl's (util-linux 2.38, with the later `COMP-RATIO`), each
//! taken from the same `mm_stat` field and printed the same way, then ours.
//!
//! As zramctl: sizes are human (`1.5M`) unless in bytes; `ZERO-PAGES` is a count;
//! `MIGRATED` (pages_compacted, a count of pages) goes through the size format as zramctl
//! puts it; `STREAMS` is empty (the kernel's `max_comp_streams` is gone since 6.15, and
//! zramctl shows nothing); `MOUNTPOINT` is empty (a served device is not a block device
//! here). `NAME` is the device's name (`zram0`): there is no `/dev` node.

use zramd::human::size;
use zramd::registry::DeviceStat;

use super::table::Col;

/// A column of `zramd stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// The device's name.
    Name,
    /// Its size.
    Disksize,
    /// orig_data_size.
    Data,
    /// compr_data_size.
    Compr,
    /// The compression algorithm.
    Algorithm,
    /// max_comp_streams (gone from the kernel: empty).
    Streams,
    /// same_pages.
    ZeroPages,
    /// mem_used_total.
    Total,
    /// mem_limit.
    MemLimit,
    /// mem_used_max.
    MemUsed,
    /// pages_compacted.
    Migrated,
    /// DATA / COMPR.
    CompRatio,
    /// Where the device is mounted (never known here: empty).
    Mountpoint,
    /// The allocator.
    Allocator,
    /// Bytes compressed as one stream.
    UnitSize,
    /// DATA / TOTAL.
    Ratio,
    /// Where the device is served.
    Export,
}

/// A column's header, width hint, alignment and help.
struct Info {
    column: Column,
    header: &'static str,
    hint: usize,
    right: bool,
    help: &'static str,
}

const fn info(
    column: Column,
    header: &'static str,
    hint: usize,
    right: bool,
    help: &'static str,
) -> Info {
    Info {
        column,
        header,
        hint,
        right,
        help,
    }
}

/// Every column, in `--output-all`'s order: zramctl's, then ours.
const INFOS: [Info; 17] = [
    info(Column::Name, "NAME", 0, false, "device name"),
    info(
        Column::Disksize,
        "DISKSIZE",
        5,
        true,
        "limit on the uncompressed amount of data",
    ),
    info(
        Column::Data,
        "DATA",
        5,
        true,
        "uncompressed size of stored data",
    ),
    info(
        Column::Compr,
        "COMPR",
        5,
        true,
        "compressed size of stored data",
    ),
    info(
        Column::Algorithm,
        "ALGORITHM",
        3,
        false,
        "the selected compression algorithm",
    ),
    info(
        Column::Streams,
        "STREAMS",
        3,
        true,
        "number of concurrent compress operations (empty: the kernel dropped it)",
    ),
    info(
        Column::ZeroPages,
        "ZERO-PAGES",
        3,
        true,
        "same-filled pages, stored without memory",
    ),
    info(
        Column::Total,
        "TOTAL",
        5,
        true,
        "all memory including allocator fragmentation and metadata overhead",
    ),
    info(
        Column::MemLimit,
        "MEM-LIMIT",
        5,
        true,
        "memory limit used to store compressed data",
    ),
    info(
        Column::MemUsed,
        "MEM-USED",
        5,
        true,
        "most memory the device has used to store compressed data",
    ),
    info(
        Column::Migrated,
        "MIGRATED",
        5,
        true,
        "pages freed by compaction (printed as zramctl does)",
    ),
    info(
        Column::CompRatio,
        "COMP-RATIO",
        0,
        true,
        "compression ratio, DATA/COMPR",
    ),
    info(
        Column::Mountpoint,
        "MOUNTPOINT",
        0,
        false,
        "where the device is mounted (empty: not known here)",
    ),
    info(
        Column::Allocator,
        "ALLOCATOR",
        0,
        false,
        "the allocator (zramd)",
    ),
    info(
        Column::UnitSize,
        "UNIT-SIZE",
        0,
        true,
        "bytes compressed as one stream (zramd)",
    ),
    info(
        Column::Ratio,
        "RATIO",
        0,
        true,
        "memory saving, DATA/TOTAL (zramd)",
    ),
    info(
        Column::Export,
        "EXPORT",
        0,
        false,
        "where the device is served (zramd)",
    ),
];

/// zramctl's default columns.
pub const DEFAULT: [Column; 8] = [
    Column::Name,
    Column::Algorithm,
    Column::Disksize,
    Column::Data,
    Column::Compr,
    Column::Total,
    Column::Streams,
    Column::Mountpoint,
];

impl Column {
    fn info(self) -> &'static Info {
        // INFOS is in the enum's order (a test checks).
        &INFOS[self as usize]
    }

    /// Every column, in `--output-all`'s order.
    pub fn all() -> Vec<Column> {
        INFOS.iter().map(|i| i.column).collect()
    }

    /// How the table prints it.
    pub fn col(self) -> Col {
        let i = self.info();
        Col {
            header: i.header,
            right: i.right,
            hint: i.hint,
        }
    }

    /// Its cell for device `d`: sizes in bytes when `bytes`, else as zramctl prints them.
    pub fn cell(self, d: &DeviceStat, bytes: bool) -> String {
        let sized = |n: u64| if bytes { n.to_string() } else { size(n) };
        // An mm_stat field (empty if the server sent too few).
        let field = |i: usize| d.mm_stat_fields.get(i).copied();
        let ratio = |den: Option<u64>| match (field(0), den) {
            (Some(data), Some(den)) if den > 0 => format!("{:.2}", data as f64 / den as f64),
            _ => String::new(),
        };
        let mm = |i: usize| field(i).map(sized).unwrap_or_default();
        match self {
            Self::Name => d.name.clone(),
            Self::Disksize => sized(d.disksize),
            Self::Data => mm(0),
            Self::Compr => mm(1),
            Self::Algorithm => d.algorithm.clone(),
            Self::Streams | Self::Mountpoint => String::new(),
            Self::ZeroPages => field(5).map(|n| n.to_string()).unwrap_or_default(),
            Self::Total => mm(2),
            Self::MemLimit => mm(3),
            Self::MemUsed => mm(4),
            Self::Migrated => mm(6),
            Self::CompRatio => ratio(field(1)),
            Self::Allocator => d.allocator.name().to_owned(),
            Self::UnitSize => sized(d.unit_size),
            Self::Ratio => ratio(field(2)),
            Self::Export => d.export.clone(),
        }
    }
}

/// The columns of `-o LIST`: names separated by commas, in any case (zramctl's).
pub fn parse(list: &str) -> anyhow::Result<Vec<Column>> {
    let names = || INFOS.iter().map(|i| i.header).collect::<Vec<_>>().join(",");
    if list.trim().is_empty() {
        anyhow::bail!("no columns given (-o LIST, from: {})", names());
    }
    list.split(',')
        .map(|name| {
            INFOS
                .iter()
                .find(|i| i.header.eq_ignore_ascii_case(name.trim()))
                .map(|i| i.column)
                .ok_or_else(|| anyhow::anyhow!("unknown column: {name:?} (columns: {})", names()))
        })
        .collect()
}

/// The columns and what each shows, for `--help`.
pub fn help() -> String {
    let mut s = String::from(
        "Columns to show, separated by commas (zramctl's -o; default: NAME,ALGORITHM,DISKSIZE,DATA,COMPR,TOTAL,STREAMS,MOUNTPOINT):",
    );
    for i in &INFOS {
        s.push_str(&format!("\n{:>11}  {}", i.header, i.help));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{Column, INFOS, help, parse};

    #[test]
    fn lists_parse_like_zramctl_and_bad_ones_are_refused() {
        assert_eq!(
            parse("NAME,disksize,Data,COMPR,ALGORITHM").unwrap(),
            [
                Column::Name,
                Column::Disksize,
                Column::Data,
                Column::Compr,
                Column::Algorithm
            ]
        );
        assert_eq!(parse("ZERO-PAGES").unwrap(), [Column::ZeroPages]);
        for bad in ["NOSUCH", "NAME,", ",NAME", "NAME,,DATA", "+DATA"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("unknown column: "), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        for empty in ["", " "] {
            let e = parse(empty).unwrap_err().to_string();
            assert!(e.starts_with("no columns given"), "{e}");
        }
    }

    #[test]
    fn every_column_has_one_entry_and_help() {
        let all = Column::all();
        for (n, i) in INFOS.iter().enumerate() {
            assert_eq!(all.iter().filter(|c| **c == i.column).count(), 1);
            assert_eq!(i.column.col().header, i.header);
            assert!(help().contains(&format!(" {}  ", i.header)), "{}", i.header);
            assert_eq!(all[n], i.column);
            assert_eq!(i.column as usize, n);
        }
    }
}
