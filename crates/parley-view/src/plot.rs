//! Plots as inline SVG, drawn from numbers alone: bar charts (histograms, per-task success)
//! and line charts (pass^k against k). Labels are text nodes, escaped like everything else.

use maud::{Markup, html};

const W: f64 = 360.0;
const H: f64 = 200.0;
const LEFT: f64 = 40.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 28.0;

/// One bar: its label on the x axis (shown when there is room) and its height.
pub struct Bar {
    pub label: String,
    pub value: f64,
    /// What a pointer over the bar shows.
    pub title: String,
}

/// Counts of `values` in `bins` equal bins over `[lo, hi]`; values outside are clamped into
/// the first or last bin, so every value is counted.
pub fn histogram(values: &[f64], bins: usize, lo: f64, hi: f64, unit: &str) -> Vec<Bar> {
    let bins = bins.max(1);
    let width = if hi > lo { (hi - lo) / bins as f64 } else { 1.0 };
    let mut counts = vec![0usize; bins];
    for v in values.iter().filter(|v| v.is_finite()) {
        let i = ((v - lo) / width).floor();
        counts[(i.max(0.0) as usize).min(bins - 1)] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let from = lo + width * i as f64;
            Bar {
                label: short(from),
                value: n as f64,
                title: format!("{}–{}{unit}: {n}", short(from), short(from + width)),
            }
        })
        .collect()
}

/// A number in few characters, for axis labels.
pub fn short(v: f64) -> String {
    if v.abs() >= 10.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.2}") }
}

fn y_axis(max: f64) -> Markup {
    let plot_h = H - TOP - BOTTOM;
    html! {
        line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(H - BOTTOM) {}
        line.axis x1=(LEFT) y1=(H - BOTTOM) x2=(W - RIGHT) y2=(H - BOTTOM) {}
        @for i in 0..=4 {
            @let value = max * f64::from(i) / 4.0;
            @let y = H - BOTTOM - plot_h * f64::from(i) / 4.0;
            text x=(LEFT - 4.0) y=(y + 3.0) text-anchor="end" { (short(value)) }
        }
    }
}

/// A bar chart of `bars`, the y axis from 0 to `max` (or the tallest bar when `max` is None).
pub fn bar_chart(bars: &[Bar], max: Option<f64>, x_label: &str) -> Markup {
    let tallest = bars.iter().map(|b| b.value).fold(0.0, f64::max);
    let max = max.unwrap_or(tallest).max(f64::MIN_POSITIVE);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let slot = plot_w / bars.len().max(1) as f64;
    // Labels every so many bars, so that they never overlap.
    let every = ((bars.len() as f64 * 28.0 / plot_w).ceil() as usize).max(1);
    html! {
        svg viewBox=(format!("0 0 {W} {H}")) role="img" xmlns="http://www.w3.org/2000/svg" {
            (y_axis(max))
            @for (i, bar) in bars.iter().enumerate() {
                @let h = plot_h * (bar.value / max).clamp(0.0, 1.0);
                @let x = LEFT + slot * i as f64;
                rect.bar x=(x + slot * 0.1) y=(H - BOTTOM - h) width=(slot * 0.8) height=(h) {
                    title { (bar.title) }
                }
                @if i % every == 0 {
                    text x=(x + slot / 2.0) y=(H - BOTTOM + 11.0) text-anchor="middle" { (bar.label) }
                }
            }
            text x=(LEFT + plot_w / 2.0) y=(H - 2.0) text-anchor="middle" { (x_label) }
        }
    }
}

/// One line of a line chart: its points (x, y) and its CSS class.
pub struct Series<'a> {
    pub name: &'a str,
    pub class: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// Lines over x from 1 to `x_max`, y in [0, 1].
pub fn line_chart(series: &[Series<'_>], x_max: f64, x_label: &str) -> Markup {
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let span = (x_max - 1.0).max(1.0);
    let at = |(x, y): (f64, f64)| (LEFT + plot_w * (x - 1.0) / span, H - BOTTOM - plot_h * y.clamp(0.0, 1.0));
    html! {
        svg viewBox=(format!("0 0 {W} {H}")) role="img" xmlns="http://www.w3.org/2000/svg" {
            (y_axis(1.0))
            @for k in 1..=(x_max as usize) {
                @let (x, _) = at((k as f64, 0.0));
                text x=(x) y=(H - BOTTOM + 11.0) text-anchor="middle" { (k) }
            }
            @for (n, s) in series.iter().enumerate() {
                @let path = s.points.iter().map(|p| { let (x, y) = at(*p); format!("{x:.1},{y:.1}") }).collect::<Vec<_>>().join(" ");
                polyline class=(s.class) points=(path) {}
                @for p in &s.points {
                    @let (x, y) = at(*p);
                    circle cx=(x) cy=(y) r="3" class=(if n == 0 { "bar" } else { "bar2" }) {
                        title { (s.name) " at k=" (p.0) ": " (format!("{:.3}", p.1)) }
                    }
                }
                @let legend_y = TOP + 12.0 + 12.0 * n as f64;
                line class=(s.class) x1=(W - RIGHT - 70.0) y1=(legend_y - 3.0) x2=(W - RIGHT - 52.0) y2=(legend_y - 3.0) {}
                text x=(W - RIGHT - 48.0) y=(legend_y) { (s.name) }
            }
            text x=(LEFT + plot_w / 2.0) y=(H - 2.0) text-anchor="middle" { (x_label) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bin() {
        let bars = histogram(&[-1.0, 0.0, 0.05, 0.5, 1.0, 7.0], 10, 0.0, 1.0, "");
        assert_eq!(bars.len(), 10);
        assert_eq!(bars.iter().map(|b| b.value).sum::<f64>(), 6.0);
        assert_eq!(bars[0].value, 3.0);
        assert_eq!(bars[9].value, 2.0);
    }

    #[test]
    fn labels_are_escaped_in_the_svg() {
        let bars = vec![Bar { label: "<script>".into(), value: 1.0, title: "\"><img>".into() }];
        let svg = bar_chart(&bars, None, "x").into_string();
        assert!(!svg.contains("<script>") && !svg.contains("<img>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
    }
}
