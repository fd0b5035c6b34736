//! Publishing: the only place Prometheus metrics are defined.
//!
//! Last stage of the stream. At scrape time (or at the end of a replay) a
//! snapshot of the accumulators and counters is turned into metric
//! families; nothing is touched per event. Names and labels are a public
//! contract (dashboards and alerts depend on them): see the README.

use crate::config::{Config, Span};
use crate::health::{DELAY_BUCKETS, DaemonHealth, DelayHistogram};
use crate::kafka::PartitionState;
use prometheus::proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};
use rankpulse_core::accumulate::{Accumulators, Clusters, Interleaving, Moments};
use rankpulse_core::compare;
use rankpulse_core::debias::{ClickMoments, PositionCounts, Propensities, Weighting};
use rankpulse_core::event::{EventKind, IgnoreReason, RejectReason};
use rankpulse_core::metrics::list::Family;
use rankpulse_core::pipeline::OpsCounters;
use rankpulse_core::sequential;
use rankpulse_core::window::{window_cell, window_cells_by};
use std::collections::BTreeMap;

pub const PREFIX: &str = "rankpulse_";
pub const LABEL_K: &str = "k";
pub const LABEL_WINDOW: &str = "window";
pub const LABEL_METRIC: &str = "metric";
pub const LABEL_REASON: &str = "reason";
pub const LABEL_TOPIC: &str = "topic";
pub const LABEL_TYPE: &str = "type";
pub const LABEL_PARTITION: &str = "partition";
pub const GAUC: &str = "gauc";

/// Everything one exposition shows.
pub struct Snapshot<'a> {
    pub config: &'a Config,
    /// "Now" for the windows: wall clock in the daemon, newest event time in a replay.
    pub now_ms: i64,
    pub accumulators: &'a Accumulators,
    pub counters: &'a OpsCounters,
    pub open_lists: usize,
    /// (topic, partition) → state; empty in a replay.
    pub partitions: &'a BTreeMap<(String, i32), PartitionState>,
    /// Daemon only.
    pub health: Option<&'a DaemonHealth>,
}

struct Families {
    families: BTreeMap<String, MetricFamily>,
}

impl Families {
    fn new() -> Self {
        Families { families: BTreeMap::new() }
    }

    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut MetricFamily {
        self.families.entry(name.to_string()).or_insert_with(|| {
            let mut f = MetricFamily::default();
            f.set_name(name.to_string());
            f.set_help(help.to_string());
            f.set_field_type(kind);
            f
        })
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        let mut g = Gauge::default();
        g.set_value(value);
        let mut m = metric(labels);
        m.set_gauge(g);
        self.family(name, help, MetricType::GAUGE).mut_metric().push(m);
    }

    fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        let mut c = Counter::default();
        c.set_value(value);
        let mut m = metric(labels);
        m.set_counter(c);
        self.family(name, help, MetricType::COUNTER).mut_metric().push(m);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &DelayHistogram) {
        let mut proto = Histogram::default();
        proto.set_sample_count(h.count);
        proto.set_sample_sum(h.sum_seconds);
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(DELAY_BUCKETS.len());
        for (bound, n) in DELAY_BUCKETS.iter().zip(&h.counts) {
            cumulative += n;
            let mut b = Bucket::default();
            b.set_upper_bound(*bound);
            b.set_cumulative_count(cumulative);
            buckets.push(b);
        }
        proto.set_bucket(buckets);
        let mut m = metric(&[]);
        m.set_histogram(proto);
        self.family(name, help, MetricType::HISTOGRAM).mut_metric().push(m);
    }

    fn encode(self) -> String {
        let families: Vec<MetricFamily> = self.families.into_values().filter(|f| !f.get_metric().is_empty()).collect();
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&families, &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

fn metric(labels: &[(&str, &str)]) -> Metric {
    let mut m = Metric::default();
    m.set_label(
        labels
            .iter()
            .map(|(name, value)| {
                let mut l = LabelPair::default();
                l.set_name(name.to_string());
                l.set_value(value.to_string());
                l
            })
            .collect(),
    );
    m
}

fn help_for(family: Family) -> &'static str {
    match family {
        Family::Ndcg => "Mean nDCG@k of the lists whose impression time is in the window",
        Family::Mrr => "Mean reciprocal rank@k (MRR) of the lists in the window",
        Family::Err => "Mean expected reciprocal rank@k of the lists in the window",
        Family::Precision => "Mean precision@k of the lists in the window",
        Family::Recall => "Mean recall@k of the lists in the window",
        Family::Map => "Mean average precision@k (MAP) of the lists in the window",
    }
}

