//! The report's line plots (scaling and chain-size curves, latency CDFs): PNGs drawn in pure
//! Rust with plotters, with the untar bench's font and colours (without a font: the lines
//! without text).

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use crate::bench::untar::plot::{COLORS, FAMILY, font_available, legend};

/// A named line of points.
pub type Series = (String, Vec<(f64, f64)>);

/// A line chart's texts.
pub struct Chart<'a> {
    /// Caption.
    pub title: &'a str,
    /// The x axis.
    pub x_desc: &'a str,
    /// The y axis.
    pub y_desc: &'a str,
    /// How x values are labelled (e.g. `10^x` where x is a logarithm).
    pub x_label: &'a dyn Fn(&f64) -> String,
}

/// Draws `series` into the PNG `path` (1280x720); returns whether it has text.
pub fn lines(chart: &Chart<'_>, series: &[Series], path: &Path) -> anyhow::Result<bool> {
    let text = font_available();
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 >= x1 {
        (x0, x1) = (x0.min(0.0), x0.max(0.0) + 1.0);
    }
    if y0 >= y1 {
        (y0, y1) = (y0.min(0.0), y0.max(0.0) + 1.0);
    }
    let margin = (y1 - y0) * 0.05;
    let (y0, y1) = (y0 - margin, y1 + margin);
    let err = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let root = BitMapBackend::new(path, (1280, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder
            .caption(chart.title, (FAMILY, 20))
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut c = builder
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    if text {
        c.configure_mesh()
            .x_label_formatter(chart.x_label)
            .x_desc(chart.x_desc)
            .y_desc(chart.y_desc)
            .label_style((FAMILY, 14))
            .draw()
            .map_err(|e| err(&e))?;
    }
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let drawn = c
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?;
        if text {
            drawn
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
    }
    if text {
        legend(&mut c, SeriesLabelPosition::LowerRight).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(text)
}
