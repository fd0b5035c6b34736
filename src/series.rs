//! Every series rankpulse exposes, defined once: name, type, labels and
//! help. `publish` takes each family's help and type from here, the
//! configuration refuses a dimension label named like one of these labels,
//! and docs/metrics.md's metric reference is generated from [`reference`]
//! (a test fails when it differs; `RANKPULSE_BLESS=1` rewrites it). Tests
//! hold real expositions to the table: every family exposed is here, with
//! its type and labels.
//!
//! Names, types and labels are a public contract: dashboards and alerts
//! depend on them.

use std::collections::BTreeSet;
use std::sync::OnceLock;

/// Every series' name starts with this.
pub const PREFIX: &str = "rankpulse_";

/// A series' Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    /// As the exposition's `# TYPE` line says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// The labels a series has beyond its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// None.
    None,
    /// The configured dimension labels (`dimensions.labels`), one series
    /// per combination seen.
    Dimensions,
    /// The label that tells the arms apart (`compare.arm`), alone.
    Arm,
}

/// One series (a metric family).
#[derive(Debug, Clone)]
pub struct Series {
    /// The full name, [`PREFIX`] included.
    pub name: String,
    pub kind: Kind,
    /// rankpulse's own labels; a trailing `?` marks one only some of its
    /// series carry (`k`, which `gauc` has not).
    pub labels: &'static [&'static str],
    pub then: Then,
    pub help: String,
}

impl Series {
    fn new(kind: Kind, name: &str, labels: &'static [&'static str], then: Then, help: impl Into<String>) -> Self {
        Series { name: format!("{PREFIX}{name}"), kind, labels, then, help: help.into() }
    }

    /// The label names, without the optional marker.
    pub fn label_names(&self) -> impl Iterator<Item = &'static str> {
        self.labels.iter().map(|l| l.trim_end_matches('?'))
    }
}

/// The quality metrics' means, with whether they have a cutoff label and
/// their help.
const QUALITY: [(&str, bool, &str); 7] = [
    ("ndcg", true, "Mean nDCG@k of the lists whose impression time is in the window"),
    ("mrr", true, "Mean reciprocal rank@k (MRR) of the lists in the window"),
    ("err", true, "Mean expected reciprocal rank@k of the lists in the window"),
    ("precision", true, "Mean precision@k of the lists in the window"),
    ("recall", true, "Mean recall@k of the lists in the window"),
    ("map", true, "Mean average precision@k (MAP) of the lists in the window"),
    ("gauc", false, "GAUC: weighted mean per-list AUC of the lists in the window"),
];

/// The position-debiased click metrics (`[debias]`) and their help.
const CLICKS: [(&str, &str); 4] = [
    ("clicks", "Mean clicks in the top k per list (biased by position)"),
    ("clicks_ips", "Mean clicks in the top k per list, each weighted by 1/propensity of its rank (IPS)"),
    ("click_dcg", "Mean DCG@k of the clicks per list (gain 1 per click, biased by position)"),
    ("click_dcg_ips", "Mean DCG@k of the clicks per list, each click weighted by 1/propensity of its rank (IPS)"),
];

/// The table, in the order docs/metrics.md lists it.
pub fn table() -> &'static [Series] {
    static TABLE: OnceLock<Vec<Series>> = OnceLock::new();
    TABLE.get_or_init(build)
}

