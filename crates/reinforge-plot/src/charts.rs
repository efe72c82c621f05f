//! Line and grouped-bar charts rendered to PNG with plotters' bitmap backend.

use crate::font::ensure_fonts;
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Width of every chart in pixels.
pub const WIDTH: u32 = 1000;
/// Height of every chart in pixels.
pub const HEIGHT: u32 = 620;

/// One named line of `(x, y)` points. Non-finite points are skipped when drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// Tableau-10 palette: ten colours that stay distinguishable, also in greyscale print.
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Colour of the `i`-th series.
pub(crate) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `[lo, hi]` of the finite values, padded by 5 % (or by 1 when the range is degenerate).
pub(crate) fn padded_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return None;
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        0.05 * span
    } else {
        1.0f64.max(lo.abs() * 0.05)
    };
    Some((lo - pad, hi + pad))
}

/// Opens a white PNG drawing area of the standard size at `path`.
pub(crate) fn open_png(path: &Path) -> Result<DrawingArea<BitMapBackend<'_>, Shift>> {
    open_png_sized(path, HEIGHT)
}

/// Opens a white PNG drawing area of standard width and the given height at `path`.
pub(crate) fn open_png_sized(
    path: &Path,
    height: u32,
) -> Result<DrawingArea<BitMapBackend<'_>, Shift>> {
    ensure_fonts();
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating directory {}", dir.display()))?;
        }
    }
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))?;
    Ok(root)
}

/// Formats an axis value compactly (integers without decimals, otherwise up to 3 significant decimals).
pub(crate) fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 * v.abs().max(1.0) {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Draws a multi-series line chart with markers and a legend, and writes it as PNG to `path`.
///
/// With `log2_x`, x values are plotted on a base-2 logarithmic axis (points with x <= 0 are skipped)
/// and ticks are labelled with the original values (1, 2, 4, ...), which is how pass@k curves are read.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log2_x: bool,
) -> Result<()> {
    let tx = |x: f64| if log2_x { x.log2() } else { x };
    let pts: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log2_x || *x > 0.0))
                .map(|&(x, y)| (tx(x), y))
                .collect()
        })
        .collect();
    let Some((x0, x1)) = padded_range(pts.iter().flatten().map(|p| p.0)) else {
        bail!("line chart {}: no finite points to draw", path.display());
    };
    let (y0, y1) = padded_range(pts.iter().flatten().map(|p| p.1)).expect("non-empty");
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());

    let root = open_png(path)?;
    let frame = Frame {
        title,
        x_label,
        y_label,
        x: (x0, x1),
        y: (y0, y1),
        log2_x,
    };
    let mut chart = draw_frame(&root, &frame, path)?;

    for (i, (s, p)) in series.iter().zip(&pts).enumerate() {
        let c = colour(i);
        let shape = i % 4;
        chart
            .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                EmptyElement::at((x + 12, y))
                    + PathElement::new(vec![(-12, 0), (12, 0)], c.stroke_width(2))
                    + marker_elem(shape, c)
            });
        draw_markers(&mut chart, p, shape, c).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A legend marker of one of four shapes (circle, triangle, square, diamond) centred on the origin.
fn marker_elem<DB: DrawingBackend>(
    shape: usize,
    c: RGBColor,
) -> DynElement<'static, DB, (i32, i32)> {
    let st = c.filled();
    match shape {
        0 => Circle::new((0, 0), 5, st).into_dyn(),
        1 => Polygon::new(vec![(0, -6), (6, 5), (-6, 5)], st).into_dyn(),
        2 => Rectangle::new([(-5, -5), (5, 5)], st).into_dyn(),
        _ => Polygon::new(vec![(0, -6), (6, 0), (0, 6), (-6, 0)], st).into_dyn(),
    }
}

/// Axis titles and ranges of an x-y chart.
pub(crate) struct Frame<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x: (f64, f64),
    pub y: (f64, f64),
    /// x values are log2 of the data: ticks are labelled 1, 2, 4, ... and only at powers of two.
    pub log2_x: bool,
}