/// Renders the Prometheus text exposition of a snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut f = Families::new();
    let config = s.config;
    let dim_labels = &config.dimensions.labels;
    let cutoffs = config.sorted_cutoffs();
    let k_text: Vec<String> = cutoffs.iter().map(|k| k.to_string()).collect();
    // compare.primary as its labels (metric, k).
    let primary = config.primary_metric().map(|(family, i)| (family.name(), k_text[i].clone()));
    let acc = s.accumulators;
    let randomized = randomized_positions(&mut f, s);
    let propensities = Propensities::in_use(&config.debias.propensities, &randomized);
    propensity_gauges(&mut f, &propensities);

    for (dims, series) in &acc.series {
        let dl: Vec<(&str, &str)> =
            dim_labels.iter().map(String::as_str).zip(dims.iter().map(String::as_str)).collect();
        fn with<'x>(extra: &[(&'x str, &'x str)], dl: &[(&'x str, &'x str)]) -> Vec<(&'x str, &'x str)> {
            let mut v: Vec<(&str, &str)> = extra.to_vec();
            v.extend(dl.iter().copied());
            v
        }
        // Windows.
        for Span { text: window, .. } in &config.windows.spans {
            let span_ms = config.windows.spans.iter().find(|sp| &sp.text == window).map_or(0, Span::ms);
            let cell = window_cell(acc, series, s.now_ms, span_ms);
            f.gauge(
                &format!("{PREFIX}lists"),
                "Lists finalized whose impression time is in the window",
                &with(&[(LABEL_WINDOW, window)], &dl),
                cell.lists as f64,
            );
            for &family in Family::ALL {
                for (i, k) in k_text.iter().enumerate() {
                    let m = cell.family(family, cutoffs.len(), i);
                    window_gauges(
                        &mut f,
                        family.name(),
                        help_for(family),
                        &with(&[(LABEL_K, k), (LABEL_WINDOW, window)], &dl),
                        m,
                    );
                }
            }
            window_gauges(
                &mut f,
                GAUC,
                "GAUC: weighted mean per-list AUC of the lists in the window",
                &with(&[(LABEL_WINDOW, window)], &dl),
                cell.gauc(),
            );
            interleaving_gauges(&mut f, &with(&[(LABEL_WINDOW, window)], &dl), &cell.interleaving);
            if let Some(clicks) = &cell.clicks {
                click_gauges(&mut f, config, &cutoffs, &k_text, &propensities, window, &dl, &clicks.moments);
            }
        }
        // Counters since start.
        let total = series.total();
        for &family in Family::ALL {
            for (i, k) in k_text.iter().enumerate() {
                let m = total.family(family, cutoffs.len(), i);
                total_counters(&mut f, family.name(), &with(&[(LABEL_K, k)], &dl), m);
            }
        }
        total_counters(&mut f, GAUC, &with(&[], &dl), total.gauc());
        if let Some(clicks) = &total.clicks {
            let m = &clicks.moments;
            f.counter(
                &format!("{PREFIX}click_lists_total"),
                "Lists in production order counted by the position-debiased click metrics (debias.max_rank)",
                &with(&[], &dl),
                m.lists as f64,
            );
            for (rank, n) in m.clicks.iter().enumerate().take(m.max_rank()) {
                let r = (rank + 1).to_string();
                f.counter(
                    &format!("{PREFIX}rank_clicks_total"),
                    "Clicks at each rank of those lists: with propensities theta (raised to debias.min_propensity when set), sum over ranks of rate(_total)/theta / rate(rankpulse_click_lists_total) is the IPS clicks@k across instances",
                    &with(&[("rank", &r)], &dl),
                    *n as f64,
                );
            }
        }
        let outcomes = &total.interleaving;
        if outcomes.lists() != 0 {
            for (outcome, n) in [("a_wins", outcomes.a_wins), ("b_wins", outcomes.b_wins), ("tie", outcomes.ties)] {
                f.counter(
                    &format!("{PREFIX}interleaving_outcomes_total"),
                    "Team-draft interleaved lists with a click on a team's result, by outcome (team A is the candidate)",
                    &with(&[("outcome", outcome)], &dl),
                    n as f64,
                );
            }
            if let (Ok(wins), Ok(losses)) = (u64::try_from(outcomes.a_wins), u64::try_from(outcomes.b_wins))
                && let Some((p, _)) = sequential::sign_mixture(wins, losses, config.compare.interleaving_effect)
            {
                f.gauge(
                    &format!("{PREFIX}interleaving_sequential_p_value"),
                    "Always-valid p-value of A wins against B wins since start (normal-mixture sign test, compare.interleaving_effect): below compare.alpha, one team is preferred, however often it is read",
                    &with(&[], &dl),
                    p,
                );
            }
        }
        if let Some((metric, k)) = &primary
            && !series.clusters.is_empty()
        {
            primary_counters(&mut f, &with(&[(LABEL_METRIC, metric), (LABEL_K, k.as_str())], &dl), &series.clusters);
        }
        f.counter(
            &format!("{PREFIX}lists_finalized_total"),
            "Lists finalized and scored since start",
            &with(&[], &dl),
            total.lists as f64,
        );
        for ((metric, reason), n) in &series.excluded {
            f.counter(
                &format!("{PREFIX}lists_excluded_total"),
                "Lists left out of a metric's mean since start, by metric and reason",
                &with(&[(LABEL_METRIC, metric.name()), (LABEL_REASON, reason.as_str())], &dl),
                *n as f64,
            );
        }
        for (kind, n) in &series.no_relevant {
            f.counter(
                &format!("{PREFIX}lists_no_relevant_total"),
                "Lists with nothing relevant judged (kind graded: no positive grade; binary: none at the threshold), whatever metrics.no_relevant says",
                &with(&[("kind", kind.as_str())], &dl),
                *n as f64,
            );
        }
    }

    comparisons(&mut f, s, &cutoffs, &k_text);
    sequential_comparisons(&mut f, s);

    // Operation.
    for ((topic, kind), n) in &s.counters.events {
        f.counter(
            &format!("{PREFIX}events_total"),
            "Events accepted, by topic and type",
            &[(LABEL_TOPIC, topic), (LABEL_TYPE, kind.as_str())],
            *n as f64,
        );
    }
    for &reason in RejectReason::ALL {
        let n = s.counters.rejected.get(&reason).copied().unwrap_or(0);
        f.counter(
            &format!("{PREFIX}events_rejected_total"),
            "Messages rejected, by reason; a rejected message changes no metric",
            &[(LABEL_REASON, reason.as_str())],
            n as f64,
        );
    }
    for &reason in IgnoreReason::ALL {
        let n = s.counters.ignored.get(&reason).copied().unwrap_or(0);
        f.counter(
            &format!("{PREFIX}events_ignored_total"),
            "Valid messages that score nothing (UBI actions not in judgments.actions, _bulk action lines and update bodies), by reason",
            &[(LABEL_REASON, reason.as_str())],
            n as f64,
        );
    }
    for kind in [EventKind::Impression, EventKind::Judgment] {
        let n = s.counters.duplicates.get(&kind).copied().unwrap_or(0);
        f.counter(
            &format!("{PREFIX}events_duplicate_total"),
            "Events ignored because their event_id was already applied to the list",
            &[(LABEL_TYPE, kind.as_str())],
            n as f64,
        );
    }
    f.counter(
        &format!("{PREFIX}orphan_lists_total"),
        "Lists that ended with judgments but no impression (nothing to score)",
        &[],
        s.counters.orphans as f64,
    );
    f.counter(
        &format!("{PREFIX}lists_evicted_total"),
        "Lists finalized before their gap because session.max_open_lists was reached",
        &[],
        s.counters.evicted as f64,
    );
    f.counter(
        &format!("{PREFIX}late_lists_forgotten_total"),
        "Final lists forgotten before late.horizon because session.max_open_lists final lists were kept; a late judgment of one becomes an orphan list",
        &[],
        s.counters.forgotten as f64,
    );
    f.counter(
        &format!("{PREFIX}sessions_evicted_total"),
        "Sessions forgotten before compare.session_timeout to stay within compare.max_sessions; a later list of one starts a new session in the session-clustered variance",
        &[],
        s.counters.sessions_evicted as f64,
    );
    for (outcome, n) in [("amended", s.counters.late_amended), ("dropped", s.counters.late_dropped)] {
        f.counter(
            &format!("{PREFIX}late_judgments_total"),
            "Judgments (and impressions: UBI impression events, later pages) for lists already final, within late.horizon: amended (list re-scored) or dropped (late.policy)",
            &[("outcome", outcome)],
            n as f64,
        );
    }
    for (i, label) in s.config.dimensions.labels.iter().enumerate() {
        let n = s.counters.dimension_overflow.get(&i).copied().unwrap_or(0);
        f.counter(
            &format!("{PREFIX}dimension_overflow_total"),
            "Impressions whose value of a dimension label was reported as __other__ (dimensions.max_values reached, or the value longer than dimensions.max_value_bytes)",
            &[("label", label)],
            n as f64,
        );
    }
    f.counter(
        &format!("{PREFIX}dimension_combinations_overflow_total"),
        "Impressions of a new combination of dimension values reported as __other__ on every label (dimensions.max_combinations reached)",
        &[],
        s.counters.combination_overflow as f64,
    );
    f.counter(
        &format!("{PREFIX}position_conflicts_total"),
        "Results dropped because their list already showed another document at that position (two searches under one list key), since the process started",
        &[],
        s.counters.positions_taken as f64,
    );
    f.counter(
        &format!("{PREFIX}dimension_conflicts_total"),
        "Impressions whose value of a dimension label differs from the one their list holds (the earliest impression's is kept), since the process started",
        &[],
        s.counters.dimension_conflicts as f64,
    );
    f.gauge(&format!("{PREFIX}open_lists"), "Lists still collecting events", &[], s.open_lists as f64);
    if let Some(h) = s.health {
        f.gauge(
            &format!("{PREFIX}kafka_connected"),
            "1 while a connection to a Kafka broker is up, 0 during an outage",
            &[],
            if h.kafka_connected { 1.0 } else { 0.0 },
        );
        f.gauge(
            &format!("{PREFIX}kafka_outage_seconds"),
            "How long the current broker outage has lasted (0 when connected)",
            &[],
            h.kafka_outage_seconds,
        );
        f.counter(&format!("{PREFIX}kafka_outages_total"), "Broker outages since start", &[], h.kafka_outages as f64);
        for (change, n) in [("assigned", h.partitions_assigned), ("revoked", h.partitions_revoked)] {
            f.counter(
                &format!("{PREFIX}partitions_rebalanced_total"),
                "Topic-partitions assigned to or revoked from this instance by consumer-group rebalances (an expired session revokes them all)",
                &[("change", change)],
                n as f64,
            );
        }
        f.counter(
            &format!("{PREFIX}topic_pauses_total"),
            "Times a topic-partition was held back (not read) for running more than kafka.max_topic_drift ahead of its partition's slowest topic in event time",
            &[],
            h.topic_pauses as f64,
        );
        f.counter(
            &format!("{PREFIX}http_connections_timed_out_total"),
            "HTTP connections closed by a bound: no request within 30 s of connecting, or an answer not taken within 5 s of closing",
            &[],
            h.http_timed_out as f64,
        );
        f.counter(
            &format!("{PREFIX}http_connection_slots_full_total"),
            "Times all 256 HTTP connection slots were taken (more connections wait in the listen backlog)",
            &[],
            h.http_slots_full as f64,
        );
        f.histogram(
            &format!("{PREFIX}ingest_delay_seconds"),
            "Delay from a message's Kafka timestamp (producer or log-append time) to the moment rankpulse applied it",
            &h.ingest_delay,
        );
        f.histogram(
            &format!("{PREFIX}consumer_loop_gap_seconds"),
            "Time between two messages handled by the consumer loop while more were already fetched: how long publishing, checkpoints and rebalances held the stream up",
            &h.loop_gaps,
        );
        f.histogram(
            &format!("{PREFIX}consumer_tick_seconds"),
            "Time each tick of the consumer loop took (closing lists due, commits, handing the publisher its view), during which no message is read",
            &h.ticks,
        );
        if s.config.state.enabled() {
            f.counter(&format!("{PREFIX}checkpoints_total"), "Checkpoints written", &[], h.checkpoints as f64);
            f.counter(
                &format!("{PREFIX}checkpoint_failures_total"),
                "Checkpoints that could not be written (offsets are not committed then)",
                &[],
                h.checkpoint_failures as f64,
            );
            f.counter(
                &format!("{PREFIX}state_fenced_total"),
                "Partitions this instance gave up because another instance had claimed them in state.topic while this one still checkpointed them (a zombie fenced; Kafka backend only)",
                &[],
                h.state_fenced as f64,
            );
            f.gauge(
                &format!("{PREFIX}partitions_held"),
                "Partitions assigned to this instance but held (paused, not counted) until their hand-over from state.topic succeeds: it failed, or they were fenced while still assigned here (Kafka backend only)",
                &[],
                h.partitions_held as f64,
            );
            if let Some(t) = h.last_checkpoint_seconds {
                f.gauge(
                    &format!("{PREFIX}last_checkpoint_timestamp_seconds"),
                    "Wall time of the last checkpoint; /metrics shows the state it covers",
                    &[],
                    t,
                );
            }
            f.counter(
                &format!("{PREFIX}messages_covered_total"),
                "Messages re-delivered after a restart or rebalance and skipped because a checkpoint already covers them",
                &[],
                h.skipped_covered as f64,
            );
        }
        if !s.config.kafka.dead_letter_topic.is_empty() {
            for (outcome, n) in [("sent", h.dead_letters), ("failed", h.dead_letter_failures)] {
                f.counter(
                    &format!("{PREFIX}dead_letters_total"),
                    "Invalid messages copied to kafka.dead_letter_topic: acknowledged by the broker (sent) or failed for good",
                    &[("outcome", outcome)],
                    n as f64,
                );
            }
        }
    }
    // Event time per partition number (all topics: they are co-partitioned).
    let mut newest: BTreeMap<i32, f64> = BTreeMap::new();
    let mut messages: BTreeMap<&str, u64> = BTreeMap::new();
    for ((topic, partition), state) in s.partitions {
        *messages.entry(topic.as_str()).or_default() += state.messages;
        let p = partition.to_string();
        if let Some(lag) = state.lag {
            f.gauge(
                &format!("{PREFIX}consumer_lag"),
                "Messages between the partition's high watermark and the offset committed (librdkafka's consumer_lag)",
                &[(LABEL_TOPIC, topic), (LABEL_PARTITION, &p)],
                lag as f64,
            );
        }
        if let Some(ts) = state.last_event_seconds {
            let e = newest.entry(*partition).or_insert(ts);
            *e = e.max(ts);
        }
    }
    for (topic, n) in messages {
        f.counter(
            &format!("{PREFIX}messages_total"),
            "Messages consumed from the topic and applied, whatever became of them: accepted, rejected, ignored or duplicate (not those a checkpoint already covered); since the process started",
            &[(LABEL_TOPIC, topic)],
            n as f64,
        );
    }
    for (partition, ts) in newest {
        f.gauge(
            &format!("{PREFIX}last_event_timestamp_seconds"),
            "Event time of the newest event consumed from the partition (any topic)",
            &[(LABEL_PARTITION, &partition.to_string())],
            ts,
        );
    }
    f.gauge(&format!("{PREFIX}build_info"), "Build information", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    f.encode()
}