fn build() -> Vec<Series> {
    use Kind::{Counter, Gauge};
    let mut t = Vec::new();
    for (m, cutoff, help) in QUALITY {
        let (window, total): (&'static [&'static str], &'static [&'static str]) =
            if cutoff { (&["k", "window"], &["k"]) } else { (&["window"], &[]) };
        t.push(Series::new(Gauge, m, window, Then::Dimensions, help));
        t.push(Series::new(
            Gauge,
            &format!("{m}_stderr"),
            window,
            Then::Dimensions,
            format!("Standard error of rankpulse_{m}"),
        ));
        t.push(Series::new(
            Counter,
            &format!("{m}_sum"),
            total,
            Then::Dimensions,
            format!("Sum of per-list {m} values since start (GAUC: weight times AUC)"),
        ));
        t.push(Series::new(
            Counter,
            &format!("{m}_sum_squares"),
            total,
            Then::Dimensions,
            format!(
                "Sum of squared per-list {m} values since start (GAUC: weight times AUC squared): \
                 variance = rate(_sum_squares)/rate(_count) - mean^2"
            ),
        ));
        t.push(Series::new(
            Counter,
            &format!("{m}_count"),
            total,
            Then::Dimensions,
            format!("Lists counted in rankpulse_{m}_sum since start (GAUC: total weight)"),
        ));
    }
    for (m, help) in CLICKS {
        t.push(Series::new(Gauge, m, &["k", "window"], Then::Dimensions, help));
        t.push(Series::new(
            Gauge,
            &format!("{m}_stderr"),
            &["k", "window"],
            Then::Dimensions,
            format!("Standard error of rankpulse_{m} (click sampling, and the estimated propensities' own error)"),
        ));
    }
    t.extend([
        Series::new(Kind::Gauge, "lists", &["window"], Then::Dimensions, "Lists finalized whose impression time is in the window"),
        Series::new(Kind::Counter, "click_lists_total", &[], Then::Dimensions, "Lists in production order counted by the position-debiased click metrics (debias.max_rank)"),
        Series::new(Kind::Counter, "rank_clicks_total", &["rank"], Then::Dimensions, "Clicks at each rank of those lists: with propensities theta (raised to debias.min_propensity when set), sum over ranks of rate(_total)/theta / rate(rankpulse_click_lists_total) is the IPS clicks@k across instances"),
        Series::new(Kind::Counter, "interleaving_outcomes_total", &["outcome"], Then::Dimensions, "Team-draft interleaved lists with a click on a team's result, by outcome (team A is the candidate)"),
        Series::new(Kind::Gauge, "interleaving_sequential_p_value", &[], Then::Dimensions, "Always-valid p-value of A wins against B wins since start (normal-mixture sign test, compare.interleaving_effect): below compare.alpha, one team is preferred, however often it is read"),
        Series::new(Kind::Counter, "lists_finalized_total", &[], Then::Dimensions, "Lists finalized and scored since start"),
        Series::new(Kind::Counter, "lists_excluded_total", &["metric", "reason"], Then::Dimensions, "Lists left out of a metric's mean since start, by metric and reason"),
        Series::new(Kind::Counter, "lists_no_relevant_total", &["kind"], Then::Dimensions, "Lists with nothing relevant judged (kind graded: no positive grade; binary: none at the threshold), whatever metrics.no_relevant says"),
        Series::new(Kind::Counter, "events_total", &["topic", "type"], Then::None, "Events accepted, by topic and type"),
        Series::new(Kind::Counter, "events_rejected_total", &["reason"], Then::None, "Messages rejected, by reason; a rejected message changes no metric"),
        Series::new(Kind::Counter, "events_ignored_total", &["reason"], Then::None, "Valid messages that score nothing (UBI actions not in judgments.actions, _bulk action lines and update bodies), by reason"),
        Series::new(Kind::Counter, "events_duplicate_total", &["type"], Then::None, "Events ignored because their event_id was already applied to the list"),
        Series::new(Kind::Counter, "orphan_lists_total", &[], Then::None, "Lists that ended with judgments but no impression (nothing to score)"),
        Series::new(Kind::Counter, "lists_evicted_total", &[], Then::None, "Lists finalized before their gap because session.max_open_lists was reached"),
        Series::new(Kind::Counter, "late_lists_forgotten_total", &[], Then::None, "Final lists forgotten before late.horizon because session.max_open_lists final lists were kept; a late judgment of one becomes an orphan list"),
        Series::new(Kind::Counter, "sessions_evicted_total", &[], Then::None, "Sessions forgotten before compare.session_timeout to stay within compare.max_sessions; a later list of one starts a new session in the session-clustered variance"),
        Series::new(Kind::Counter, "late_judgments_total", &["outcome"], Then::None, "Judgments (and impressions: UBI impression events, later pages) for lists already final, within late.horizon: amended (list re-scored) or dropped (late.policy)"),
        Series::new(Kind::Counter, "dimension_overflow_total", &["label"], Then::None, "Impressions whose value of a dimension label was reported as __other__ (dimensions.max_values reached, or the value longer than dimensions.max_value_bytes)"),
        Series::new(Kind::Counter, "dimension_combinations_overflow_total", &[], Then::None, "Impressions of a new combination of dimension values reported as __other__ on every label (dimensions.max_combinations reached)"),
        Series::new(Kind::Counter, "position_conflicts_total", &[], Then::None, "Results dropped because their list already showed another document at that position (two searches under one list key), since the process started"),
        Series::new(Kind::Counter, "dimension_conflicts_total", &[], Then::None, "Impressions whose value of a dimension label differs from the one their list holds (the earliest impression's is kept), since the process started"),
        Series::new(Kind::Gauge, "open_lists", &[], Then::None, "Lists still collecting events"),
        Series::new(Kind::Gauge, "kafka_connected", &[], Then::None, "1 while a connection to a Kafka broker is up, 0 during an outage"),
        Series::new(Kind::Gauge, "kafka_outage_seconds", &[], Then::None, "How long the current broker outage has lasted (0 when connected)"),
        Series::new(Kind::Counter, "kafka_outages_total", &[], Then::None, "Broker outages since start"),
        Series::new(Kind::Counter, "partitions_rebalanced_total", &["change"], Then::None, "Topic-partitions assigned to or revoked from this instance by consumer-group rebalances (an expired session revokes them all)"),
        Series::new(Kind::Counter, "topic_pauses_total", &[], Then::None, "Times a topic-partition was held back (not read) for running more than kafka.max_topic_drift ahead of its partition's slowest topic in event time"),
        Series::new(Kind::Counter, "http_connections_timed_out_total", &[], Then::None, "HTTP connections closed by a bound: no request within 30 s of connecting, or an answer not taken within 5 s of closing"),
        Series::new(Kind::Counter, "http_connection_slots_full_total", &[], Then::None, "Times all 256 HTTP connection slots were taken (more connections wait in the listen backlog)"),
        Series::new(Kind::Counter, "http_refused_total", &["reason"], Then::None, "Clients the HTTP endpoint refused under http.web_config, by reason: plain_http (plain HTTP to the TLS port), tls_handshake (a failed handshake: no, an untrusted or an expired client certificate), no_credentials and bad_credentials (401), busy (503: every password check busy for 5 s)"),
        Series::new(Kind::Counter, "web_config_reload_failures_total", &[], Then::None, "Changes of http.web_config or the files it names that were not taken (unreadable, invalid, or turning TLS on or off): the state before them stays in force"),
        Series::new(Kind::Histogram, "ingest_delay_seconds", &[], Then::None, "Delay from a message's Kafka timestamp (producer or log-append time) to the moment rankpulse applied it"),
        Series::new(Kind::Histogram, "consumer_loop_gap_seconds", &[], Then::None, "Time between two messages handled by the consumer loop while more were already fetched: how long publishing, checkpoints and rebalances held the stream up"),
        Series::new(Kind::Histogram, "consumer_tick_seconds", &[], Then::None, "Time each tick of the consumer loop took (closing lists due, commits, handing the publisher its view), during which no message is read"),
        Series::new(Kind::Counter, "checkpoints_total", &[], Then::None, "Checkpoints written"),
        Series::new(Kind::Counter, "checkpoint_failures_total", &[], Then::None, "Checkpoints that could not be written (offsets are not committed then)"),
        Series::new(Kind::Counter, "state_fenced_total", &[], Then::None, "Partitions this instance gave up because another instance had claimed them in state.topic while this one still checkpointed them (a zombie fenced; Kafka backend only)"),
        Series::new(Kind::Gauge, "partitions_held", &[], Then::None, "Partitions assigned to this instance but held (paused, not counted) until their hand-over from state.topic succeeds: it failed, or they were fenced while still assigned here (Kafka backend only)"),
        Series::new(Kind::Gauge, "last_checkpoint_timestamp_seconds", &[], Then::None, "Wall time of the last checkpoint; /metrics shows the state it covers"),
        Series::new(Kind::Counter, "messages_covered_total", &[], Then::None, "Messages re-delivered after a restart or rebalance and skipped because a checkpoint already covers them"),
        Series::new(Kind::Counter, "dead_letters_total", &["outcome"], Then::None, "Invalid messages copied to kafka.dead_letter_topic: acknowledged by the broker (sent) or failed for good"),
        Series::new(Kind::Gauge, "consumer_lag", &["topic", "partition"], Then::None, "Messages between the partition's high watermark and the offset committed (librdkafka's consumer_lag)"),
        Series::new(Kind::Counter, "messages_total", &["topic"], Then::None, "Messages consumed from the topic and applied, whatever became of them: accepted, rejected, ignored or duplicate (not those a checkpoint already covered); since the process started"),
        Series::new(Kind::Gauge, "last_event_timestamp_seconds", &["partition"], Then::None, "Event time of the newest event consumed from the partition (any topic)"),
        Series::new(Kind::Gauge, "build_info", &["version"], Then::None, "Build information"),
        Series::new(Kind::Counter, "primary_sessions_total", &["metric", "k"], Then::Dimensions, "Sessions with a list of compare.primary since start (a session idle for compare.session_timeout counts again)"),
        Series::new(Kind::Counter, "primary_session_sum_squares_total", &["metric", "k"], Then::Dimensions, "Sum over sessions of S^2, S a session's sum of per-list compare.primary values"),
        Series::new(Kind::Counter, "primary_session_sum_lists_total", &["metric", "k"], Then::Dimensions, "Sum over sessions of S*N, S a session's sum of per-list compare.primary values and N its lists"),
        Series::new(Kind::Counter, "primary_session_lists_squares_total", &["metric", "k"], Then::Dimensions, "Sum over sessions of N^2, N a session's lists with a compare.primary value"),
        Series::new(Kind::Gauge, "primary_design_effect", &["metric", "k"], Then::Arm, "Session-clustered variance of the arm's compare.primary mean since start over the variance that takes lists as independent"),
        Series::new(Kind::Gauge, "compare_difference", &["metric", "k?", "window"], Then::Arm, "Mean of the arm minus mean of compare.baseline, lists in the window (merged over the other labels)"),
        Series::new(Kind::Gauge, "compare_stderr", &["metric", "k?", "window"], Then::Arm, "Standard error of rankpulse_compare_difference (Welch: sqrt(se_arm^2 + se_baseline^2))"),
        Series::new(Kind::Gauge, "compare_p_value", &["metric", "k?", "window"], Then::Arm, "Two-sided p-value of rankpulse_compare_difference (Welch's t-test)"),
        Series::new(Kind::Gauge, "compare_lists_needed", &["metric", "k?", "window"], Then::Arm, "Lists per arm needed to detect a difference of compare.effect at level compare.alpha with probability compare.power, at the window's per-list variances"),
        Series::new(Kind::Counter, "randomized_lists_total", &["rank"], Then::None, "Randomized lists (impressions flagged randomized) with a result at the rank"),
        Series::new(Kind::Counter, "randomized_clicks_total", &["rank"], Then::None, "Clicks at the rank in randomized lists: the click-through rate per rank is proportional to its propensity"),
        Series::new(Kind::Gauge, "position_propensity", &["rank"], Then::None, "Examination propensity of the rank under the position-based model, relative to rank 1 (debias.propensities divided by their first value, else estimated from randomized lists since start)"),
        Series::new(Kind::Gauge, "interleaving_lists", &["window"], Then::Dimensions, "Interleaved lists in the window with a click on a team's result"),
        Series::new(Kind::Gauge, "interleaving_delta", &["window"], Then::Dimensions, "(A wins + ties/2) / lists - 1/2 of the interleaved lists in the window: above 0, the candidate (team A) is preferred"),
        Series::new(Kind::Gauge, "interleaving_p_value", &["window"], Then::Dimensions, "Two-sided sign test of A wins against B wins in the window (ties left out)"),
        Series::new(Kind::Gauge, "compare_sequential_difference", &["metric", "k"], Then::Arm, "compare.primary: mean of the arm minus mean of compare.baseline since their first lists"),
        Series::new(Kind::Gauge, "compare_sequential_stderr", &["metric", "k"], Then::Arm, "Standard error of rankpulse_compare_sequential_difference, sessions as clusters"),
        Series::new(Kind::Gauge, "compare_sequential_lower", &["metric", "k"], Then::Arm, "Lower bound of the confidence sequence of rankpulse_compare_sequential_difference at level 1 - compare.alpha: valid at every moment at once"),
        Series::new(Kind::Gauge, "compare_sequential_upper", &["metric", "k"], Then::Arm, "Upper bound of the confidence sequence of rankpulse_compare_sequential_difference at level 1 - compare.alpha: valid at every moment at once"),
        Series::new(Kind::Gauge, "compare_sequential_p_value", &["metric", "k"], Then::Arm, "Always-valid p-value of rankpulse_compare_sequential_difference (mixture SPRT, scale compare.mixture_sd): below compare.alpha exactly when the confidence sequence excludes 0"),
    ]);
    t
}

