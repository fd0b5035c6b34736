//! The status page at `/`: first the decision (every arm against the
//! baseline on `compare.primary`, anytime-valid, with its confidence
//! sequence over the last hour), then the windowed comparisons of every
//! charted metric (descriptive, never coloured: a window read again and
//! again is no test), then per-arm charts of the windowed metrics with the
//! breakdown by the other labels as a table. Only what is valid however
//! often it is looked at gets a colour.
//! Server-rendered HTML with inline SVG: no scripts, no build chain,
//! refreshes itself.
//!
//! The daemon samples a few headline series into [`History`] as it
//! publishes (every [`SAMPLE_EVERY_MS`]); the page only reads that history.

use crate::config::Config;
use rankpulse_core::accumulate::{Accumulators, Cell, Interleaving, Moments};
use rankpulse_core::compare::{Comparison, interleaving_delta, welch};
use rankpulse_core::debias::{Propensities, Weighting};
use rankpulse_core::metrics::list::Family;
use rankpulse_core::sequential::{self, Sequential};
use rankpulse_core::window::{window_cell, window_cells_by};
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

/// One sample of a confidence sequence: (lower, difference, upper).
pub type Bounds = (f64, f64, f64);

/// One arm against the baseline on one charted metric, as last sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmComparison {
    pub arm: String,
    pub metric: &'static str,
    pub comparison: Comparison,
    /// Lists of the arm and of the baseline in the window.
    pub lists: (i64, i64),
}

/// One arm against the baseline on the primary metric, since their first
/// lists, sessions as the unit: the decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub arm: String,
    pub test: Sequential,
    /// Sessions of the arm and of the baseline.
    pub sessions: (f64, f64),
}

/// Sampled history of the headline series.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The cutoff charted (10 when configured, else the largest).
    pub k: usize,
    /// The window charted (the shortest configured).
    pub window: String,
    /// The window compared (the longest configured: the most lists).
    pub compare_window: String,
    /// Dimension label names, for legends.
    pub labels: Vec<String>,
    /// The arm label (`[compare]`) and the baseline arm, when comparing.
    pub arm: Option<(String, String)>,
    /// Significance level of the colours.
    pub alpha: f64,
    /// Sample times (ms).
    pub times: VecDeque<i64>,
    /// Chart lines: one per arm (merged over the other labels) when
    /// comparing, else one per dimension values → metric → samples aligned
    /// with `times` (None: no lists then).
    pub series: BTreeMap<Vec<String>, BTreeMap<&'static str, VecDeque<Option<Point>>>>,
    /// The breakdown: latest values per dimension values.
    pub now: BTreeMap<Vec<String>, BTreeMap<&'static str, Point>>,
    /// Latest comparisons, arm by arm in CHARTED order.
    pub comparisons: Vec<ArmComparison>,
    /// Latest interleaving outcomes over the compared window, per series
    /// that has any, with the always-valid p-value since start.
    pub interleaving: Vec<(Vec<String>, Interleaving, Option<f64>)>,
    /// `compare.primary` as (family, cutoff index, title), when set.
    pub primary: Option<(Family, usize, String)>,
    /// Latest decisions, arm by arm.
    pub decisions: Vec<Decision>,
    /// Each arm's confidence sequence (lower, difference, upper), aligned
    /// with `times`.
    pub sequences: BTreeMap<String, VecDeque<Option<Bounds>>>,
    /// Position-debiased clicks, when `debias.max_rank` is set.
    pub debiased: Option<Debiased>,
}

/// Clicks in the top k per list, as shown and weighted by 1/propensity of
/// their ranks (IPS), per chart line over the charted window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Debiased {
    /// The k: the charted cutoff, at most `debias.max_rank`.
    pub k: usize,
    /// The propensities in use, rank 1 first (NaN: none yet).
    pub propensities: Vec<f64>,
    /// Whether they were configured (else estimated), and the randomized
    /// lists they were estimated from.
    pub configured: bool,
    pub randomized_lists: u64,
    /// Per chart line: (clicks, IPS clicks and its standard error).
    pub lines: Vec<(Vec<String>, Option<f64>, Option<Estimate>)>,
}

/// A mean and its standard error, when there is one.
pub type Estimate = (f64, Option<f64>);

/// The debiased clicks of each chart line (see [`Debiased`]).
fn debiased(config: &Config, acc: &Accumulators, lines: &BTreeMap<Vec<String>, Cell>, k: usize) -> Debiased {
    let d = &config.debias;
    let counts = acc.randomized_positions(d.max_rank);
    let propensities = Propensities::in_use(&d.propensities, &counts);
    let k = k.min(d.max_rank);
    let clip = (d.min_propensity > 0.0).then_some(d.min_propensity);
    let ips = propensities.weighting(clip);
    let lines = lines
        .iter()
        .filter_map(|(key, cell)| {
            let clicks = &cell.clicks.as_ref()?.moments;
            let raw = clicks.clicks_at(k, Weighting::Unweighted).map(|(mean, _)| mean);
            Some((key.clone(), raw, clicks.clicks_at(k, ips)))
        })
        .collect();
    Debiased {
        k,
        configured: !d.propensities.is_empty(),
        randomized_lists: counts.lists.first().copied().unwrap_or(0),
        propensities: propensities.theta.clone(),
        lines,
    }
}

