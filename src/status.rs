//! The status page at `/`: per-ranker charts of the windowed metrics over
//! the last hour, with current values and standard errors. Server-rendered
//! HTML with inline SVG: no scripts, no build chain, refreshes itself.
//!
//! The daemon samples a few headline series into [`History`] as it
//! publishes (every [`SAMPLE_EVERY_MS`]); the page only reads that history.

use crate::accumulate::{Accumulators, Moments};
use crate::config::Config;
use crate::metrics::list::Family;
use crate::window::window_cell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

/// Sampling period of the history.
pub const SAMPLE_EVERY_MS: i64 = 10_000;
/// History kept: one hour.
pub const HISTORY_MS: i64 = 3_600_000;

/// The metrics charted, in page order.
pub const CHARTED: [&str; 4] = ["ndcg", "mrr", "err", "gauc"];

/// One sample of one series: (mean, standard error, lists).
pub type Point = (f64, Option<f64>, i64);

/// Sampled history of the headline series, per dimension values.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The cutoff charted (10 when configured, else the largest).
    pub k: usize,
    /// The window charted (the shortest configured).
    pub window: String,
    /// Dimension label names, for legends.
    pub labels: Vec<String>,
    /// Sample times (ms).
    pub times: VecDeque<i64>,
    /// dims → metric → samples aligned with `times` (None: no lists then).
    pub series: BTreeMap<Vec<String>, BTreeMap<&'static str, VecDeque<Option<Point>>>>,
}

impl History {
    pub fn new(config: &Config) -> Self {
        let cutoffs = config.sorted_cutoffs();
        let k = if cutoffs.contains(&10) { 10 } else { cutoffs.last().copied().unwrap_or(1) };
        let window = config.windows.spans.iter().min_by_key(|s| s.duration).map(|s| s.text.clone()).unwrap_or_default();
        History { k, window, labels: config.dimensions.labels.clone(), ..History::default() }
    }