/// The series called `name` (prefix included).
pub fn get(name: &str) -> Option<&'static Series> {
    table().iter().find(|s| s.name == name)
}

/// Every label name rankpulse puts on a series itself, and those
/// Prometheus adds (`le`, `quantile`, `job`, `instance`): names a dimension
/// label may not take.
pub fn reserved_labels() -> BTreeSet<&'static str> {
    let mut names: BTreeSet<&str> = table().iter().flat_map(Series::label_names).collect();
    names.extend(["le", "quantile", "job", "instance"]);
    names
}

/// docs/metrics.md's metric reference, as Markdown.
pub fn reference() -> String {
    let mut out = String::from("| series | type | labels | help |\n|---|---|---|---|\n");
    for s in table() {
        let mut labels: Vec<String> = s
            .labels
            .iter()
            .map(|l| match l.strip_suffix('?') {
                Some(l) => format!("`{l}` (not gauc)"),
                None => format!("`{l}`"),
            })
            .collect();
        match s.then {
            Then::None => {}
            Then::Dimensions => labels.push("dimensions".into()),
            Then::Arm => labels.push("the arm label".into()),
        }
        let labels = if labels.is_empty() { "–".to_string() } else { labels.join(", ") };
        out.push_str(&format!("| `{}` | {} | {labels} | {} |\n", s.name, s.kind.as_str(), s.help.replace('|', "\\|")));
    }
    out
}

