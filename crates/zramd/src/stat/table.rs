//! A table printed as zramctl prints its own (through libsmartcols, output not cut to a
//! terminal's width), found by experiment:
//!
//! - cells are separated by one space; a column is as wide as its widest cell, and at least
//!   as its header, even without the header line; a column whose widest cell is no narrower
//!   than its header but narrower than its width hint takes the hint (zramctl's `DATA`: `0B`
//!   makes it 4 wide, `100K` 5);
//! - numbers are aligned right, text left; the last column is not padded when aligned left
//!   (so a line whose last cell is empty ends with the separator);
//! - raw output: no alignment, and each cell's blanks, backslashes and control characters
//!   written `\xHH`;
//! - a table without rows prints nothing, not even its header.

use std::fmt::Write as _;

/// A column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Col {
    /// Its header.
    pub header: &'static str,
    /// Aligned right (numbers).
    pub right: bool,
    /// Width hint: the width a column at least as wide as its header takes (0: none).
    pub hint: usize,
}

/// How the table is printed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Leave the header line out.
    pub noheadings: bool,
    /// Raw output: no alignment, cells escaped.
    pub raw: bool,
}

/// The text of a table of `cols` and `rows` (each row a cell per column), every line ended
/// with a newline.
pub fn render(cols: &[Col], rows: &[Vec<String>], style: Style) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let headers: Vec<String> = cols.iter().map(|c| c.header.to_owned()).collect();
    let mut lines: Vec<&[String]> = Vec::with_capacity(rows.len() + 1);
    if !style.noheadings {
        lines.push(&headers);
    }
    lines.extend(rows.iter().map(Vec::as_slice));
    let mut out = String::new();
    if style.raw {
        for line in lines {
            let cells: Vec<String> = line.iter().map(|c| escape(c, true)).collect();
            out.push_str(&cells.join(" "));
            out.push('\n');
        }
        return out;
    }
    let safe: Vec<Vec<String>> = lines
        .iter()
        .map(|line| line.iter().map(|c| escape(c, false)).collect())
        .collect();
    // The cells' widths, the header's apart.
    let cells = &safe[safe.len() - rows.len()..];
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, col)| {
            let widest = cells.iter().map(|l| width(&l[i])).max().unwrap_or(0);
            let header = width(col.header);
            if widest < header {
                header
            } else if widest < col.hint && header < col.hint {
                col.hint
            } else {
                widest
            }
        })
        .collect();
    for line in &safe {
        for (i, (cell, col)) in line.iter().zip(cols).enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let pad = widths[i].saturating_sub(width(cell));
            let last = i + 1 == cols.len();
            if col.right {
                out.extend(std::iter::repeat_n(' ', pad));
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if !last {
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        out.push('\n');
    }
    out
}

/// Characters on a terminal (the cells are escaped to printable ones).
fn width(s: &str) -> usize {
    s.chars().count()
}

/// `c` as `\xHH`, a byte at a time.
fn hex(out: &mut String, c: char) {
    let mut buf = [0; 4];
    for b in c.encode_utf8(&mut buf).bytes() {
        let _ = write!(out, "\\x{b:02x}");
    }
}

/// A cell with its control characters (and backslashes, so the escapes read back) as
/// `\xHH`; with `blanks`, spaces too (raw output, whose cells split at spaces).
fn escape(s: &str, blanks: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || c == '\\' || (blanks && c == ' ') {
            hex(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Col, Style, render};

    const fn col(header: &'static str, right: bool, hint: usize) -> Col {
        Col {
            header,
            right,
            hint,
        }
    }

    const fn style(noheadings: bool, raw: bool) -> Style {
        Style { noheadings, raw }
    }

    fn rows(rows: &[&[&str]]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| r.iter().map(|c| (*c).to_owned()).collect())
            .collect()
    }

    #[test]
    fn aligned_like_zramctl() {
        // zramctl's default columns on a fresh 64 MiB device: the lines it printed.
        let cols = [
            col("NAME", false, 0),
            col("ALGORITHM", false, 3),
            col("DISKSIZE", true, 5),
            col("DATA", true, 5),
            col("COMPR", true, 5),
            col("TOTAL", true, 5),
            col("STREAMS", true, 3),
            col("MOUNTPOINT", false, 0),
        ];
        let r = rows(&[&["/dev/zram1", "lz4", "64M", "0B", "0B", "0B", "", ""]]);
        assert_eq!(
            render(&cols, &r, Style::default()),
            "NAME       ALGORITHM DISKSIZE DATA COMPR TOTAL STREAMS MOUNTPOINT\n\
             /dev/zram1 lz4            64M   0B    0B    0B         \n"
        );
        // A cell as wide as the header takes the hint: DATA is 5 wide with 100K.
        let r = rows(&[&["/dev/zram1", "lz4", "64M", "100K", "100K", "100K", "", ""]]);
        assert_eq!(
            render(&cols, &r, Style::default()),
            "NAME       ALGORITHM DISKSIZE  DATA COMPR TOTAL STREAMS MOUNTPOINT\n\
             /dev/zram1 lz4            64M  100K  100K  100K         \n"
        );
        // The header's width counts without the header line; the last column, aligned
        // left, is not padded.
        let cols = [col("ALGORITHM", false, 3), col("NAME", false, 0)];
        assert_eq!(
            render(&cols, &rows(&[&["lz4", "/dev/zram1"]]), style(true, false)),
            "lz4       /dev/zram1\n"
        );
        assert_eq!(render(&cols, &[], Style::default()), "");
    }

    #[test]
    fn raw_cells_are_escaped() {
        let cols = [col("NAME", false, 0), col("EXPORT", false, 0)];
        assert_eq!(
            render(&cols, &rows(&[&["a b\\c\td", ""]]), style(false, true)),
            "NAME EXPORT\na\\x20b\\x5cc\\x09d \n"
        );
        // Aligned output keeps spaces but escapes control characters.
        assert_eq!(
            render(&cols, &rows(&[&["a b\nc", "x"]]), Style::default()),
            "NAME     EXPORT\na b\\x0ac x\n"
        );
    }
}
