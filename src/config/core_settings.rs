//! The configuration as the core crate takes it: the settings its stages
//! (decode, assemble, metric engine, accumulators) are built from, which
//! know nothing of files, variables or sections.

use super::{Config, TopicFormat};
use rankpulse_core::assemble::AssemblyLimits;
use rankpulse_core::event::DecodeLimits;
use rankpulse_core::metrics::Conventions;
use rankpulse_core::metrics::list::Family;
use rankpulse_core::pipeline::PipelineSettings;

impl Config {
    /// The metric conventions these settings select.
    pub fn conventions(&self) -> Conventions {
        let m = &self.metrics;
        Conventions {
            gain: m.gain,
            ideal: m.ideal,
            no_relevant: m.no_relevant,
            relevance_threshold: m.relevance_threshold,
            max_grade: m.max_grade,
            gauc_weight: m.gauc_weight,
        }
    }

    /// What decoding needs.
    pub fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_message_bytes: self.input.max_message_bytes,
            max_results: self.input.max_results,
            max_grade: self.metrics.max_grade,
            actions: self.judgments.actions.clone(),
            ubi: rankpulse_core::event::ubi::UbiSettings {
                ordinal_base: self.ubi.ordinal_base,
                // Validated at load; a path that does not parse is left out.
                dimensions: self
                    .ubi
                    .dimensions
                    .iter()
                    .filter_map(|(label, path)| {
                        Some((label.clone(), rankpulse_core::event::ubi::UbiPath::parse(path).ok()?))
                    })
                    .collect(),
            },
            // Validated at load.
            mapped: self.mapped.as_ref().and_then(|m| rankpulse_core::event::mapped::Mapping::new(&m.spec()).ok()),
        }
    }

    /// What the core's stages are built from.
    pub fn pipeline_settings(&self) -> PipelineSettings {
        PipelineSettings {
            decode: self.decode_limits(),
            assembly: AssemblyLimits {
                gap_ms: self.session.gap.ms(),
                max_open_lists: self.session.max_open_lists,
                late_policy: self.late.policy,
                late_horizon_ms: self.late.horizon.ms(),
                max_events_per_list: self.input.max_events_per_list,
                max_results_per_list: self.input.max_results_per_list,
            },
            dimension_labels: self.dimensions.labels.clone(),
            max_dimension_values: self.dimensions.max_values,
            max_combinations: self.dimensions.max_combinations,
            max_dimension_value_bytes: self.dimensions.max_value_bytes,
            conventions: self.conventions(),
            cutoffs: self.sorted_cutoffs(),
            bucket_ms: self.windows.bucket.ms(),
            longest_window_ms: self.windows.spans.iter().map(|s| s.ms()).max().unwrap_or(0),
            max_future_skew_ms: self.input.max_future_skew.ms(),
            min_timestamp_ms: self.input.min_timestamp.ms,
            formats: self
                .kafka
                .formats
                .iter()
                .filter(|(_, f)| **f != TopicFormat::Rankpulse)
                .map(|(t, f)| (t.clone(), f.core()))
                .collect(),
            click_ranks: self.debias.max_rank,
            primary: self.primary_metric().map(|(family, i)| family as usize * self.metrics.cutoffs.len() + i),
            session_timeout_ms: self.compare.session_timeout.ms(),
            max_sessions: self.compare.max_sessions,
        }
    }

    /// `compare.primary` as (family, index in the sorted cutoffs); `None`
    /// when `""` or not a configured metric.
    pub fn primary_metric(&self) -> Option<(Family, usize)> {
        let Some(primary) = self.compare.primary.as_deref() else {
            let cutoffs = self.sorted_cutoffs();
            let i = cutoffs.iter().position(|&k| k == 10).or(cutoffs.len().checked_sub(1))?;
            return Some((Family::Ndcg, i));
        };
        let (name, k) = primary.split_once('@')?;
        let family = *Family::ALL.iter().find(|f| f.name() == name)?;
        let k: usize = k.parse().ok()?;
        let i = self.sorted_cutoffs().iter().position(|&c| c == k)?;
        Some((family, i))
    }

    /// The cutoffs in ascending order (the engine's one-pass functions need that).
    pub fn sorted_cutoffs(&self) -> Vec<usize> {
        let mut c = self.metrics.cutoffs.clone();
        c.sort_unstable();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core's defaults (what its tests and fuzz targets run with) are
    /// the configuration's: a default changed on one side only fails here.
    #[test]
    fn the_cores_defaults_are_the_configurations() {
        assert_eq!(Config::default().pipeline_settings(), PipelineSettings::default());
    }
}