/// Holds a text exposition to the table: every family is in it, with its
/// type and help, and every sample has the family's labels (an optional
/// one may be absent), the dimension labels `dimensions` where the family
/// takes them, `arm` where it takes the arm's. Returns what disagrees.
pub fn check(exposition: &str, dimensions: &[&str], arm: Option<&str>) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let mut help: std::collections::BTreeMap<&str, &str> = Default::default();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name, text);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            match get(name) {
                None => problems.push(format!("{name} is not in the series table")),
                Some(s) if s.kind.as_str() != kind => {
                    problems.push(format!("{name} is a {kind}, the table says {}", s.kind.as_str()))
                }
                Some(s) if help.get(name).copied() != Some(escape_help(&s.help).as_str()) => {
                    problems.push(format!("{name}: its help differs from the table's"))
                }
                Some(_) => {}
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((name, labels, _)) = sample(line) else {
            problems.push(format!("{line}: not a sample line"));
            continue;
        };
        let (family, extra) = match get(name) {
            Some(s) => (s, None),
            None => {
                match ["_bucket", "_sum", "_count"].iter().find_map(|sfx| Some((get(name.strip_suffix(sfx)?)?, *sfx))) {
                    Some((s, sfx)) if s.kind == Kind::Histogram => (s, (sfx == "_bucket").then_some("le")),
                    _ => {
                        problems.push(format!("{name}: no series in the table"));
                        continue;
                    }
                }
            }
        };
        let mut have: Vec<&str> = labels.iter().map(|(n, _)| *n).collect();
        have.sort_unstable();
        let then: Vec<&str> = match family.then {
            Then::None => Vec::new(),
            Then::Dimensions => dimensions.to_vec(),
            Then::Arm => arm.into_iter().collect(),
        };
        let mut required: Vec<&str> = family.labels.iter().filter(|l| !l.ends_with('?')).copied().collect();
        let mut allowed: Vec<&str> = family.label_names().collect();
        for list in [&mut required, &mut allowed] {
            list.extend(then.iter().copied());
            list.extend(extra);
        }
        let fits = required.iter().all(|l| have.contains(l)) && have.iter().all(|l| allowed.contains(l));
        let distinct = have.windows(2).all(|w| w[0] != w[1]);
        if !(fits && distinct) {
            problems.push(format!("{line}: labels {have:?}, the table says {allowed:?}"));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// A sample line's name, labels (name, value) and value text.
pub type Sample<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

/// One sample line of a text exposition as (name, labels, value text):
/// `name{a="x",b="y"} 1.5` gives `("name", [("a", "x"), ("b", "y")], "1.5")`.
/// Label values are rankpulse's own or dimension values, which the
/// configuration keeps free of quotes and backslashes.
pub fn sample(line: &str) -> Option<Sample<'_>> {
    let (series, value) = line.rsplit_once(' ')?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let labels = labels
        .split("\",")
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (n, v) = pair.split_once('=')?;
            Some((n.trim_start_matches(','), v.trim_matches('"')))
        })
        .collect::<Option<_>>()?;
    Some((name, labels, value))
}