    /// Samples the accumulators at `now_ms` if a sample is due.
    pub fn sample(&mut self, config: &Config, acc: &Accumulators, now_ms: i64) {
        if self.times.back().is_some_and(|&t| now_ms - t < SAMPLE_EVERY_MS) {
            return;
        }
        let cutoffs = config.sorted_cutoffs();
        let k_index = cutoffs.iter().position(|&c| c == self.k).unwrap_or(0);
        let span_ms = config.windows.spans.iter().find(|s| s.text == self.window).map_or(60_000, |s| s.ms());
        let n = self.times.len();
        self.times.push_back(now_ms);
        for (dims, s) in &acc.series {
            let cell = window_cell(acc, s, now_ms, span_ms);
            let entry = self.series.entry(dims.to_vec()).or_default();
            for metric in CHARTED {
                let m: &Moments = match metric {
                    "ndcg" => cell.family(Family::Ndcg, cutoffs.len(), k_index),
                    "mrr" => cell.family(Family::Mrr, cutoffs.len(), k_index),
                    "err" => cell.family(Family::Err, cutoffs.len(), k_index),
                    _ => cell.gauc(),
                };
                let samples = entry.entry(metric).or_default();
                samples.resize(n, None);
                samples.push_back(m.mean().map(|mean| (mean, m.stderr(), cell.lists)));
            }
        }
        // Series without lists this time get an empty sample.
        for metrics in self.series.values_mut() {
            for samples in metrics.values_mut() {
                samples.resize(n + 1, None);
            }
        }
        while self.times.front().is_some_and(|&t| now_ms - t > HISTORY_MS) {
            self.times.pop_front();
            for metrics in self.series.values_mut() {
                for samples in metrics.values_mut() {
                    samples.pop_front();
                }
            }
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// Renders the page.
pub fn render_page(h: &History, ready: bool) -> String {
    let mut out = String::with_capacity(32 * 1024);
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"10\">\
         <title>rankpulse</title><style>\
         body{{font-family:system-ui,sans-serif;margin:1.5em;color:#222}} h1{{margin:0 0 .2em}}\
         .grid{{display:flex;flex-wrap:wrap;gap:1em}} .chart{{border:1px solid #ddd;padding:.5em}}\
         table{{border-collapse:collapse}} td,th{{padding:.2em .6em;border-bottom:1px solid #eee;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}} .muted{{color:#777}}</style></head><body>\
         <h1>rankpulse</h1><p class=\"muted\">{} · window {} · k = {} · <a href=\"/metrics\">/metrics</a> · \
         <a href=\"/readyz\">/readyz</a></p>",
        if ready { "consuming" } else { "not ready" },
        escape(&h.window),
        h.k
    );
    if h.series.is_empty() {
        out.push_str("<p>No list finalized yet: waiting for impressions and judgments.</p></body></html>");
        return out;
    }
    // Current values.
    out.push_str("<h2>Now</h2><table><tr><th>");
    out.push_str(&escape(&h.labels.join(" / ")));
    for m in CHARTED {
        let _ = write!(
            out,
            "<th>{}</th>",
            if m == "gauc" { "GAUC".to_string() } else { format!("{}@{}", m.to_uppercase(), h.k) }
        );
    }
    out.push_str("<th>lists</th></tr>");
    for (i, (dims, metrics)) in h.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let _ = write!(out, "<tr><td><span style=\"color:{color}\">■</span> {}</td>", escape(&dims.join(" / ")));
        let mut lists = 0;
        for m in CHARTED {
            match metrics.get(m).and_then(|s| s.back().copied().flatten()) {
                Some((mean, se, n)) => {
                    lists = n;
                    let se = se.map_or(String::new(), |se| format!(" ± {se:.4}"));
                    let _ = write!(out, "<td>{mean:.4}<span class=\"muted\">{se}</span></td>");
                }
                None => out.push_str("<td class=\"muted\">–</td>"),
            }
        }
        let _ = write!(out, "<td>{lists}</td></tr>");
    }
    out.push_str("</table><h2>Last hour</h2><div class=\"grid\">");
    for m in CHARTED {
        chart(&mut out, h, m);
    }
    out.push_str("</div></body></html>");
    out
}

fn chart(out: &mut String, h: &History, metric: &str) {
    let (w, ht, pad) = (460.0, 220.0, 36.0);
    let t0 = h.times.front().copied().unwrap_or(0);
    let t1 = h.times.back().copied().unwrap_or(t0 + 1).max(t0 + 1);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for metrics in h.series.values() {
        for (mean, _, _) in metrics.get(metric).into_iter().flatten().flatten() {
            lo = lo.min(*mean);
            hi = hi.max(*mean);
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let margin = ((hi - lo) * 0.1).max(0.01);
    let (lo, hi) = ((lo - margin).max(0.0), (hi + margin).min(1.0));
    let x = |t: i64| pad + (t - t0) as f64 / (t1 - t0) as f64 * (w - 2.0 * pad);
    let y = |v: f64| ht - pad - (v - lo) / (hi - lo).max(1e-9) * (ht - 2.0 * pad);
    let title = if metric == "gauc" { "GAUC".to_string() } else { format!("{}@{}", metric.to_uppercase(), h.k) };
    let _ = write!(
        out,
        "<div class=\"chart\"><svg width=\"{w}\" height=\"{ht}\" role=\"img\" aria-label=\"{title}\">\
         <text x=\"{pad}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{title}</text>\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"#999\"/>\
         <text x=\"2\" y=\"{yt}\" font-size=\"10\">{hi:.3}</text><text x=\"2\" y=\"{yb}\" font-size=\"10\">{lo:.3}</text>\
         <text x=\"{pad}\" y=\"{xl}\" font-size=\"10\">-{mins} min</text><text x=\"{xr}\" y=\"{xl}\" font-size=\"10\">now</text>",
        b = ht - pad,
        r = w - pad,
        yt = pad + 4.0,
        yb = ht - pad,
        xl = ht - pad + 14.0,
        xr = w - pad - 20.0,
        mins = (t1 - t0) / 60_000,
    );
    for (i, metrics) in h.series.values().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let Some(samples) = metrics.get(metric) else { continue };
        let mut path = String::new();
        let mut pen_down = false;
        for (t, s) in h.times.iter().zip(samples) {
            match s {
                Some((mean, _, _)) => {
                    let _ = write!(path, "{}{:.1},{:.1} ", if pen_down { "L" } else { "M" }, x(*t), y(*mean));
                    pen_down = true;
                }
                None => pen_down = false,
            }
        }
        if !path.is_empty() {
            let _ = write!(out, "<path d=\"{path}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\"/>");
        }
    }
    out.push_str("</svg></div>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::list::ListScore;
    use std::sync::Arc;

    #[test]
    fn samples_and_renders() {
        let config = Config::default();
        let mut acc = Accumulators::new(config.metrics.cutoffs.len(), config.windows.bucket.ms());
        let dims: Arc<[String]> = vec!["control".to_string(), "us".to_string()].into();
        let mut s = ListScore::new(config.metrics.cutoffs.len());
        s.values.iter_mut().for_each(|v| *v = Some(0.5));
        s.gauc = Some((0.75, 3));
        let mut h = History::new(&config);
        assert_eq!((h.k, h.window.as_str()), (10, "1m"));
        assert!(render_page(&h, false).contains("No list finalized yet"));
        for t in 0..5 {
            acc.fold(&dims, 1_000_000 + t * 10_000, &s);
            h.sample(&config, &acc, 1_000_000 + t * 10_000);
            h.sample(&config, &acc, 1_000_000 + t * 10_000 + 1); // not due
        }
        assert_eq!(h.times.len(), 5);
        let page = render_page(&h, true);
        assert!(page.contains("control / us"));
        assert!(page.contains("0.5000"));
        assert!(page.contains("0.7500"));
        assert!(page.matches("<svg").count() == 4);
        assert!(page.contains("<path d=\"M"));
    }
}
