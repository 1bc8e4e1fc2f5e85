//! The zram device engine (compressors, slots, stats) on top of zsmalloc.
