//! `--plot FILE.svg`: every phase's latency by percentile, as HdrHistogram's plotter draws it
//! (x: percentile on a `1/(1-p)` log scale up to 99.9999 %; y: microseconds, log scale), written
//! as a small SVG by hand (no plotting crate: a few polylines do not justify one).

use std::fmt::Write as _;

use super::distribution::quantile_points;
use super::progress::Phase;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
/// `log10(1/(1-p))` at the right edge: 99.9999 %.
const X_DECADES: f64 = 6.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];
const X_LABELS: [(&str, f64); 7] = [
    ("0%", 0.0),
    ("90%", 1.0),
    ("99%", 2.0),
    ("99.9%", 3.0),
    ("99.99%", 4.0),
    ("99.999%", 5.0),
    ("99.9999%", 6.0),
];

/// The SVG document.
pub fn svg(title: &str, phases: &[Phase]) -> String {
    let series: Vec<(&str, Vec<(f64, f64)>)> = phases
        .iter()
        .filter(|phase| !phase.latency.is_empty())
        .map(|phase| (phase.name, points(phase)))
        .collect();
    let (low, high) = decades(&series);
    let x = |decade: f64| LEFT + decade / X_DECADES * (WIDTH - LEFT - RIGHT);
    let y = |micros: f64| {
        let span = (high - low).max(1e-9);
        HEIGHT - BOTTOM - (micros.max(1.0).log10() - low) / span * (HEIGHT - TOP - BOTTOM)
    };
    let mut out = String::new();
    let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/><text x="{LEFT}" y="18" font-size="13">{}</text>"#,
        escape(title)
    );
    for (label, decade) in X_LABELS {
        let at = x(decade);
        let _ = writeln!(
            out,
            r##"<line x1="{at:.1}" y1="{TOP}" x2="{at:.1}" y2="{:.1}" stroke="#ddd"/><text x="{at:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 15.0
        );
    }
    let mut decade = low.floor();
    while decade <= high.ceil() {
        let at = y(10f64.powf(decade));
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{at:.1}" x2="{:.1}" y2="{at:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{} us</text>"##,
            WIDTH - RIGHT,
            LEFT - 5.0,
            at + 4.0,
            10f64.powf(decade)
        );
        decade += 1.0;
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 12.0
    );
    for (index, (name, points)) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(decade, micros)| format!("{:.1},{:.1}", x(*decade), y(*micros)))
            .collect();
        let legend_y = TOP + 16.0 * index as f64 + 10.0;
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/><text x="{:.1}" y="{legend_y:.1}" fill="{colour}">{}</text>"#,
            path.join(" "),
            WIDTH - RIGHT + 10.0,
            escape(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// `(log10(1/(1-p)), microseconds)` along the phase's percentile distribution.
fn points(phase: &Phase) -> Vec<(f64, f64)> {
    quantile_points(&phase.latency)
        .into_iter()
        .map(|(value, quantile, _)| {
            let decade = if quantile >= 1.0 {
                X_DECADES
            } else {
                (1.0 / (1.0 - quantile)).log10().min(X_DECADES)
            };
            (decade, value as f64)
        })
        .collect()
}

/// The y axis: whole decades of microseconds around every value.
fn decades(series: &[(&str, Vec<(f64, f64)>)]) -> (f64, f64) {
    let values = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|(_, micros)| micros.max(1.0).log10()));
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(low, high), value| {
        (low.min(value), high.max(value))
    });
    if low > high {
        (0.0, 1.0)
    } else {
        (low.floor(), high.ceil().max(low.floor() + 1.0))
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
