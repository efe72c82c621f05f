//! Charts with uncertainty: a forest plot of point estimates with intervals (leaderboards, aggregate
//! metrics) and line charts with per-point error bars (pass@k curves, performance profiles).

use crate::charts::{colour, draw_frame, fmt_num, open_png, padded_range, Frame, HEIGHT};
use anyhow::{bail, Result};
use plotters::prelude::*;
use std::path::Path;

/// One row of a forest plot: label, point estimate, lower and upper bound.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalRow {
    /// Row label (e.g. model name).
    pub label: String,
    /// Point estimate.
    pub value: f64,
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
}

/// A named line whose points carry an interval: `(x, y, lower, upper)`.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalSeries {
    /// Legend entry.
    pub name: String,
    /// Points in drawing order.
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// Draws a horizontal forest plot: one row per entry, top to bottom in the given order, a dot at the
/// value and a bar from lower to upper. Long lists are drawn on a taller canvas (24 px per row).
pub fn interval_chart(path: &Path, title: &str, x_label: &str, rows: &[IntervalRow]) -> Result<()> {
    if rows.is_empty() {
        bail!("interval chart {}: no rows", path.display());
    }
    let Some((x0, x1)) = padded_range(rows.iter().flat_map(|r| [r.value, r.lower, r.upper])) else {
        bail!("interval chart {}: no finite values", path.display());
    };
    let n = rows.len();
    let height = HEIGHT.max(140 + 24 * n as u32);
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    let root = crate::charts::open_png_sized(path, height)?;
    let longest = rows
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(1) as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 26))
        .margin(18)
        .x_label_area_size(52)
        .y_label_area_size((longest * 9 + 20).clamp(60, 360))
        .build_cartesian_2d(x0..x1, -0.5..(n as f64 - 0.5))
        .map_err(|e| err(&e))?;
    let label_of = |v: &f64| {
        let r = v.round();
        if (v - r).abs() < 1e-9 && r >= 0.0 && (r as usize) < n {
            rows[n - 1 - r as usize].label.clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(4 * n + 1)
        .y_label_formatter(&label_of)
        .x_label_formatter(&|v| fmt_num(*v))
        .x_desc(x_label)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 19))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| err(&e))?;
    let c = colour(0);
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let y = (n - 1 - i) as f64;
            PathElement::new(vec![(r.lower, y), (r.upper, y)], c.stroke_width(3))
        }))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(
            rows.iter()
                .enumerate()
                .map(|(i, r)| Circle::new((r.value, (n - 1 - i) as f64), 5, colour(3).filled())),
        )
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Line chart whose points carry vertical error bars (`lower..upper`), with legend; see
/// [`crate::line_chart`] for `log2_x`.
pub fn line_chart_with_intervals(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[IntervalSeries],
    log2_x: bool,
) -> Result<()> {
    let tx = |x: f64| if log2_x { x.log2() } else { x };
    let pts: Vec<Vec<(f64, f64, f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite() && (!log2_x || p.0 > 0.0))
                .map(|&(x, y, l, u)| (tx(x), y, l, u))
                .collect()
        })
        .collect();
    let Some((x0, x1)) = padded_range(pts.iter().flatten().map(|p| p.0)) else {
        bail!("line chart {}: no finite points to draw", path.display());
    };
    let (y0, y1) =
        padded_range(pts.iter().flatten().flat_map(|p| [p.1, p.2, p.3])).expect("non-empty");
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
    let cap = (x1 - x0) * 0.006;
    for (i, (s, p)) in series.iter().zip(&pts).enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(
                p.iter().map(|q| (q.0, q.1)),
                c.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        chart
            .draw_series(
                p.iter()
                    .filter(|q| q.2.is_finite() && q.3.is_finite())
                    .flat_map(|q| {
                        [
                            PathElement::new(vec![(q.0, q.2), (q.0, q.3)], c.stroke_width(1)),
                            PathElement::new(
                                vec![(q.0 - cap, q.2), (q.0 + cap, q.2)],
                                c.stroke_width(1),
                            ),
                            PathElement::new(
                                vec![(q.0 - cap, q.3), (q.0 + cap, q.3)],
                                c.stroke_width(1),
                            ),
                        ]
                    }),
            )
            .map_err(|e| err(&e))?;
        chart
            .draw_series(p.iter().map(|q| Circle::new((q.0, q.1), 4, c.filled())))
            .map_err(|e| err(&e))?;
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
