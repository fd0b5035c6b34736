//! Publishing: the only place Prometheus metrics are defined.
//!
//! Last stage of the stream. At scrape time (or at the end of a replay) a
//! snapshot of the accumulators and counters is turned into metric
//! families; nothing is touched per event. Names and labels are a public
//! contract (dashboards and alerts depend on them): see the README.

use crate::config::{Config, Span};
use crate::health::{DELAY_BUCKETS, DaemonHealth, DelayHistogram};
use crate::kafka::PartitionState;
use crate::series::{self, PREFIX};
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

    /// The family `name`, with its help from [`crate::series`]. A name
    /// missing there gets no help; the tests that hold expositions to the
    /// table fail on it.
    fn family(&mut self, name: &str, kind: MetricType) -> &mut MetricFamily {
        self.families.entry(name.to_string()).or_insert_with(|| {
            let mut f = MetricFamily::default();
            f.set_name(name.to_string());
            f.set_help(series::get(name).map_or_else(String::new, |s| s.help.clone()));
            f.set_field_type(kind);
            f
        })
    }

    fn gauge(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let mut g = Gauge::default();
        g.set_value(value);
        let mut m = metric(labels);
        m.set_gauge(g);
        self.family(name, MetricType::GAUGE).mut_metric().push(m);
    }

    fn counter(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let mut c = Counter::default();
        c.set_value(value);
        let mut m = metric(labels);
        m.set_counter(c);
        self.family(name, MetricType::COUNTER).mut_metric().push(m);
    }

    fn histogram(&mut self, name: &str, h: &DelayHistogram) {
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
        self.family(name, MetricType::HISTOGRAM).mut_metric().push(m);
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
            f.gauge(&format!("{PREFIX}lists"), &with(&[(LABEL_WINDOW, window)], &dl), cell.lists as f64);
            for &family in Family::ALL {
                for (i, k) in k_text.iter().enumerate() {
                    let m = cell.family(family, cutoffs.len(), i);
                    window_gauges(&mut f, family.name(), &with(&[(LABEL_K, k), (LABEL_WINDOW, window)], &dl), m);
                }
            }
            window_gauges(&mut f, GAUC, &with(&[(LABEL_WINDOW, window)], &dl), cell.gauc());
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
            f.counter(&format!("{PREFIX}click_lists_total"), &with(&[], &dl), m.lists as f64);
            for (rank, n) in m.clicks.iter().enumerate().take(m.max_rank()) {
                let r = (rank + 1).to_string();
                f.counter(&format!("{PREFIX}rank_clicks_total"), &with(&[("rank", &r)], &dl), *n as f64);
            }
        }
        let outcomes = &total.interleaving;
        if outcomes.lists() != 0 {
            for (outcome, n) in [("a_wins", outcomes.a_wins), ("b_wins", outcomes.b_wins), ("tie", outcomes.ties)] {
                f.counter(
                    &format!("{PREFIX}interleaving_outcomes_total"),
                    &with(&[("outcome", outcome)], &dl),
                    n as f64,
                );
            }
            if let (Ok(wins), Ok(losses)) = (u64::try_from(outcomes.a_wins), u64::try_from(outcomes.b_wins))
                && let Some((p, _)) = sequential::sign_mixture(wins, losses, config.compare.interleaving_effect)
            {
                f.gauge(&format!("{PREFIX}interleaving_sequential_p_value"), &with(&[], &dl), p);
            }
        }
        if let Some((metric, k)) = &primary
            && !series.clusters.is_empty()
        {
            primary_counters(&mut f, &with(&[(LABEL_METRIC, metric), (LABEL_K, k.as_str())], &dl), &series.clusters);
        }
        f.counter(&format!("{PREFIX}lists_finalized_total"), &with(&[], &dl), total.lists as f64);
        for ((metric, reason), n) in &series.excluded {
            f.counter(
                &format!("{PREFIX}lists_excluded_total"),
                &with(&[(LABEL_METRIC, metric.name()), (LABEL_REASON, reason.as_str())], &dl),
                *n as f64,
            );
        }
        for (kind, n) in &series.no_relevant {
            f.counter(&format!("{PREFIX}lists_no_relevant_total"), &with(&[("kind", kind.as_str())], &dl), *n as f64);
        }
    }

    comparisons(&mut f, s, &cutoffs, &k_text);
    sequential_comparisons(&mut f, s);

    // Operation.
    for ((topic, kind), n) in &s.counters.events {
        f.counter(&format!("{PREFIX}events_total"), &[(LABEL_TOPIC, topic), (LABEL_TYPE, kind.as_str())], *n as f64);
    }
    for &reason in RejectReason::ALL {
        let n = s.counters.rejected.get(&reason).copied().unwrap_or(0);
        f.counter(&format!("{PREFIX}events_rejected_total"), &[(LABEL_REASON, reason.as_str())], n as f64);
    }
    for &reason in IgnoreReason::ALL {
        let n = s.counters.ignored.get(&reason).copied().unwrap_or(0);
        f.counter(&format!("{PREFIX}events_ignored_total"), &[(LABEL_REASON, reason.as_str())], n as f64);
    }
    for kind in [EventKind::Impression, EventKind::Judgment] {
        let n = s.counters.duplicates.get(&kind).copied().unwrap_or(0);
        f.counter(&format!("{PREFIX}events_duplicate_total"), &[(LABEL_TYPE, kind.as_str())], n as f64);
    }
    f.counter(&format!("{PREFIX}orphan_lists_total"), &[], s.counters.orphans as f64);
    f.counter(&format!("{PREFIX}lists_evicted_total"), &[], s.counters.evicted as f64);
    f.counter(&format!("{PREFIX}late_lists_forgotten_total"), &[], s.counters.forgotten as f64);
    f.counter(&format!("{PREFIX}sessions_evicted_total"), &[], s.counters.sessions_evicted as f64);
    for (outcome, n) in [("amended", s.counters.late_amended), ("dropped", s.counters.late_dropped)] {
        f.counter(&format!("{PREFIX}late_judgments_total"), &[("outcome", outcome)], n as f64);
    }
    for (i, label) in s.config.dimensions.labels.iter().enumerate() {
        let n = s.counters.dimension_overflow.get(&i).copied().unwrap_or(0);
        f.counter(&format!("{PREFIX}dimension_overflow_total"), &[("label", label)], n as f64);
    }
    f.counter(&format!("{PREFIX}dimension_combinations_overflow_total"), &[], s.counters.combination_overflow as f64);
    f.counter(&format!("{PREFIX}position_conflicts_total"), &[], s.counters.positions_taken as f64);
    f.counter(&format!("{PREFIX}dimension_conflicts_total"), &[], s.counters.dimension_conflicts as f64);
    f.gauge(&format!("{PREFIX}open_lists"), &[], s.open_lists as f64);
    if let Some(h) = s.health {
        f.gauge(&format!("{PREFIX}kafka_connected"), &[], if h.kafka_connected { 1.0 } else { 0.0 });
        f.gauge(&format!("{PREFIX}kafka_outage_seconds"), &[], h.kafka_outage_seconds);
        f.counter(&format!("{PREFIX}kafka_outages_total"), &[], h.kafka_outages as f64);
        for (change, n) in [("assigned", h.partitions_assigned), ("revoked", h.partitions_revoked)] {
            f.counter(&format!("{PREFIX}partitions_rebalanced_total"), &[("change", change)], n as f64);
        }
        f.counter(&format!("{PREFIX}topic_pauses_total"), &[], h.topic_pauses as f64);
        f.counter(&format!("{PREFIX}http_connections_timed_out_total"), &[], h.http_timed_out as f64);
        f.counter(&format!("{PREFIX}http_connection_slots_full_total"), &[], h.http_slots_full as f64);
        for (reason, n) in h.http_refused {
            f.counter(&format!("{PREFIX}http_refused_total"), &[("reason", reason)], n as f64);
        }
        f.counter(&format!("{PREFIX}web_config_reload_failures_total"), &[], h.web_config_reload_failures as f64);
        f.histogram(&format!("{PREFIX}ingest_delay_seconds"), &h.ingest_delay);
        f.histogram(&format!("{PREFIX}consumer_loop_gap_seconds"), &h.loop_gaps);
        f.histogram(&format!("{PREFIX}consumer_tick_seconds"), &h.ticks);
        if s.config.state.enabled() {
            f.counter(&format!("{PREFIX}checkpoints_total"), &[], h.checkpoints as f64);
            f.counter(&format!("{PREFIX}checkpoint_failures_total"), &[], h.checkpoint_failures as f64);
            f.counter(&format!("{PREFIX}state_fenced_total"), &[], h.state_fenced as f64);
            f.gauge(&format!("{PREFIX}partitions_held"), &[], h.partitions_held as f64);
            if let Some(t) = h.last_checkpoint_seconds {
                f.gauge(&format!("{PREFIX}last_checkpoint_timestamp_seconds"), &[], t);
            }
            f.counter(&format!("{PREFIX}messages_covered_total"), &[], h.skipped_covered as f64);
        }
        if !s.config.kafka.dead_letter_topic.is_empty() {
            for (outcome, n) in [("sent", h.dead_letters), ("failed", h.dead_letter_failures)] {
                f.counter(&format!("{PREFIX}dead_letters_total"), &[("outcome", outcome)], n as f64);
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
            f.gauge(&format!("{PREFIX}consumer_lag"), &[(LABEL_TOPIC, topic), (LABEL_PARTITION, &p)], lag as f64);
        }
        if let Some(ts) = state.last_event_seconds {
            let e = newest.entry(*partition).or_insert(ts);
            *e = e.max(ts);
        }
    }
    for (topic, n) in messages {
        f.counter(&format!("{PREFIX}messages_total"), &[(LABEL_TOPIC, topic)], n as f64);
    }
    for (partition, ts) in newest {
        f.gauge(&format!("{PREFIX}last_event_timestamp_seconds"), &[(LABEL_PARTITION, &partition.to_string())], ts);
    }
    f.gauge(&format!("{PREFIX}build_info"), &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    f.encode()
}

/// The session sums of the primary metric since start: with its `_sum`
/// and `_count`, what the session-clustered variance needs, exact over
/// instances (docs/metrics.md, "What a page means").
fn primary_counters(f: &mut Families, labels: &[(&str, &str)], c: &Clusters) {
    let (s_sq, cross, n_sq) = c.sums();
    f.counter(&format!("{PREFIX}primary_sessions_total"), labels, c.sessions as f64);
    f.counter(&format!("{PREFIX}primary_session_sum_squares_total"), labels, s_sq);
    f.counter(&format!("{PREFIX}primary_session_sum_lists_total"), labels, cross);
    f.counter(&format!("{PREFIX}primary_session_lists_squares_total"), labels, n_sq);
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
                &[(arm_label, arm), (LABEL_METRIC, family.name()), (LABEL_K, &k)],
                d,
            );
        }
    }
    let Some((baseline, _)) = clustered.get(c.baseline.as_str()) else { return };
    for (arm, (candidate, _)) in clustered.iter().filter(|(arm, _)| c.compares(arm)) {
        let Some(test) = sequential::mixture(candidate, baseline, c.mixture_sd, c.alpha) else { continue };
        let labels = [(arm_label, *arm), (LABEL_METRIC, family.name()), (LABEL_K, k.as_str())];
        for (name, value) in [
            ("compare_sequential_difference", test.difference),
            ("compare_sequential_stderr", test.variance.sqrt()),
            ("compare_sequential_lower", test.lower),
            ("compare_sequential_upper", test.upper),
            ("compare_sequential_p_value", test.p_value),
        ] {
            f.gauge(&format!("{PREFIX}{name}"), &labels, value);
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
                f.gauge(&format!("{PREFIX}compare_difference"), &labels, cmp.difference);
                f.gauge(&format!("{PREFIX}compare_stderr"), &labels, cmp.stderr);
                if let Some(p) = cmp.p_value {
                    f.gauge(&format!("{PREFIX}compare_p_value"), &labels, p);
                }
                if let Some(n) = compare::lists_needed(candidate, base, c.effect, c.alpha, c.power) {
                    f.gauge(&format!("{PREFIX}compare_lists_needed"), &labels, n);
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
        f.counter(&format!("{PREFIX}randomized_lists_total"), &[("rank", &r)], *lists as f64);
        f.counter(&format!("{PREFIX}randomized_clicks_total"), &[("rank", &r)], *clicks as f64);
    }
    counts
}

/// The propensities the IPS gauges use (`debias.propensities`, else
/// estimated), one gauge per rank that has one.
fn propensity_gauges(f: &mut Families, propensities: &Propensities<'_>) {
    for (rank, p) in propensities.theta.iter().enumerate().filter(|(_, p)| p.is_finite()) {
        f.gauge(&format!("{PREFIX}position_propensity"), &[("rank", &(rank + 1).to_string())], *p);
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
            ("clicks", moments.clicks_at(*k, Weighting::Unweighted)),
            ("clicks_ips", moments.clicks_at(*k, ips)),
            ("click_dcg", moments.dcg_at(*k, Weighting::Unweighted)),
            ("click_dcg_ips", moments.dcg_at(*k, ips)),
        ];
        for (name, value) in series {
            let Some((mean, se)) = value else { continue };
            f.gauge(&format!("{PREFIX}{name}"), &labels, mean);
            if let Some(se) = se {
                f.gauge(&format!("{PREFIX}{name}_stderr"), &labels, se);
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
    f.gauge(&format!("{PREFIX}interleaving_lists"), labels, lists as f64);
    f.gauge(&format!("{PREFIX}interleaving_delta"), labels, delta);
    if let Some(p) = compare::sign_test(wins, losses) {
        f.gauge(&format!("{PREFIX}interleaving_p_value"), labels, p);
    }
}

/// `rankpulse_<m>` (mean) and `rankpulse_<m>_stderr`, when defined.
fn window_gauges(f: &mut Families, name: &str, labels: &[(&str, &str)], m: &Moments) {
    if let Some(mean) = m.mean() {
        f.gauge(&format!("{PREFIX}{name}"), labels, mean);
    }
    if let Some(se) = m.stderr() {
        f.gauge(&format!("{PREFIX}{name}_stderr"), labels, se);
    }
}

/// `rankpulse_<m>_sum` and `_count` since start: rate(_sum)/rate(_count) is
/// an exact mean across any number of instances.
fn total_counters(f: &mut Families, name: &str, labels: &[(&str, &str)], m: &Moments) {
    f.counter(&format!("{PREFIX}{name}_sum"), labels, m.weighted_sum());
    f.counter(&format!("{PREFIX}{name}_sum_squares"), labels, m.weighted_sum_squares());
    f.counter(&format!("{PREFIX}{name}_count"), labels, m.weight as f64);
}
