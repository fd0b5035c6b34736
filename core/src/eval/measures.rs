//! Measure selection for `rankpulse eval`: trec_eval's `-m name[.params]`
//! syntax, its printing order, and rankpulse's extra measures.

use thiserror::Error;

/// trec_eval's default cutoffs for `P`, `recall`, `ndcg_cut` and `map_cut`.
pub const DEFAULT_CUTOFFS: &[usize] = &[5, 10, 15, 20, 30, 100, 200, 500, 1000];

/// The supported measures, declared in trec_eval's printing order (its
/// `te_trec_measures` table), followed by rankpulse's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Kind {
    Runid,
    NumQ,
    NumRet,
    NumRel,
    NumRelRet,
    Map,
    RecipRank,
    #[strum(serialize = "P")]
    P,
    Recall,
    Ndcg,
    NdcgCut,
    MapCut,
    /// nDCG@k with gain 2^g − 1 (not in trec_eval).
    NdcgExpCut,
    /// ERR@k with `--max-grade` (not in trec_eval).
    ErrCut,
    /// Per-topic AUC of the run's scores, averaged as GAUC (not in trec_eval).
    Gauc,
}

impl Kind {
    /// Every measure, in printing order.
    pub const ALL: &'static [Kind] = <Kind as strum::VariantArray>::VARIANTS;

    /// The name used on the command line and, for cutoff measures, as the
    /// prefix of each printed `name_k`.
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn has_cutoffs(self) -> bool {
        matches!(self, Kind::P | Kind::Recall | Kind::NdcgCut | Kind::MapCut | Kind::NdcgExpCut | Kind::ErrCut)
    }

    /// Counts print as integers (`%ld`), everything else as `%6.4f`.
    pub fn is_count(self) -> bool {
        matches!(self, Kind::NumQ | Kind::NumRet | Kind::NumRel | Kind::NumRelRet)
    }

    fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// trec_eval's `official` nickname, restricted to what rankpulse computes
/// (trec_eval's set also has gm_map, Rprec, bpref and iprec_at_recall).
const OFFICIAL: &[Kind] =
    &[Kind::Runid, Kind::NumQ, Kind::NumRet, Kind::NumRel, Kind::NumRelRet, Kind::Map, Kind::RecipRank, Kind::P];

/// One requested measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    pub kind: Kind,
    /// Ascending, distinct, positive; empty for measures without cutoffs.
    pub cutoffs: Vec<usize>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MeasureError {
    #[error("unknown measure {0:?}; supported: {list}", list = supported())]
    Unknown(String),
    #[error("measure {0:?} takes no parameters")]
    NoParams(String),
    #[error("measure {measure:?}: cutoff {value:?} is not a positive integer")]
    BadCutoff { measure: String, value: String },
    #[error("measure {0:?}: duplicate cutoffs")]
    Duplicate(String),
    #[error("measure {0:?}: empty parameter list")]
    Empty(String),
}

fn supported() -> String {
    let mut names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
    names.push("official");
    names.join(", ")
}

/// The measures to compute, in printing order, plus notes for the user about
/// repeated `-m` flags (trec_eval keeps the first occurrence of a measure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub measures: Vec<Measure>,
    pub notes: Vec<String>,
}

impl Plan {
    /// Parses the `-m` arguments; none means trec_eval's `official` set.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Plan, MeasureError> {
        let mut measures: Vec<Measure> = Vec::new();
        let mut notes = Vec::new();
        let mut push = |m: Measure, arg: &str, measures: &mut Vec<Measure>| {
            if let Some(existing) = measures.iter().find(|e| e.kind == m.kind) {
                if *existing != m {
                    notes.push(format!(
                        "-m {arg} ignored: {} was already requested (trec_eval keeps the first)",
                        m.kind.name()
                    ));
                }
            } else {
                measures.push(m);
            }
        };
        if args.is_empty() {
            for &kind in OFFICIAL {
                push(Measure::with_defaults(kind), "official", &mut measures);
            }
        }
        for arg in args {
            let arg = arg.as_ref();
            let (name, params) = match arg.split_once('.') {
                Some((n, p)) => (n, Some(p)),
                None => (arg, None),
            };
            if name == "official" && params.is_none() {
                for &kind in OFFICIAL {
                    push(Measure::with_defaults(kind), arg, &mut measures);
                }
                continue;
            }
            let kind = Kind::from_name(name).ok_or_else(|| MeasureError::Unknown(arg.to_string()))?;
            let measure = match params {
                None => Measure::with_defaults(kind),
                Some(_) if !kind.has_cutoffs() => return Err(MeasureError::NoParams(arg.to_string())),
                Some(p) => Measure { kind, cutoffs: parse_cutoffs(arg, p)? },
            };
            push(measure, arg, &mut measures);
        }
        measures.sort_by_key(|m| m.kind);
        Ok(Plan { measures, notes })
    }

    pub fn get(&self, kind: Kind) -> Option<&Measure> {
        self.measures.iter().find(|m| m.kind == kind)
    }
}