fn charted<'c>(cell: &'c Cell, metric: &str, cutoffs: usize, k_index: usize) -> &'c Moments {
    match metric {
        "ndcg" => cell.family(Family::Ndcg, cutoffs, k_index),
        "mrr" => cell.family(Family::Mrr, cutoffs, k_index),
        "err" => cell.family(Family::Err, cutoffs, k_index),
        _ => cell.gauc(),
    }
}

fn point(m: &Moments, lists: i64) -> Option<Point> {
    m.mean().map(|mean| (mean, m.stderr(), lists))
}

impl History {
    pub fn new(config: &Config) -> Self {
        let cutoffs = config.sorted_cutoffs();
        let k = if cutoffs.contains(&10) { 10 } else { cutoffs.last().copied().unwrap_or(1) };
        let by_length = |longest: bool| {
            let spans = config.windows.spans.iter();
            let s = if longest { spans.max_by_key(|s| s.duration) } else { spans.min_by_key(|s| s.duration) };
            s.map(|s| s.text.clone()).unwrap_or_default()
        };
        let labels = config.dimensions.labels.clone();
        let arm = config.compare.arm_index(&labels).map(|i| (labels[i].clone(), config.compare.baseline.clone()));
        let primary = config.primary_metric().map(|(family, i)| {
            let title = match family {
                Family::Ndcg => format!("nDCG@{}", cutoffs[i]),
                f => format!("{}@{}", f.name().to_uppercase(), cutoffs[i]),
            };
            (family, i, title)
        });
        History {
            primary,
            k,
            window: by_length(false),
            compare_window: by_length(true),
            labels,
            arm,
            alpha: config.compare.alpha,
            ..History::default()
        }
    }