/// The session sums of the primary metric since start: with its `_sum`
/// and `_count`, what the session-clustered variance needs, exact over
/// instances (docs/metrics.md, "What a page means").
fn primary_counters(f: &mut Families, labels: &[(&str, &str)], c: &Clusters) {
    let (s_sq, cross, n_sq) = c.sums();
    f.counter(
        &format!("{PREFIX}primary_sessions_total"),
        "Sessions with a list of compare.primary since start (a session idle for compare.session_timeout counts again)",
        labels,
        c.sessions as f64,
    );
    f.counter(
        &format!("{PREFIX}primary_session_sum_squares_total"),
        "Sum over sessions of S^2, S a session's sum of per-list compare.primary values",
        labels,
        s_sq,
    );
    f.counter(
        &format!("{PREFIX}primary_session_sum_lists_total"),
        "Sum over sessions of S*N, S a session's sum of per-list compare.primary values and N its lists",
        labels,
        cross,
    );
    f.counter(
        &format!("{PREFIX}primary_session_lists_squares_total"),
        "Sum over sessions of N^2, N a session's lists with a compare.primary value",
        labels,
        n_sq,
    );
}

/// `rankpulse_compare_sequential_*`: every arm against `compare.baseline`
/// on the primary metric, from the arms' first lists (since-start totals
/// merged over the other labels), sessions as the unit: the anytime-valid
/// decision. Per instance; the alert rules compute the same from the
/// counters summed over instances.
fn sequential_comparisons(f: &mut Families, s: &Snapshot) {
    let config = s.config;
    let c = &config.compare;
    let (Some(arm_index), Some((family, i))) = (c.arm_index(&config.dimensions.labels), config.primary_metric()) else {
        return;
    };
    let arm_label = config.dimensions.labels[arm_index].as_str();
    let k = config.sorted_cutoffs()[i].to_string();
    let arms = sequential::arms(s.accumulators, arm_index, family, i);
    let clustered: BTreeMap<&str, (sequential::ClusteredMean, &Moments)> = arms
        .iter()
        .filter_map(|(arm, (m, cl))| Some((arm.as_str(), (sequential::clustered_mean(m, cl)?, m))))
        .collect();
    for (arm, (mean, moments)) in &clustered {
        if let Some(d) = mean.design_effect(moments) {
            f.gauge(
                &format!("{PREFIX}primary_design_effect"),
                "Session-clustered variance of the arm's compare.primary mean since start over the variance that takes lists as independent",
                &[(arm_label, arm), (LABEL_METRIC, family.name()), (LABEL_K, &k)],
                d,
            );
        }
    }
    let Some((baseline, _)) = clustered.get(c.baseline.as_str()) else { return };
    for (arm, (candidate, _)) in clustered.iter().filter(|(arm, _)| c.compares(arm)) {
        let Some(test) = sequential::mixture(candidate, baseline, c.mixture_sd, c.alpha) else { continue };
        let labels = [(arm_label, *arm), (LABEL_METRIC, family.name()), (LABEL_K, k.as_str())];
        for (name, help, value) in [
            (
                "compare_sequential_difference",
                "compare.primary: mean of the arm minus mean of compare.baseline since their first lists",
                test.difference,
            ),
            (
                "compare_sequential_stderr",
                "Standard error of rankpulse_compare_sequential_difference, sessions as clusters",
                test.variance.sqrt(),
            ),
            (
                "compare_sequential_lower",
                "Lower bound of the confidence sequence of rankpulse_compare_sequential_difference at level 1 - compare.alpha: valid at every moment at once",
                test.lower,
            ),
            (
                "compare_sequential_upper",
                "Upper bound of the confidence sequence of rankpulse_compare_sequential_difference at level 1 - compare.alpha: valid at every moment at once",
                test.upper,
            ),
            (
                "compare_sequential_p_value",
                "Always-valid p-value of rankpulse_compare_sequential_difference (mixture SPRT, scale compare.mixture_sd): below compare.alpha exactly when the confidence sequence excludes 0",
                test.p_value,
            ),
        ] {
            f.gauge(&format!("{PREFIX}{name}"), help, &labels, value);
        }
    }
}