/// Builds the chart area with the house style (caption, margins, light grid, DejaVu labels)
/// and draws its mesh; shared by every x-y chart so they look alike.
pub(crate) fn draw_frame<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    frame: &Frame,
    path: &Path,
) -> Result<Chart2d<'a, 'b>> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    let mut chart = ChartBuilder::on(root)
        .caption(frame.title, ("sans-serif", 26))
        .margin(18)
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d(frame.x.0..frame.x.1, frame.y.0..frame.y.1)
        .map_err(|e| err(&e))?;
    let log2_x = frame.log2_x;
    let x_fmt = move |v: &f64| {
        if !log2_x {
            fmt_num(*v)
        } else if (v - v.round()).abs() < 1e-9 {
            fmt_num(2f64.powf(v.round()))
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc(frame.x_label)
        .y_desc(frame.y_label)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| fmt_num(*v))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 19))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| err(&e))?;
    Ok(chart)
}

pub(crate) type Chart2d<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draws one marker per point.
fn draw_markers(
    chart: &mut Chart2d<'_, '_>,
    pts: &[(f64, f64)],
    shape: usize,
    c: RGBColor,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>> {
    chart.draw_series(
        pts.iter()
            .map(move |&p| EmptyElement::at(p) + marker_elem(shape, c)),
    )?;
    Ok(())
}

/// Draws a grouped bar chart: for each category one bar per group, side by side, with a legend of
/// groups, and writes it as PNG to `path`. `groups[j].1[i]` is group `j`'s value in category `i`.
/// Non-finite values are left out (no bar).
pub fn grouped_bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    groups: &[(String, Vec<f64>)],
) -> Result<()> {
    if categories.is_empty() || groups.is_empty() {
        bail!(
            "bar chart {}: needs at least one category and one group",
            path.display()
        );
    }
    for (name, vals) in groups {
        if vals.len() != categories.len() {
            bail!(
                "bar chart {}: group {name:?} has {} values for {} categories",
                path.display(),
                vals.len(),
                categories.len()
            );
        }
    }
    let all = groups.iter().flat_map(|g| g.1.iter().copied()).chain([0.0]);
    let Some((mut y0, mut y1)) = padded_range(all) else {
        bail!("bar chart {}: no finite values", path.display());
    };
    // Bars grow from zero: do not pad below zero when all values are non-negative (and vice versa).
    if groups
        .iter()
        .flat_map(|g| &g.1)
        .all(|v| !v.is_finite() || *v >= 0.0)
    {
        y0 = 0.0;
    }
    if groups
        .iter()
        .flat_map(|g| &g.1)
        .all(|v| !v.is_finite() || *v <= 0.0)
    {
        y1 = 0.0;
    }
    let n = categories.len() as f64;
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    let root = open_png(path)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 26))
        .margin(18)
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d(-0.5..n - 0.5, y0..y1)
        .map_err(|e| err(&e))?;
    let cat_fmt = |v: &f64| {
        let r = v.round();
        if (v - r).abs() < 1e-9 && r >= 0.0 && (r as usize) < categories.len() {
            categories[r as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(4 * categories.len() + 1)
        .x_label_formatter(&cat_fmt)
        .y_desc(y_label)
        .y_label_formatter(&|v| fmt_num(*v))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 19))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| err(&e))?;
    let g = groups.len() as f64;
    let slot = 0.8 / g;
    for (j, (name, vals)) in groups.iter().enumerate() {
        let c = colour(j);
        chart
            .draw_series(
                vals.iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(i, &v)| {
                        let left = i as f64 - 0.4 + j as f64 * slot;
                        Rectangle::new(
                            [(left + 0.05 * slot, 0.0), (left + 0.95 * slot, v)],
                            c.filled(),
                        )
                    }),
            )
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
