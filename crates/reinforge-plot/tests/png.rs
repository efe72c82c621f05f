//! Charts are written as decodable PNGs of the documented size with visible content.

use reinforge_plot::{
    grouped_bar_chart, interval_chart, line_chart, line_chart_with_intervals, IntervalRow,
    IntervalSeries, Series, HEIGHT, WIDTH,
};
use std::path::Path;

/// Decodes the PNG and returns (width, height, number of non-white pixels, number of distinct colours).
fn inspect(path: &Path) -> (u32, u32, usize, usize) {
    let img = image::open(path).expect("decodes as an image").to_rgb8();
    let mut colours = std::collections::HashSet::new();
    let mut ink = 0;
    for p in img.pixels() {
        if p.0 != [255, 255, 255] {
            ink += 1;
        }
        colours.insert(p.0);
    }
    (img.width(), img.height(), ink, colours.len())
}

fn sample_series() -> Vec<Series> {
    (0..3)
        .map(|s| Series {
            name: format!("model {s}"),
            points: (0..8)
                .map(|i| {
                    let k = (1u64 << i) as f64;
                    (k, 1.0 - (0.7 - 0.1 * s as f64).powf(k))
                })
                .collect(),
        })
        .collect()
}

#[test]
fn line_chart_log2_writes_png() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/passk.png");
    line_chart(&path, "pass@k", "k", "pass@k", &sample_series(), true).unwrap();
    let (w, h, ink, colours) = inspect(&path);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    // Axes, text and three lines: a few percent of the canvas, not a blank or fully painted image.
    let total = (w * h) as usize;
    assert!(ink > total / 100 && ink < total / 2, "ink {ink} of {total}");
    // Three series colours plus antialiased text.
    assert!(colours > 10, "only {colours} colours");
}

#[test]
fn line_chart_linear_and_title_text_renders() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.png");
    let b = dir.path().join("b.png");
    let s = sample_series();
    line_chart(&a, "", "", "", &s, false).unwrap();
    line_chart(
        &b,
        "A long title that must render with glyphs",
        "x axis",
        "y axis",
        &s,
        false,
    )
    .unwrap();
    // The embedded font produces glyph pixels: the titled chart has more ink than the untitled one.
    assert!(inspect(&b).2 > inspect(&a).2 + 500);
}

#[test]
fn line_chart_rejects_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    let s = vec![Series {
        name: "x".into(),
        points: vec![(f64::NAN, 1.0)],
    }];
    let e = line_chart(&dir.path().join("e.png"), "t", "x", "y", &s, false).unwrap_err();
    assert!(e.to_string().contains("no finite points"), "{e}");
}

#[test]
fn grouped_bars_write_png() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bars.png");
    let cats: Vec<String> = ["IQM", "mean", "median", "opt. gap"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let groups = vec![
        ("ppo".to_string(), vec![0.5, 0.55, 0.52, 0.4]),
        ("grpo".to_string(), vec![0.6, 0.62, 0.61, 0.3]),
        ("rloo".to_string(), vec![0.58, 0.57, f64::NAN, 0.35]),
    ];
    grouped_bar_chart(&path, "Aggregate metrics", "score", &cats, &groups).unwrap();
    let (w, h, ink, _) = inspect(&path);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    assert!(
        ink > (w * h) as usize / 20,
        "bars should cover a good part of the canvas: {ink}"
    );
    let img = image::open(&path).unwrap().to_rgb8();
    // Each group colour (tableau blue/orange/green) is present as solid bar fill.
    for c in [[31u8, 119, 180], [255, 127, 14], [44, 160, 44]] {
        assert!(
            img.pixels().filter(|p| p.0 == c).count() > 1000,
            "colour {c:?} missing"
        );
    }
}

#[test]
fn grouped_bars_validate_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let cats = vec!["a".to_string(), "b".to_string()];
    let e = grouped_bar_chart(
        &dir.path().join("x.png"),
        "t",
        "y",
        &cats,
        &[("g".into(), vec![1.0])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("1 values for 2 categories"), "{e}");
}