/// `rankpulse_compare_*`: every arm against `compare.baseline`, per metric
/// and window, from the arms' windows merged over the other labels. Per
/// instance, like every window gauge; the alert rules compare arms across
/// instances from the exact `_sum`/`_sum_squares`/`_count` counters.
fn comparisons(f: &mut Families, s: &Snapshot, cutoffs: &[usize], k_text: &[String]) {
    let config = s.config;
    let c = &config.compare;
    let Some(arm_index) = c.arm_index(&config.dimensions.labels) else { return };
    let arm_label = config.dimensions.labels[arm_index].as_str();
    for span in &config.windows.spans {
        let arms = window_cells_by(s.accumulators, arm_index, s.now_ms, span.ms());
        let Some(baseline) = arms.get(&c.baseline) else { continue };
        for (arm, cell) in arms.iter().filter(|(arm, _)| c.compares(arm)) {
            let mut emit = |metric: &str, k: Option<&str>, candidate: &Moments, base: &Moments| {
                let mut labels = vec![(arm_label, arm.as_str()), (LABEL_METRIC, metric)];
                labels.extend(k.map(|k| (LABEL_K, k)));
                labels.push((LABEL_WINDOW, span.text.as_str()));
                let Some(cmp) = compare::welch(candidate, base) else { return };
                f.gauge(
                    &format!("{PREFIX}compare_difference"),
                    "Mean of the arm minus mean of compare.baseline, lists in the window (merged over the other labels)",
                    &labels,
                    cmp.difference,
                );
                f.gauge(
                    &format!("{PREFIX}compare_stderr"),
                    "Standard error of rankpulse_compare_difference (Welch: sqrt(se_arm^2 + se_baseline^2))",
                    &labels,
                    cmp.stderr,
                );
                if let Some(p) = cmp.p_value {
                    f.gauge(
                        &format!("{PREFIX}compare_p_value"),
                        "Two-sided p-value of rankpulse_compare_difference (Welch's t-test)",
                        &labels,
                        p,
                    );
                }
                if let Some(n) = compare::lists_needed(candidate, base, c.effect, c.alpha, c.power) {
                    f.gauge(
                        &format!("{PREFIX}compare_lists_needed"),
                        "Lists per arm needed to detect a difference of compare.effect at level compare.alpha with probability compare.power, at the window's per-list variances",
                        &labels,
                        n,
                    );
                }
            };
            for &family in Family::ALL {
                for (i, k) in k_text.iter().enumerate() {
                    emit(
                        family.name(),
                        Some(k),
                        cell.family(family, cutoffs.len(), i),
                        baseline.family(family, cutoffs.len(), i),
                    );
                }
            }
            emit(GAUC, None, cell.gauc(), baseline.gauc());
        }
    }
}