/// Help text as the text exposition escapes it.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_series_has_help() {
        let mut names = BTreeSet::new();
        for s in table() {
            assert!(names.insert(s.name.as_str()), "{} twice", s.name);
            assert!(s.name.starts_with(PREFIX) && !s.help.is_empty(), "{s:?}");
            assert!(
                s.kind != Kind::Counter
                    || s.name.ends_with("_total")
                    || s.name.ends_with("_sum")
                    || s.name.ends_with("_sum_squares")
                    || s.name.ends_with("_count"),
                "{}: a counter's name says so",
                s.name
            );
        }
    }

    /// docs/metrics.md's reference is the table's; `RANKPULSE_BLESS=1`
    /// rewrites it after a change to the table.
    #[test]
    fn the_metric_reference_in_docs_is_the_table() {
        const BEGIN: &str =
            "<!-- series table: generated from src/series.rs; RANKPULSE_BLESS=1 cargo test series rewrites it -->\n";
        const END: &str = "<!-- end of series table -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let (before, rest) = doc.split_once(BEGIN).expect("docs/metrics.md has the series table's start marker");
        let (table, after) = rest.split_once(END).expect("docs/metrics.md has the series table's end marker");
        let want = reference();
        if table != want {
            if std::env::var_os("RANKPULSE_BLESS").is_some() {
                std::fs::write(&path, format!("{before}{BEGIN}{want}{END}{after}")).unwrap();
            } else {
                panic!(
                    "docs/metrics.md's series table differs from src/series.rs: run RANKPULSE_BLESS=1 cargo test series"
                );
            }
        }
    }

    #[test]
    fn a_sample_line_is_its_name_labels_and_value() {
        assert_eq!(sample("rankpulse_open_lists 3"), Some(("rankpulse_open_lists", vec![], "3")));
        assert_eq!(
            sample(r#"rankpulse_lists{window="1h",ranker="a b"} 2.5"#),
            Some(("rankpulse_lists", vec![("window", "1h"), ("ranker", "a b")], "2.5"))
        );
        assert_eq!(sample("rankpulse_lists{window=\"1h\" 2"), None, "no closing brace");
        assert_eq!(sample("no_value"), None);
    }

    #[test]
    fn the_check_finds_what_disagrees() {
        let ok = "# HELP rankpulse_open_lists Lists still collecting events\n# TYPE rankpulse_open_lists gauge\nrankpulse_open_lists 3\n";
        assert_eq!(check(ok, &[], None), Ok(()));
        let problems = |text: &str| check(text, &["ranker"], Some("ranker")).unwrap_err().join("\n");
        assert!(problems("# TYPE rankpulse_nope gauge\nrankpulse_nope 1\n").contains("not in the series table"));
        assert!(problems("# TYPE rankpulse_open_lists counter\n").contains("the table says gauge"));
        assert!(problems("rankpulse_lists{window=\"1h\"} 3\n").contains("labels"), "a dimension missing");
        assert!(problems("rankpulse_lists{window=\"1h\",ranker=\"a\",x=\"b\"} 3\n").contains("labels"), "one too many");
        assert!(problems("rankpulse_lists{window=\"1h\",window=\"1h\",ranker=\"a\"} 3\n").contains("labels"), "twice");
        assert_eq!(
            check(
                "rankpulse_compare_difference{ranker=\"b\",metric=\"gauc\",window=\"1h\"} 0.1\n",
                &[],
                Some("ranker")
            ),
            Ok(())
        );
        assert_eq!(
            check(
                "rankpulse_ingest_delay_seconds_bucket{le=\"0.5\"} 1\nrankpulse_ingest_delay_seconds_count 1\n",
                &[],
                None
            ),
            Ok(())
        );
    }
}