    /// Samples the accumulators at `now_ms` if a sample is due.
    pub fn sample(&mut self, config: &Config, acc: &Accumulators, now_ms: i64) {
        if self.times.back().is_some_and(|&t| now_ms - t < SAMPLE_EVERY_MS) {
            return;
        }
        let cutoffs = config.sorted_cutoffs();
        let k_index = cutoffs.iter().position(|&c| c == self.k).unwrap_or(0);
        let span_of = |text: &str| config.windows.spans.iter().find(|s| s.text == text).map_or(60_000, |s| s.ms());
        let span_ms = span_of(&self.window);
        let n = self.times.len();
        self.times.push_back(now_ms);
        self.now.clear();
        let arm_index = config.compare.arm_index(&config.dimensions.labels);
        for (dims, s) in &acc.series {
            let cell = window_cell(acc, s, now_ms, span_ms);
            let now = self.now.entry(dims.to_vec()).or_default();
            for metric in CHARTED {
                if let Some(p) = point(charted(&cell, metric, cutoffs.len(), k_index), cell.lists) {
                    now.insert(metric, p);
                }
            }
        }
        let lines: BTreeMap<Vec<String>, Cell> = match arm_index {
            Some(i) => window_cells_by(acc, i, now_ms, span_ms).into_iter().map(|(arm, c)| (vec![arm], c)).collect(),
            None => acc.series.iter().map(|(d, s)| (d.to_vec(), window_cell(acc, s, now_ms, span_ms))).collect(),
        };
        for (key, cell) in &lines {
            let entry = self.series.entry(key.clone()).or_default();
            for metric in CHARTED {
                let samples = entry.entry(metric).or_default();
                samples.resize(n, None);
                samples.push_back(point(charted(cell, metric, cutoffs.len(), k_index), cell.lists));
            }
        }
        // Series without lists this time get an empty sample.
        for metrics in self.series.values_mut() {
            for samples in metrics.values_mut() {
                samples.resize(n + 1, None);
            }
        }
        self.debiased = (config.debias.max_rank > 0).then(|| debiased(config, acc, &lines, self.k));
        self.decisions.clear();
        if let (Some(i), Some((_, baseline)), Some((family, k_index, _))) = (arm_index, &self.arm, &self.primary) {
            let arms = sequential::arms(acc, i, *family, *k_index);
            let clustered = |arm: &str| arms.get(arm).and_then(|(m, c)| sequential::clustered_mean(m, c));
            if let Some(base) = clustered(baseline) {
                for arm in arms.keys().filter(|a| config.compare.compares(a)) {
                    let Some(candidate) = clustered(arm) else { continue };
                    let c = &config.compare;
                    if let Some(test) = sequential::mixture(&candidate, &base, c.mixture_sd, c.alpha) {
                        let sessions = (candidate.sessions, base.sessions);
                        self.decisions.push(Decision { arm: arm.clone(), test, sessions });
                    }
                }
            }
        }
        for d in &self.decisions {
            let samples = self.sequences.entry(d.arm.clone()).or_default();
            samples.resize(n, None);
            samples.push_back(Some((d.test.lower, d.test.difference, d.test.upper)));
        }
        for samples in self.sequences.values_mut() {
            samples.resize(n + 1, None);
        }
        while self.times.front().is_some_and(|&t| now_ms - t > HISTORY_MS) {
            self.times.pop_front();
            for metrics in self.series.values_mut() {
                for samples in metrics.values_mut() {
                    samples.pop_front();
                }
            }
            for samples in self.sequences.values_mut() {
                samples.pop_front();
            }
        }
        self.interleaving.clear();
        let compare_ms = span_of(&self.compare_window);
        for (dims, s) in &acc.series {
            let outcomes = window_cell(acc, s, now_ms, compare_ms).interleaving;
            if outcomes.lists() > 0 {
                let total = s.total().interleaving;
                let p = match (u64::try_from(total.a_wins), u64::try_from(total.b_wins)) {
                    (Ok(w), Ok(l)) => sequential::sign_mixture(w, l, config.compare.interleaving_effect).map(|x| x.0),
                    _ => None,
                };
                self.interleaving.push((dims.to_vec(), outcomes, p));
            }
        }
        self.comparisons.clear();
        if let (Some(i), Some((_, baseline))) = (arm_index, &self.arm) {
            let arms = window_cells_by(acc, i, now_ms, span_of(&self.compare_window));
            if let Some(base) = arms.get(baseline) {
                for (arm, cell) in arms.iter().filter(|(a, _)| config.compare.compares(a)) {
                    for metric in CHARTED {
                        let (c, b) = (
                            charted(cell, metric, cutoffs.len(), k_index),
                            charted(base, metric, cutoffs.len(), k_index),
                        );
                        if let Some(comparison) = welch(c, b) {
                            self.comparisons.push(ArmComparison {
                                arm: arm.clone(),
                                metric,
                                comparison,
                                // The lists in the test: randomized lists (and
                                // skipped ones) are in `cell.lists`, not here.
                                lists: (c.count, b.count),
                            });
                        }
                    }
                }
            }
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn title(metric: &str, k: usize) -> String {
    match metric {
        "gauc" => "GAUC".to_string(),
        "ndcg" => format!("nDCG@{k}"),
        m => format!("{}@{k}", m.to_uppercase()),
    }
}

/// "p < 0.001" or "p = 0.042", as HTML.
fn p_text(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.001 => "p &lt; 0.001".to_string(),
        Some(p) => format!("p = {p:.3}"),
        None => "no variance".to_string(),
    }
}

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
         th:first-child,td:first-child{{text-align:left}} .muted{{color:#777}}\
         .worse{{color:#b00020;font-weight:600}} .better{{color:#137333;font-weight:600}}\
         .arm{{margin:.3em 0}} .arm b{{display:inline-block;min-width:8em}}</style></head><body>\
         <h1>rankpulse</h1><p class=\"muted\">{} · charts: window {} · k = {} · <a href=\"/metrics\">/metrics</a> · \
         <a href=\"/readyz\">/readyz</a></p>",
        if ready { "consuming" } else { "not ready" },
        escape(&h.window),
        h.k
    );
    if h.series.is_empty() {
        out.push_str("<p>No list finalized yet: waiting for impressions and judgments.</p></body></html>");
        return out;
    }
    let cutoff = colour_cutoff(h);
    decisions(&mut out, h, cutoff);
    comparisons(&mut out, h);
    interleaving(&mut out, h, cutoff);
    debiased_clicks(&mut out, h);
    // The breakdown: current values per dimension values.
    out.push_str("<h2>Now</h2><table><tr><th>");
    out.push_str(&escape(&h.labels.join(" / ")));
    for m in CHARTED {
        let _ = write!(out, "<th>{}</th>", title(m, h.k));
    }
    out.push_str("<th>lists</th></tr>");
    let lines: Vec<&Vec<String>> = h.series.keys().collect();
    for (dims, metrics) in &h.now {
        // The swatch of the chart line this row belongs to.
        let line = if h.arm.is_some() {
            let arm_index = h.arm.as_ref().and_then(|(l, _)| h.labels.iter().position(|x| x == l)).unwrap_or(0);
            lines.iter().position(|k| k.first() == dims.get(arm_index))
        } else {
            lines.iter().position(|k| *k == dims)
        };
        let swatch =
            line.map_or(String::new(), |i| format!("<span style=\"color:{}\">■</span> ", COLORS[i % COLORS.len()]));
        let _ = write!(out, "<tr><td>{swatch}{}</td>", escape(&dims.join(" / ")));
        let mut lists = 0;
        for m in CHARTED {
            match metrics.get(m) {
                Some(&(mean, se, n)) => {
                    lists = n;
                    let se = se.map_or(String::new(), |se| format!(" ± {se:.4}"));
                    let _ = write!(out, "<td>{mean:.4}<span class=\"muted\">{se}</span></td>");
                }
                None => out.push_str("<td class=\"muted\">–</td>"),
            }
        }
        let _ = write!(out, "<td>{lists}</td></tr>");
    }
    let _ = write!(
        out,
        "</table><h2>Last hour</h2><p class=\"muted\">{}</p><div class=\"grid\">",
        match &h.arm {
            Some((label, _)) =>
                format!("One line per {} (all other labels merged); the table above breaks it down.", escape(label)),
            None => "One line per combination of dimension values.".to_string(),
        }
    );
    for m in CHARTED {
        chart(&mut out, h, m);
    }
    out.push_str("</div></body></html>");
    out
}

/// Signed, with a real minus sign.
fn signed(v: f64, decimals: usize) -> String {
    let sign = if v < 0.0 { '\u{2212}' } else { '+' };
    format!("{sign}{:.decimals$}", v.abs())
}

/// The lead: every arm against the baseline on the primary metric, in the
/// words a person needs, coloured when the confidence sequence excludes 0,
/// and the sequence over the last hour.
/// Whether a decision has the sessions to be read at all.
fn decided(d: &Decision) -> bool {
    d.sessions.0 >= sequential::MIN_SESSIONS && d.sessions.1 >= sequential::MIN_SESSIONS
}

/// The p-value at or below which a test on the page is coloured: the
/// Benjamini–Hochberg cut-off at `compare.alpha` over every test the page
/// could colour (each arm's decision, each interleaving series), so that
/// more arms and markets do not mean more false colours. With one test it
/// is α itself: the decision's confidence sequence excludes 0.
fn colour_cutoff(h: &History) -> Option<f64> {
    let decisions = h.decisions.iter().filter(|d| decided(d)).map(|d| d.test.p_value);
    let interleaving = h.interleaving.iter().filter_map(|(_, _, p)| *p);
    sequential::benjamini_hochberg(&decisions.chain(interleaving).collect::<Vec<_>>(), h.alpha)
}

fn decisions(out: &mut String, h: &History, cutoff: Option<f64>) {
    let (Some((label, baseline)), Some((_, _, metric))) = (&h.arm, &h.primary) else { return };
    let level = 100.0 * (1.0 - h.alpha);
    let _ = write!(
        out,
        "<h2>Decision: {metric}, against {label} = {base}</h2><p class=\"muted\">since the arms' first lists, sessions as \
         the unit; the {level:.0}% confidence sequence of the difference holds at every moment at once, so this \
         verdict may be read as often as you like; a verdict is coloured when its test survives the page's \
         Benjamini–Hochberg cut at {alpha} (docs/metrics.md, What a page means)</p>",
        alpha = h.alpha,
        metric = escape(metric),
        label = escape(label),
        base = escape(baseline),
    );
    if h.decisions.is_empty() {
        let _ = write!(
            out,
            "<p>No decision yet: needs two sessions or more of {} = {} and of another arm with a {} value.</p>",
            escape(label),
            escape(baseline),
            escape(metric)
        );
        return;
    }
    for d in &h.decisions {
        let t = &d.test;
        let coloured = cutoff.is_some_and(|c| t.p_value <= c);
        let (class, verdict) = if !decided(d) {
            (
                "muted",
                format!(
                    "{} against {}: too few sessions to decide yet ({:.0} each needed)",
                    escape(&d.arm),
                    escape(baseline),
                    sequential::MIN_SESSIONS
                ),
            )
        } else if coloured && t.upper < 0.0 {
            ("worse", format!("{} worse than {}", escape(&d.arm), escape(baseline)))
        } else if coloured && t.lower > 0.0 {
            ("better", format!("{} better than {}", escape(&d.arm), escape(baseline)))
        } else if t.upper < 0.0 || t.lower > 0.0 {
            (
                "muted",
                format!(
                    "{} not shown different from {} yet, counting every test on this page",
                    escape(&d.arm),
                    escape(baseline)
                ),
            )
        } else {
            ("muted", format!("{} not shown different from {} yet", escape(&d.arm), escape(baseline)))
        };
        let _ = write!(
            out,
            "<div class=\"arm\"><span class=\"{class}\">{verdict}: {} {} [{}, {}], valid at any time</span> \
             <span class=\"muted\">{:.0} sessions against {:.0} · p {}</span></div>",
            escape(metric),
            signed(t.difference, 4),
            signed(t.lower, 4),
            signed(t.upper, 4),
            d.sessions.0,
            d.sessions.1,
            if t.p_value < 0.001 { "&lt; 0.001".to_string() } else { format!("= {:.3}", t.p_value) },
        );
    }
    out.push_str("<div class=\"grid\">");
    for (i, (arm, samples)) in h.sequences.iter().enumerate() {
        sequence_chart(out, h, i, arm, samples);
    }
    out.push_str("</div>");
}

/// One arm's confidence sequence over the last hour: the band, the
/// difference, and 0.
fn sequence_chart(out: &mut String, h: &History, index: usize, arm: &str, samples: &VecDeque<Option<Bounds>>) {
    let (w, ht, pad) = (460.0, 180.0, 44.0);
    let t0 = h.times.front().copied().unwrap_or(0);
    let t1 = h.times.back().copied().unwrap_or(t0 + 1).max(t0 + 1);
    let points: Vec<(i64, Bounds)> = h.times.iter().zip(samples).filter_map(|(t, s)| s.map(|s| (*t, s))).collect();
    if points.is_empty() {
        return;
    }
    // The first samples, from few sessions, are far wider than the rest:
    // the scale follows the samples at most three times as wide as the
    // newest (the wider ones run off the chart), and always shows 0.
    let width = |(l, _, u): &Bounds| u - l;
    let newest = points.last().map_or(0.0, |(_, b)| width(b));
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for (_, b) in points.iter().filter(|(_, b)| width(b) <= 3.0 * newest) {
        lo = lo.min(b.0);
        hi = hi.max(b.2);
    }
    let margin = ((hi - lo) * 0.1).max(1e-4);
    let (lo, hi) = (lo - margin, hi + margin);
    let x = |t: i64| pad + (t - t0) as f64 / (t1 - t0) as f64 * (w - 2.0 * pad);
    let y = |v: f64| ht - pad - (v - lo) / (hi - lo).max(1e-12) * (ht - 2.0 * pad);
    let title = format!("{} \u{2212} {}", escape(arm), escape(h.arm.as_ref().map_or("", |(_, b)| b.as_str())));
    let _ = write!(
        out,
        "<div class=\"chart\"><svg width=\"{w}\" height=\"{ht}\" role=\"img\" aria-label=\"confidence sequence {title}\">\
         <text x=\"{pad}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{title}</text>\
         <defs><clipPath id=\"sequence-{index}\"><rect x=\"{pad}\" y=\"{pad}\" width=\"{cw}\" height=\"{ch}\"/></clipPath></defs>",
        cw = w - 2.0 * pad,
        ch = ht - 2.0 * pad,
    );
    let mut band = String::new();
    for (i, (t, (_, _, u))) in points.iter().enumerate() {
        let _ = write!(band, "{}{:.1},{:.1} ", if i == 0 { "M" } else { "L" }, x(*t), y(*u));
    }
    for (t, (l, _, _)) in points.iter().rev() {
        let _ = write!(band, "L{:.1},{:.1} ", x(*t), y(*l));
    }
    let _ = write!(
        out,
        "<path d=\"{band}Z\" fill=\"#1f77b4\" fill-opacity=\"0.2\" stroke=\"none\" clip-path=\"url(#sequence-{index})\"/>"
    );
    let mut line = String::new();
    for (i, (t, (_, d, _))) in points.iter().enumerate() {
        let _ = write!(line, "{}{:.1},{:.1} ", if i == 0 { "M" } else { "L" }, x(*t), y(*d));
    }
    let _ = write!(
        out,
        "<path d=\"{line}\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.8\" clip-path=\"url(#sequence-{index})\"/>"
    );
    let (y0, r) = (y(0.0), w - pad);
    let _ = write!(
        out,
        "<line x1=\"{pad}\" y1=\"{y0:.1}\" x2=\"{r}\" y2=\"{y0:.1}\" stroke=\"#555\" stroke-dasharray=\"4 3\"/>\
         <text x=\"{tx}\" y=\"{ty:.1}\" font-size=\"10\" text-anchor=\"end\">0</text>\
         <text x=\"{tx}\" y=\"{yh:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>\
         <text x=\"{tx}\" y=\"{yl:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>\
         <text x=\"{pad}\" y=\"{by}\" font-size=\"10\">{}</text>\
         <text x=\"{r}\" y=\"{by}\" font-size=\"10\" text-anchor=\"end\">now</text></svg></div>",
        signed(hi, 3),
        signed(lo, 3),
        if points.len() > 1 { format!("\u{2212}{:.0} min", (t1 - t0) as f64 / 60_000.0) } else { String::new() },
        tx = pad - 4.0,
        ty = y0 + 3.5,
        yh = y(hi) + 10.0,
        yl = y(lo),
        by = ht - pad + 15.0,
    );
}

/// Every arm against the baseline per charted metric over the longest
/// window: descriptive, never coloured (a window read again and again is
/// no test; the decision above is).
fn comparisons(out: &mut String, h: &History) {
    let Some((label, baseline)) = &h.arm else { return };
    let _ = write!(
        out,
        "<h2>Against {label} = {base}, window {w}</h2><p class=\"muted\">difference of means ± standard error \
         (Welch, lists as the unit), to describe: a window's p-value read again and again is not a test, so \
         nothing here is coloured</p>",
        label = escape(label),
        base = escape(baseline),
        w = escape(&h.compare_window),
    );
    if h.comparisons.is_empty() {
        let _ = write!(
            out,
            "<p>Nothing to compare yet: needs lists of {} = {} and of another arm, two or more each, in the last {}.</p>",
            escape(label),
            escape(baseline),
            escape(&h.compare_window)
        );
        return;
    }
    let mut arm: Option<&str> = None;
    for c in &h.comparisons {
        if arm != Some(c.arm.as_str()) {
            if arm.is_some() {
                out.push_str("</div>");
            }
            let _ = write!(
                out,
                "<div class=\"arm\"><b>{}</b> <span class=\"muted\">{} lists against {}</span><br>",
                escape(&c.arm),
                c.lists.0,
                c.lists.1
            );
            arm = Some(c.arm.as_str());
        }
        let d = &c.comparison;
        let class = "muted";
        let sign = if d.difference < 0.0 { '\u{2212}' } else { '+' };
        let _ = write!(
            out,
            "<span class=\"{class}\">{} {sign}{:.3} ± {:.3} vs {} ({})</span><br>",
            title(c.metric, h.k),
            d.difference.abs(),
            d.stderr,
            escape(baseline),
            p_text(d.p_value)
        );
    }
    out.push_str("</div>");
}

/// Team-draft interleaving experiments: Δ of the candidate (team A) over
/// the window, coloured by the anytime-valid test since start.
fn interleaving(out: &mut String, h: &History, cutoff: Option<f64>) {
    if h.interleaving.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h2>Interleaving</h2><p class=\"muted\">window {}: Δ = (A wins + ties/2)/lists − 1/2 of the candidate (team A); \
         p: the always-valid test of A wins against B wins since the first list, coloured at a false-discovery \
         rate of {} over every test on this page (Benjamini–Hochberg)</p>",
        escape(&h.compare_window),
        h.alpha
    );
    for (dims, o, p) in &h.interleaving {
        let (w, l, t) = (o.a_wins.max(0) as u64, o.b_wins.max(0) as u64, o.ties.max(0) as u64);
        let Some(delta) = interleaving_delta(w, l, t) else { continue };
        let p = *p;
        let coloured = p.is_some_and(|p| cutoff.is_some_and(|c| p <= c));
        let class = match coloured {
            true if delta < 0.0 => "worse",
            true if delta > 0.0 => "better",
            _ => "muted",
        };
        let sign = if delta < 0.0 { '\u{2212}' } else { '+' };
        let _ = write!(
            out,
            "<div class=\"arm\"><b>{}</b> <span class=\"{class}\">Δ {sign}{:.3} ({})</span> \
             <span class=\"muted\">A {w} · B {l} · ties {t}</span></div>",
            escape(&dims.join(" / ")),
            delta.abs(),
            p_text(p),
        );
    }
}

fn debiased_clicks(out: &mut String, h: &History) {
    let Some(d) = &h.debiased else { return };
    let source = if d.configured {
        "configured (debias.propensities, relative to rank 1)".to_string()
    } else {
        format!("estimated from {} randomized lists since start, relative to rank 1", d.randomized_lists)
    };
    let _ = write!(
        out,
        "<h2>Clicks, position-debiased</h2><p class=\"muted\">window {}: clicks in the top {} per list as shown, and \
         each weighted by 1/propensity of its rank (IPS) ± its standard error. Propensities {source}:",
        escape(&h.window),
        d.k
    );
    for (rank, p) in d.propensities.iter().enumerate() {
        let p = if p.is_finite() { format!("{p:.2}") } else { "–".into() };
        let _ = write!(out, "{} {}:&nbsp;{p}", if rank == 0 { " rank" } else { "," }, rank + 1);
    }
    if !d.configured {
        // docs/metrics.md, "Position-debiased clicks".
        out.push_str(". The standard errors include the estimated propensities' own error");
    }
    out.push_str("</p>");
    if d.lines.is_empty() {
        out.push_str("<p class=\"muted\">No clicked lists in the window yet.</p>");
        return;
    }
    let _ = write!(out, "<table><tr><th></th><th>clicks@{0}</th><th>IPS clicks@{0}</th></tr>", d.k);
    for (key, raw, ips) in &d.lines {
        let raw = raw.map_or("–".into(), |v| format!("{v:.4}"));
        let ips = match ips {
            Some((v, Some(se))) => format!("{v:.4}<span class=\"muted\"> ± {se:.4}</span>"),
            Some((v, None)) => format!("{v:.4}"),
            None => "<span class=\"muted\">– (no propensity yet)</span>".into(),
        };
        let _ = write!(out, "<tr><td>{}</td><td>{raw}</td><td>{ips}</td></tr>", escape(&key.join(" / ")));
    }
    out.push_str("</table>");
}

/// Tick step for a range: 1, 2 or 5 times a power of ten, about 4 ticks.
fn tick_step(range: f64) -> f64 {
    let raw = (range / 4.0).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(10.0 * magnitude)
}

fn chart(out: &mut String, h: &History, metric: &str) {
    let (w, ht, pad) = (460.0, 220.0, 40.0);
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
    let title = title(metric, h.k);
    let _ = write!(
        out,
        "<div class=\"chart\"><svg width=\"{w}\" height=\"{ht}\" role=\"img\" aria-label=\"{title}\">\
         <text x=\"{pad}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{title}</text>\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"#999\"/>",
        b = ht - pad,
        r = w - pad,
    );
    // Value ticks with grid lines.
    let step = tick_step(hi - lo);
    let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    let mut v = (lo / step).ceil() * step;
    while v <= hi + step * 1e-9 {
        let yv = y(v);
        let _ = write!(
            out,
            "<line x1=\"{pad}\" y1=\"{yv:.1}\" x2=\"{r}\" y2=\"{yv:.1}\" stroke=\"#eee\"/>\
             <line x1=\"{l}\" y1=\"{yv:.1}\" x2=\"{pad}\" y2=\"{yv:.1}\" stroke=\"#999\"/>\
             <text x=\"{tx}\" y=\"{ty:.1}\" font-size=\"10\" text-anchor=\"end\">{v:.decimals$}</text>",
            r = w - pad,
            l = pad - 4.0,
            tx = pad - 6.0,
            ty = yv + 3.5,
        );
        v += step;
    }
    // Time ticks: minutes before the newest sample.
    let span_min = (t1 - t0) as f64 / 60_000.0;
    let every = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0].into_iter().find(|m| span_min / m <= 6.0).unwrap_or(60.0);
    let mut m = 0.0;
    while m <= span_min + 1e-9 {
        let xt = x(t1 - (m * 60_000.0) as i64);
        let label = if m == 0.0 { "now".to_string() } else { format!("\u{2212}{m:.0} min") };
        let _ = write!(
            out,
            "<line x1=\"{xt:.1}\" y1=\"{b}\" x2=\"{xt:.1}\" y2=\"{b4}\" stroke=\"#999\"/>\
             <text x=\"{xt:.1}\" y=\"{ly}\" font-size=\"10\" text-anchor=\"middle\">{label}</text>",
            b = ht - pad,
            b4 = ht - pad + 4.0,
            ly = ht - pad + 15.0,
        );
        m += every;
    }
    for (i, (key, metrics)) in h.series.iter().enumerate() {
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
        // Legend, top right.
        let _ = write!(
            out,
            "<text x=\"{lx}\" y=\"{ly}\" font-size=\"10\" fill=\"{color}\" text-anchor=\"end\">{}</text>",
            escape(&key.join(" / ")),
            lx = w - 4.0,
            ly = 16.0 + 11.0 * i as f64,
        );
    }
    out.push_str("</svg></div>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankpulse_core::metrics::list::ListScore;
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
        assert_eq!((h.k, h.window.as_str(), h.compare_window.as_str()), (10, "1m", "1h"));
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
        assert!(page.contains("Nothing to compare yet"), "only the baseline has lists");
    }

    fn score(cutoffs: usize, v: f64) -> ListScore {
        let mut s = ListScore::new(cutoffs);
        s.values.iter_mut().for_each(|x| *x = Some(v));
        s.gauc = Some((v, 1));
        s
    }

    /// Control at 0.50/0.60 alternating in two markets, v2 at 0.40/0.50:
    /// difference −0.100, se = sqrt(2 · 0.0025 / 40) per arm-pair (each
    /// arm: 40 lists, s² = 0.05²·40/39), so p is tiny and v2 is red; v3
    /// equals control and stays uncoloured. Charts get one line per arm.
    #[test]
    fn leads_with_the_comparison_and_charts_arms() {
        let config = Config::default();
        let cutoffs = config.metrics.cutoffs.len();
        let mut acc = Accumulators::new(cutoffs, config.windows.bucket.ms());
        let mut sessions = rankpulse_core::sessions::SessionLedger::new(1_800_000, 1_000);
        let now = 2_000_000;
        for (arm, base) in [("control", 0.5), ("v2", 0.4), ("v3", 0.5)] {
            for market in ["us", "fr"] {
                let dims: Arc<[String]> = vec![arm.to_string(), market.to_string()].into();
                for i in 0..60 {
                    // Each list a session of its own, as the pipeline adds them.
                    let value = base + 0.1 * f64::from(i % 2);
                    let clusters = acc.fold(&dims, now - 30_000, &score(cutoffs, value));
                    sessions.add(sessions.len() as u64, 0, value, now - 30_000, clusters);
                }
                // Shuffled lists: in no comparison and in none of its counts.
                let mut shuffled = score(cutoffs, 0.0);
                shuffled.randomized = true;
                for _ in 0..5 {
                    acc.fold(&dims, now - 30_000, &shuffled);
                }
            }
        }
        let mut h = History::new(&config);
        h.sample(&config, &acc, now);
        assert_eq!(h.series.keys().cloned().collect::<Vec<_>>(), [["control"], ["v2"], ["v3"]]);
        assert_eq!(h.now.len(), 6, "the breakdown keeps every market");
        let v2: Vec<_> = h.comparisons.iter().filter(|c| c.arm == "v2").collect();
        assert_eq!(v2.len(), 4);
        assert!((v2[0].comparison.difference + 0.1).abs() < 1e-12);
        assert_eq!(v2[0].lists, (120, 120));
        // The decision: v2 is 0.1 worse over 120 sessions per arm, v3 equal.
        let v2 = h.decisions.iter().find(|d| d.arm == "v2").expect("v2 decided").test;
        assert!((v2.difference + 0.1).abs() < 1e-12 && v2.upper < 0.0, "{v2:?}");
        let v3 = h.decisions.iter().find(|d| d.arm == "v3").expect("v3 decided").test;
        assert!(v3.lower < 0.0 && v3.upper > 0.0, "{v3:?}");
        let page = render_page(&h, true);
        let lead = page.find("<h2>Decision: nDCG@10, against ranker = control").expect("decision section");
        assert!(lead < page.find("Against ranker = control, window 1h").unwrap(), "the decision leads");
        assert!(lead < page.find("<h2>Now").unwrap());
        let worse = format!(
            "<span class=\"worse\">v2 worse than control: nDCG@10 \u{2212}0.1000 [\u{2212}{:.4}, \u{2212}{:.4}], valid at any time</span>",
            -v2.lower, -v2.upper
        );
        assert!(page.contains(&worse), "{worse} in {page}");
        assert!(
            page.contains("<span class=\"muted\">v3 not shown different from control yet: nDCG@10 +0.0000 ["),
            "{page}"
        );
        assert!(page.contains("aria-label=\"confidence sequence v2 \u{2212} control\""), "the sequence is charted");
        // The windowed comparisons describe and are never coloured, however
        // small their p-value: only the decision is.
        assert!(
            page.contains("<span class=\"muted\">nDCG@10 \u{2212}0.100 ± 0.006 vs control (p &lt; 0.001)</span>"),
            "{page}"
        );
        assert!(page.contains("<span class=\"muted\">nDCG@10 +0.000 ± 0.006 vs control (p = 1.000)</span>"), "{page}");
        assert_eq!(page.matches("class=\"worse\"").count(), 1, "{page}");
        assert!(page.contains("text-anchor=\"end\">0.45</text>"), "value ticks");
        assert!(page.contains(">now</text>"));
        // compare.alpha sets the sequence's level: at 1e-80 it is about
        // twice as wide and holds 0, so nothing is coloured.
        let mut strict = config.clone();
        strict.compare.alpha = 1e-80;
        let mut h = History::new(&strict);
        h.sample(&strict, &acc, now);
        let page = render_page(&h, true);
        assert!(page.contains("<span class=\"muted\">v2 not shown different from control yet"), "{page}");
        assert!(!page.contains("class=\"worse\""), "{page}");
        // Below 100 sessions an arm is not decided, however clear its
        // difference: the variance is estimated (the rules guard the same).
        let mut few = Accumulators::new(cutoffs, config.windows.bucket.ms());
        let mut sessions = rankpulse_core::sessions::SessionLedger::new(1_800_000, 1_000);
        for (arm, base) in [("control", 0.5), ("v2", 0.1)] {
            let dims: Arc<[String]> = vec![arm.to_string(), "us".to_string()].into();
            for i in 0..99 {
                let value = base + 0.1 * f64::from(i % 2);
                let clusters = few.fold(&dims, now - 30_000, &score(cutoffs, value));
                sessions.add(sessions.len() as u64, 0, value, now - 30_000, clusters);
            }
        }
        let mut h = History::new(&config);
        h.sample(&config, &few, now);
        assert!(h.decisions[0].test.upper < 0.0, "{:?}", h.decisions);
        let page = render_page(&h, true);
        assert!(page.contains("v2 against control: too few sessions to decide yet (100 each needed)"), "{page}");
        assert!(!page.contains("class=\"worse\""), "{page}");
    }

    /// 3 A wins, 9 B wins, no ties: Δ = 3/12 − 1/2 = −0.25; the always-valid
    /// p-value (τ = 0.1, n = 12, S = −6): exp(½ ln 1.12 − 0.01 · 36 / 2.24)
    /// = 0.901 (not significant).
    #[test]
    fn shows_interleaving_experiments() {
        use rankpulse_core::interleave::Outcome;
        let config = Config::default();
        let cutoffs = config.metrics.cutoffs.len();
        let mut acc = Accumulators::new(cutoffs, config.windows.bucket.ms());
        let dims: Arc<[String]> = vec!["tdi".to_string(), "us".to_string()].into();
        for i in 0..12 {
            let mut s = score(cutoffs, 0.5);
            s.interleaving = Some(if i < 3 { Outcome::AWins } else { Outcome::BWins });
            acc.fold(&dims, 1_000_000, &s);
        }
        let mut h = History::new(&config);
        h.sample(&config, &acc, 1_010_000);
        let page = render_page(&h, true);
        assert!(page.contains("<b>tdi / us</b> <span class=\"muted\">Δ \u{2212}0.250 (p = 0.901)</span>"), "{page}");
        assert!(page.contains("A 3 · B 9 · ties 0"));
    }

    /// Two interleaving series: at α = 0.05 the Benjamini–Hochberg cut
    /// over both needs the smaller p at or below 0.025, so p = 0.03 (which
    /// alone would be coloured) is not, and p = 0.02 is.
    #[test]
    fn colours_survive_the_pages_benjamini_hochberg_cut() {
        use rankpulse_core::accumulate::Interleaving;
        use rankpulse_core::interleave::Outcome;
        let config = Config::default();
        let cutoffs = config.metrics.cutoffs.len();
        let mut acc = Accumulators::new(cutoffs, config.windows.bucket.ms());
        let dims: Arc<[String]> = vec!["tdi".to_string(), "us".to_string()].into();
        let mut s = score(cutoffs, 0.5);
        s.interleaving = Some(Outcome::BWins);
        acc.fold(&dims, 1_000_000, &s);
        let mut h = History::new(&config);
        h.sample(&config, &acc, 1_010_000);
        let losing = Interleaving { a_wins: 10, b_wins: 30, ties: 0 };
        let even = Interleaving { a_wins: 20, b_wins: 20, ties: 0 };
        for (p, class) in [(0.03, "muted"), (0.02, "worse")] {
            h.interleaving = vec![
                (vec!["tdi".into(), "de".into()], losing, Some(p)),
                (vec!["tdi".into(), "us".into()], even, Some(0.9)),
            ];
            let page = render_page(&h, true);
            assert!(page.contains(&format!("<b>tdi / de</b> <span class=\"{class}\">")), "{p}: {page}");
            // Alone, 0.03 is coloured.
            h.interleaving.truncate(1);
            assert!(render_page(&h, true).contains("<b>tdi / de</b> <span class=\"worse\">"), "{p}");
        }
    }

    #[test]
    fn tick_steps_are_round() {
        for (range, step) in [(1.0, 0.5), (0.12, 0.05), (0.03, 0.01), (0.3, 0.1), (0.0, 1e-9)] {
            assert!((tick_step(range) - step).abs() < step * 1e-9, "{range}: {}", tick_step(range));
        }
    }
}