/// The randomized lists' counts per rank of every series since start, which
/// the estimated propensities come from, exposed as counters. Empty when
/// debias is off.
fn randomized_positions(f: &mut Families, s: &Snapshot) -> PositionCounts {
    let d = &s.config.debias;
    if d.max_rank == 0 {
        return PositionCounts::default();
    }
    let counts = s.accumulators.randomized_positions(d.max_rank);
    for (rank, (lists, clicks)) in counts.lists.iter().zip(&counts.clicks).enumerate().take(counts.max_rank()) {
        let r = (rank + 1).to_string();
        f.counter(
            &format!("{PREFIX}randomized_lists_total"),
            "Randomized lists (impressions flagged randomized) with a result at the rank",
            &[("rank", &r)],
            *lists as f64,
        );
        f.counter(
            &format!("{PREFIX}randomized_clicks_total"),
            "Clicks at the rank in randomized lists: the click-through rate per rank is proportional to its propensity",
            &[("rank", &r)],
            *clicks as f64,
        );
    }
    counts
}

/// The propensities the IPS gauges use (`debias.propensities`, else
/// estimated), one gauge per rank that has one.
fn propensity_gauges(f: &mut Families, propensities: &Propensities<'_>) {
    for (rank, p) in propensities.theta.iter().enumerate().filter(|(_, p)| p.is_finite()) {
        f.gauge(
            &format!("{PREFIX}position_propensity"),
            "Examination propensity of the rank under the position-based model, relative to rank 1 (debias.propensities divided by their first value, else estimated from randomized lists since start)",
            &[("rank", &(rank + 1).to_string())],
            *p,
        );
    }
}

