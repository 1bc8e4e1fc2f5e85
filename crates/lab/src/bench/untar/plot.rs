//! The untar bench's plot: seed 003's overhead ratio (%) after every step, across the
//! cycles (x: the steps, in cycles from the first untar), one line per side and allocator.
//! A PNG drawn in pure Rust (plotters' bitmap backend); its text is drawn with a TrueType
//! font loaded at run time (`ZRAMD_LAB_FONT`, else DejaVu Sans where Debian's
//! `fonts-dejavu-core` puts it). Without a font the plot has its lines and no text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::anyhow;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::figures::Row;

/// The family the font is registered under.
pub const FAMILY: &str = "sans-serif";

/// Where to look for the font, in order.
fn font_candidates() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::env::var_os("ZRAMD_LAB_FONT")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    paths.push(PathBuf::from(
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    ));
    paths
}

/// Loads and registers the font once; whether text can be drawn.
pub fn font_available() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        font_candidates().iter().any(|p| {
            let Ok(bytes) = std::fs::read(p) else {
                return false;
            };
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Vec::leak(bytes);
            plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// The lines' colours, in order.
pub const COLORS: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// The series of `rows`, in order of first appearance: name and (x, overhead ratio) points.
pub fn series(rows: &[Row]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows {
        let name = r.series();
        let point = (r.x(), r.overhead_ratio);
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, points)) => points.push(point),
            None => out.push((name, vec![point])),
        }
    }
    out
}

/// Draws the plot of `rows` into the PNG `path`, `size` pixels; returns whether it has text
/// (a font was found).
pub fn draw(rows: &[Row], path: &Path, size: (u32, u32)) -> anyhow::Result<bool> {
    let text = font_available();
    let series = series(rows);
    let cycles = rows.iter().map(|r| r.cycle).max().unwrap_or(1).max(1);
    let ys = rows.iter().map(|r| r.overhead_ratio);
    let y_max = ys.clone().fold(1.0f64, f64::max) * 1.1;
    let y_min = ys.fold(0.0f64, f64::min) * 1.1;
    let err = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());

    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder
            .caption(
                "untar + rm: overhead (mem_used - compr) / compr after each step",
                (FAMILY, 20),
            )
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut chart = builder
        .build_cartesian_2d(0f64..cycles as f64, y_min..y_max)
        .map_err(|e| err(&e))?;
    if text {
        let label = |x: &f64| {
            let c = x.round() as usize;
            if c < cycles {
                format!("#{}", c + 1)
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_labels(cycles + 1)
            .x_label_formatter(&label)
            .y_label_formatter(&|y| format!("{y:.0}%"))
            .x_desc("cycle (untar, then each rm)")
            .y_desc("overhead ratio")
            .label_style((FAMILY, 14))
            .draw()
            .map_err(|e| err(&e))?;
    }
    for (i, (name, points)) in series.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let drawn = chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?;
        if text {
            drawn
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
    }
    if text {
        legend(&mut chart, SeriesLabelPosition::MiddleRight).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(text)
}

/// A chart of the lab's plots: f64 on both axes, drawn into a PNG.
pub type Plotted<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws the legend of `chart`'s labelled series at `at`, in the registered font.
pub fn legend<'a, 'b: 'a>(
    chart: &mut Plotted<'a, 'b>,
    at: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(at)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