impl Measure {
    fn with_defaults(kind: Kind) -> Measure {
        let cutoffs = if kind.has_cutoffs() { DEFAULT_CUTOFFS.to_vec() } else { Vec::new() };
        Measure { kind, cutoffs }
    }

    /// Printed names, one per value: `map`, or `P_5`, `P_10`, ….
    pub fn value_names(&self) -> Vec<String> {
        if self.kind.has_cutoffs() {
            self.cutoffs.iter().map(|k| format!("{}_{k}", self.kind.name())).collect()
        } else {
            vec![self.kind.name().to_string()]
        }
    }
}

fn parse_cutoffs(arg: &str, params: &str) -> Result<Vec<usize>, MeasureError> {
    if params.is_empty() {
        return Err(MeasureError::Empty(arg.to_string()));
    }
    let mut cutoffs = Vec::new();
    for value in params.split(',') {
        match value.trim().parse::<usize>() {
            Ok(k) if k > 0 => cutoffs.push(k),
            _ => return Err(MeasureError::BadCutoff { measure: arg.to_string(), value: value.to_string() }),
        }
    }
    cutoffs.sort_unstable();
    if cutoffs.windows(2).any(|w| w[0] == w[1]) {
        return Err(MeasureError::Duplicate(arg.to_string()));
    }
    Ok(cutoffs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_in_trec_eval_order() {
        let plan = Plan::parse(&["ndcg_cut.10,5", "map", "P.5", "num_q"]).unwrap();
        let kinds: Vec<Kind> = plan.measures.iter().map(|m| m.kind).collect();
        assert_eq!(kinds, [Kind::NumQ, Kind::Map, Kind::P, Kind::NdcgCut]);
        assert_eq!(plan.get(Kind::NdcgCut).unwrap().cutoffs, [5, 10]);
        assert_eq!(plan.get(Kind::P).unwrap().value_names(), ["P_5"]);
    }

    #[test]
    fn defaults_and_official() {
        let plan = Plan::parse::<&str>(&[]).unwrap();
        assert_eq!(plan.measures.len(), OFFICIAL.len());
        assert_eq!(plan.get(Kind::P).unwrap().cutoffs, DEFAULT_CUTOFFS);
        let plan = Plan::parse(&["recall"]).unwrap();
        assert_eq!(plan.get(Kind::Recall).unwrap().cutoffs, DEFAULT_CUTOFFS);
    }

    #[test]
    fn first_occurrence_wins_like_trec_eval() {
        let plan = Plan::parse(&["P.5", "P.10"]).unwrap();
        assert_eq!(plan.get(Kind::P).unwrap().cutoffs, [5]);
        assert_eq!(plan.notes.len(), 1);
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(matches!(Plan::parse(&["bpref"]), Err(MeasureError::Unknown(_))));
        assert!(matches!(Plan::parse(&["P.5,5"]), Err(MeasureError::Duplicate(_))));
        assert!(matches!(Plan::parse(&["P.0"]), Err(MeasureError::BadCutoff { .. })));
        assert!(matches!(Plan::parse(&["P.x"]), Err(MeasureError::BadCutoff { .. })));
        assert!(matches!(Plan::parse(&["P."]), Err(MeasureError::Empty(_))));
        assert!(matches!(Plan::parse(&["map.5"]), Err(MeasureError::NoParams(_))));
    }
}