/// Unweighted and IPS-weighted clicks@k and click-DCG@k of a window, for
/// the cutoffs within `debias.max_rank`.
#[allow(clippy::too_many_arguments)]
fn click_gauges(
    f: &mut Families,
    config: &Config,
    cutoffs: &[usize],
    k_text: &[String],
    propensities: &Propensities<'_>,
    window: &str,
    dl: &[(&str, &str)],
    moments: &ClickMoments,
) {
    let clip = (config.debias.min_propensity > 0.0).then_some(config.debias.min_propensity);
    let ips = propensities.weighting(clip);
    for (k, k_label) in cutoffs.iter().zip(k_text) {
        let mut labels = vec![(LABEL_K, k_label.as_str()), (LABEL_WINDOW, window)];
        labels.extend(dl.iter().copied());
        let series = [
            (
                "clicks",
                "Mean clicks in the top k per list (biased by position)",
                moments.clicks_at(*k, Weighting::Unweighted),
            ),
            (
                "clicks_ips",
                "Mean clicks in the top k per list, each weighted by 1/propensity of its rank (IPS)",
                moments.clicks_at(*k, ips),
            ),
            (
                "click_dcg",
                "Mean DCG@k of the clicks per list (gain 1 per click, biased by position)",
                moments.dcg_at(*k, Weighting::Unweighted),
            ),
            (
                "click_dcg_ips",
                "Mean DCG@k of the clicks per list, each click weighted by 1/propensity of its rank (IPS)",
                moments.dcg_at(*k, ips),
            ),
        ];
        for (name, help, value) in series {
            let Some((mean, se)) = value else { continue };
            f.gauge(&format!("{PREFIX}{name}"), help, &labels, mean);
            if let Some(se) = se {
                f.gauge(
                    &format!("{PREFIX}{name}_stderr"),
                    &format!(
                        "Standard error of rankpulse_{name} (click sampling, and the estimated propensities' own error)"
                    ),
                    &labels,
                    se,
                );
            }
        }
    }
}