/// The three kinds of chart, written to `$REINFORGE_PLOT_DEMO_DIR` for eyeballing when it is set
/// (a temporary directory otherwise), each a decodable PNG of the documented width, at least the
/// documented height, with drawn content that neither leaves the canvas blank nor floods it
/// (the bars cover about 45%).
#[test]
fn demo_charts_are_valid_pngs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("REINFORGE_PLOT_DEMO_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    line_chart(
        &dir.join("line.png"),
        "pass@k by model",
        "k",
        "pass@k",
        &sample_series(),
        true,
    )
    .unwrap();
    let cats: Vec<String> = ["IQM", "mean", "median", "opt. gap"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let groups = vec![
        ("ppo".to_string(), vec![0.5, 0.55, 0.52, 0.4]),
        ("grpo".to_string(), vec![0.6, 0.62, 0.61, 0.3]),
    ];
    grouped_bar_chart(
        &dir.join("bars.png"),
        "Aggregate metrics",
        "score",
        &cats,
        &groups,
    )
    .unwrap();
    interval_chart(
        &dir.join("forest.png"),
        "Leaderboard",
        "rating",
        &forest_rows(12),
    )
    .unwrap();
    for f in ["line.png", "bars.png", "forest.png"] {
        let (w, h, ink, colours) = inspect(&dir.join(f));
        let total = (w * h) as usize;
        eprintln!("{f}: {w}x{h}, ink {ink} of {total}, {colours} colours");
        assert!(w == WIDTH && h >= HEIGHT, "{f}: {w}x{h}");
        assert!(
            ink > total / 100 && ink < total * 3 / 4,
            "{f}: ink {ink} of {total}"
        );
        // Series or group colours plus antialiased text, not a two-colour drawing.
        assert!(colours > 10, "{f}: only {colours} colours");
    }
}

fn forest_rows(n: usize) -> Vec<IntervalRow> {
    (0..n)
        .map(|i| {
            let v = 1100.0 - 7.0 * i as f64;
            IntervalRow {
                label: format!("model-{i}"),
                value: v,
                lower: v - 20.0,
                upper: v + 15.0,
            }
        })
        .collect()
}

#[test]
fn interval_chart_grows_with_rows() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("s.png");
    let big = dir.path().join("b.png");
    interval_chart(&small, "Leaderboard", "rating", &forest_rows(5)).unwrap();
    interval_chart(&big, "Leaderboard", "rating", &forest_rows(60)).unwrap();
    let (w, h, ink, _) = inspect(&small);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    assert!(ink > 5000);
    let (_, hb, _, _) = inspect(&big);
    assert_eq!(hb, 140 + 24 * 60);
    // The point markers use the red palette entry.
    let img = image::open(&small).unwrap().to_rgb8();
    assert!(img.pixels().filter(|p| p.0 == [214, 39, 40]).count() > 5 * 30);
    assert!(interval_chart(&small, "t", "x", &[]).is_err());
}

#[test]
fn line_chart_with_intervals_draws_bars() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("p.png");
    let bars = dir.path().join("e.png");
    let mk = |half: f64| {
        vec![IntervalSeries {
            name: "pass@k".into(),
            points: (0..6)
                .map(|i| {
                    (
                        (1u64 << i) as f64,
                        0.2 + 0.1 * i as f64,
                        0.2 + 0.1 * i as f64 - half,
                        0.2 + 0.1 * i as f64 + half,
                    )
                })
                .collect(),
        }]
    };
    line_chart_with_intervals(&plain, "t", "k", "p", &mk(0.0), true).unwrap();
    line_chart_with_intervals(&bars, "t", "k", "p", &mk(0.08), true).unwrap();
    assert!(
        inspect(&bars).2 > inspect(&plain).2 + 300,
        "error bars add ink"
    );
}
