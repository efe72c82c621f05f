//! PNG charts for reports and leaderboards (plotters with an embedded font: no system fonts needed).
//!
//! Every chart registers DejaVu Sans (from the `dejavu` crate, compiled into the binary) as plotters'
//! `sans-serif` family the first time it is called, so text renders identically on a bare machine.

mod charts;
mod font;
mod intervals;

pub use charts::{grouped_bar_chart, line_chart, Series, HEIGHT, WIDTH};
pub use font::ensure_fonts;
pub use intervals::{interval_chart, line_chart_with_intervals, IntervalRow, IntervalSeries};