/// `rankpulse_interleaving_{lists,delta,p_value}` of a window that holds
/// interleaved lists with an outcome.
fn interleaving_gauges(f: &mut Families, labels: &[(&str, &str)], outcomes: &Interleaving) {
    let (wins, losses, ties) = (outcomes.a_wins, outcomes.b_wins, outcomes.ties);
    let (Ok(wins), Ok(losses), Ok(ties)) = (u64::try_from(wins), u64::try_from(losses), u64::try_from(ties)) else {
        return;
    };
    // Only a corrupt checkpoint comes near u64::MAX.
    let Some(lists) = wins.checked_add(losses).and_then(|n| n.checked_add(ties)) else { return };
    let Some(delta) = compare::interleaving_delta(wins, losses, ties) else { return };
    f.gauge(
        &format!("{PREFIX}interleaving_lists"),
        "Interleaved lists in the window with a click on a team's result",
        labels,
        lists as f64,
    );
    f.gauge(
        &format!("{PREFIX}interleaving_delta"),
        "(A wins + ties/2) / lists - 1/2 of the interleaved lists in the window: above 0, the candidate (team A) is preferred",
        labels,
        delta,
    );
    if let Some(p) = compare::sign_test(wins, losses) {
        f.gauge(
            &format!("{PREFIX}interleaving_p_value"),
            "Two-sided sign test of A wins against B wins in the window (ties left out)",
            labels,
            p,
        );
    }
}

/// `rankpulse_<m>` (mean) and `rankpulse_<m>_stderr`, when defined.
fn window_gauges(f: &mut Families, name: &str, help: &str, labels: &[(&str, &str)], m: &Moments) {
    if let Some(mean) = m.mean() {
        f.gauge(&format!("{PREFIX}{name}"), help, labels, mean);
    }
    if let Some(se) = m.stderr() {
        f.gauge(&format!("{PREFIX}{name}_stderr"), &format!("Standard error of rankpulse_{name}"), labels, se);
    }
}

/// `rankpulse_<m>_sum` and `_count` since start: rate(_sum)/rate(_count) is
/// an exact mean across any number of instances.
fn total_counters(f: &mut Families, name: &str, labels: &[(&str, &str)], m: &Moments) {
    f.counter(
        &format!("{PREFIX}{name}_sum"),
        &format!("Sum of per-list {name} values since start (GAUC: weight times AUC)"),
        labels,
        m.weighted_sum(),
    );
    f.counter(
        &format!("{PREFIX}{name}_sum_squares"),
        &format!(
            "Sum of squared per-list {name} values since start (GAUC: weight times AUC squared): \
             variance = rate(_sum_squares)/rate(_count) - mean^2"
        ),
        labels,
        m.weighted_sum_squares(),
    );
    f.counter(
        &format!("{PREFIX}{name}_count"),
        &format!("Lists counted in rankpulse_{name}_sum since start (GAUC: total weight)"),
        labels,
        m.weight as f64,
    );
}
