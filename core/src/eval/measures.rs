//! Measure selection for `rankpulse eval`: the table of every measure
//! trec_eval 10.0 knows (its `te_trec_measures`, in its printing order),
//! rankpulse's own measures after them, the `-m name[.params]` syntax, the
//! nicknames, and the printed value names.
//!
//! A measure's row says how it is initialised (which parameters it takes and
//! how its values are named), accumulated over topics, averaged and printed.
//! These are trec_eval's generic `te_init_meas_*`, `te_acc_meas_*`,
//! `te_calc_avg_meas_*` and `te_print_*` routines, named here by what they do.
//!
//! Selection follows trec_eval exactly: every `-m` marks measures (a nickname
//! marks its whole list); parameters come from the first `-m name.params` for
//! that name, whatever its position, so `-m P -m P.10` computes P_10 only.

use thiserror::Error;

/// Every measure, in trec_eval's printing order, then rankpulse's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr, strum::VariantArray)]
pub enum Id {
    #[strum(serialize = "runid")]
    Runid,
    #[strum(serialize = "num_q")]
    NumQ,
    #[strum(serialize = "num_ret")]
    NumRet,
    #[strum(serialize = "num_rel")]
    NumRel,
    #[strum(serialize = "num_rel_ret")]
    NumRelRet,
    #[strum(serialize = "map")]
    Map,
    #[strum(serialize = "gm_map")]
    GmMap,
    #[strum(serialize = "Rprec")]
    Rprec,
    #[strum(serialize = "bpref")]
    Bpref,
    #[strum(serialize = "recip_rank")]
    RecipRank,
    #[strum(serialize = "iprec_at_recall")]
    IprecAtRecall,
    #[strum(serialize = "P")]
    P,
    #[strum(serialize = "relstring")]
    Relstring,
    #[strum(serialize = "recall")]
    Recall,
    #[strum(serialize = "infAP")]
    InfAp,
    #[strum(serialize = "gm_bpref")]
    GmBpref,
    #[strum(serialize = "Rprec_mult")]
    RprecMult,
    #[strum(serialize = "utility")]
    Utility,
    #[strum(serialize = "11pt_avg")]
    ElevenPtAvg,
    #[strum(serialize = "binG")]
    BinG,
    #[strum(serialize = "G")]
    G,
    #[strum(serialize = "dcg")]
    Dcg,
    #[strum(serialize = "ideal_dcg")]
    IdealDcg,
    #[strum(serialize = "ndcg")]
    Ndcg,
    #[strum(serialize = "ndcg_rel")]
    NdcgRel,
    #[strum(serialize = "Rndcg")]
    Rndcg,
    #[strum(serialize = "ndcg_cut")]
    NdcgCut,
    #[strum(serialize = "map_cut")]
    MapCut,
    #[strum(serialize = "relative_P")]
    RelativeP,
    #[strum(serialize = "success")]
    Success,
    #[strum(serialize = "set_P")]
    SetP,
    #[strum(serialize = "set_relative_P")]
    SetRelativeP,
    #[strum(serialize = "set_recall")]
    SetRecall,
    #[strum(serialize = "set_map")]
    SetMap,
    #[strum(serialize = "set_F")]
    SetF,
    #[strum(serialize = "num_nonrel_judged_ret")]
    NumNonrelJudgedRet,
    #[strum(serialize = "prefs_num_prefs_poss")]
    PrefsNumPrefsPoss,
    #[strum(serialize = "prefs_num_prefs_ful")]
    PrefsNumPrefsFul,
    #[strum(serialize = "prefs_num_prefs_ful_ret")]
    PrefsNumPrefsFulRet,
    #[strum(serialize = "prefs_simp")]
    PrefsSimp,
    #[strum(serialize = "prefs_pair")]
    PrefsPair,
    #[strum(serialize = "prefs_avgjg")]
    PrefsAvgjg,
    #[strum(serialize = "prefs_avgjg_Rnonrel")]
    PrefsAvgjgRnonrel,
    #[strum(serialize = "prefs_simp_ret")]
    PrefsSimpRet,
    #[strum(serialize = "prefs_pair_ret")]
    PrefsPairRet,
    #[strum(serialize = "prefs_avgjg_ret")]
    PrefsAvgjgRet,
    #[strum(serialize = "prefs_avgjg_Rnonrel_ret")]
    PrefsAvgjgRnonrelRet,
    #[strum(serialize = "prefs_simp_imp")]
    PrefsSimpImp,
    #[strum(serialize = "prefs_pair_imp")]
    PrefsPairImp,
    #[strum(serialize = "prefs_avgjg_imp")]
    PrefsAvgjgImp,
    #[strum(serialize = "map_avgjg")]
    MapAvgjg,
    #[strum(serialize = "P_avgjg")]
    PAvgjg,
    #[strum(serialize = "Rprec_mult_avgjg")]
    RprecMultAvgjg,
    #[strum(serialize = "yaap")]
    Yaap,
    #[strum(serialize = "rbp")]
    Rbp,
    #[strum(serialize = "rbp_resid")]
    RbpResid,
    #[strum(serialize = "unj")]
    Unj,
    /// nDCG@k with gain 2^g − 1 (not in trec_eval).
    #[strum(serialize = "ndcg_exp_cut")]
    NdcgExpCut,
    /// ERR@k with `--max-grade` (not in trec_eval).
    #[strum(serialize = "err_cut")]
    ErrCut,
    /// Per-topic AUC of the run's scores, averaged as GAUC (not in trec_eval).
    #[strum(serialize = "gauc")]
    Gauc,
}

/// trec_eval's default cutoffs for `P`, `recall`, `ndcg_cut`, `map_cut`, ….
pub const DEFAULT_CUTOFFS: &[i64] = &[5, 10, 15, 20, 30, 100, 200, 500, 1000];
const RECALL_POINTS: &[f64] = &[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
const RPREC_MULTS: &[f64] = &[0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0];

/// How a measure takes parameters and names its values (`te_init_meas_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// No value at all (`runid`).
    Empty,
    /// One value printed as an integer.
    Long,
    /// One value printed as `%6.4f`.
    Double,
    /// One value per integer cutoff, named `name_k`, cutoffs sorted.
    CutLong(&'static [i64]),
    /// One value per fractional cutoff, named `name_%3.2f`, cutoffs sorted.
    CutDouble(&'static [f64]),
    /// One value; the parameters are a list of numbers kept in order, and a
    /// given list is appended verbatim to the name.
    ParamDouble(&'static [f64]),
    /// One value; parameters are `name=number` pairs (gains per grade, `p`).
    ParamPair,
}

/// How per-topic values become the summary (`te_calc_avg_meas_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Average {
    /// Not accumulated (runid, relstring).
    None,
    /// Summed over topics (counts).
    Sum,
    /// Summed, then divided by the number of topics.
    Mean,
    /// Per-topic values are logs; the summary is exp of their mean, missing
    /// topics under `-c` counting as log(0.00001).
    Geometric,
    /// The number of topics.
    NumQ,
    /// Summed; under `-c`, recounted over every qrels line with grade > 0.
    NumRel,
    /// Weighted mean with rankpulse's own weights (gauc).
    Weighted,
}

/// Which judgments a measure needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    Qrels,
    Prefs,
    QrelsJg,
}

impl Id {
    pub const ALL: &'static [Id] = <Id as strum::VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }

    fn from_name(name: &str) -> Option<Id> {
        Id::ALL.iter().copied().find(|m| m.name() == name)
    }

    pub fn shape(self) -> Shape {
        use Id::*;
        match self {
            Runid => Shape::Empty,
            NumQ | NumRet | NumRel | NumRelRet | NumNonrelJudgedRet | PrefsNumPrefsPoss | PrefsNumPrefsFul
            | PrefsNumPrefsFulRet => Shape::Long,
            P | Recall | NdcgCut | MapCut | RelativeP | PAvgjg | NdcgExpCut | ErrCut => Shape::CutLong(DEFAULT_CUTOFFS),
            Success => Shape::CutLong(&[1, 5, 10]),
            Unj => Shape::CutLong(&[5, 10, 20]),
            IprecAtRecall => Shape::CutDouble(RECALL_POINTS),
            RprecMult | RprecMultAvgjg => Shape::CutDouble(RPREC_MULTS),
            Relstring => Shape::ParamDouble(&[10.0]),
            Utility => Shape::ParamDouble(&[1.0, -1.0, 0.0, 0.0]),
            ElevenPtAvg => Shape::ParamDouble(RECALL_POINTS),
            SetF => Shape::ParamDouble(&[1.0]),
            G | Dcg | IdealDcg | Ndcg | NdcgRel | Rndcg | Rbp | RbpResid => Shape::ParamPair,
            _ => Shape::Double,
        }
    }

    pub fn average(self) -> Average {
        use Id::*;
        match self {
            Runid | Relstring => Average::None,
            NumQ => Average::NumQ,
            NumRel => Average::NumRel,
            NumRet | NumRelRet | NumNonrelJudgedRet | PrefsNumPrefsPoss | PrefsNumPrefsFul | PrefsNumPrefsFulRet => {
                Average::Sum
            }
            GmMap | GmBpref => Average::Geometric,
            Gauc => Average::Weighted,
            _ => Average::Mean,
        }
    }

    /// Whether per-topic lines are printed (`-q`): not for the summary-only
    /// measures.
    pub fn prints_per_topic(self) -> bool {
        !matches!(self, Id::Runid | Id::NumQ | Id::GmMap | Id::GmBpref)
    }

    pub fn needs(self) -> Needs {
        use Id::*;
        match self {
            Runid | NumQ => Needs::Nothing,
            PrefsNumPrefsPoss | PrefsNumPrefsFul | PrefsNumPrefsFulRet | PrefsSimp | PrefsPair | PrefsAvgjg
            | PrefsAvgjgRnonrel | PrefsSimpRet | PrefsPairRet | PrefsAvgjgRet | PrefsAvgjgRnonrelRet | PrefsSimpImp
            | PrefsPairImp | PrefsAvgjgImp => Needs::Prefs,
            MapAvgjg | PAvgjg | RprecMultAvgjg => Needs::QrelsJg,
            _ => Needs::Qrels,
        }
    }

    /// Measures of graded gain that ignore the relevance level (nDCG, ERR
    /// and their parts), for which "nothing relevant" means no judged
    /// document with a positive grade, as in the daemon (docs/metrics.md);
    /// for the others it means none at or above the relevance level.
    /// `Rndcg` is not one: trec_eval scores it 0 when nothing reaches the
    /// level.
    pub fn is_graded(self) -> bool {
        use Id::*;
        matches!(self, G | Dcg | IdealDcg | Ndcg | NdcgRel | NdcgCut | NdcgExpCut | ErrCut)
    }

    /// rankpulse's own measures, absent from trec_eval.
    pub fn is_extra(self) -> bool {
        matches!(self, Id::NdcgExpCut | Id::ErrCut | Id::Gauc)
    }
}

/// trec_eval's nicknames (`measures.c`), plus rankpulse's `extras`.
fn nickname(name: &str) -> Option<&'static [&'static str]> {
    const OFFICIAL: &[&str] = &[
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "map",
        "gm_map",
        "Rprec",
        "bpref",
        "recip_rank",
        "iprec_at_recall",
        "P",
    ];
    const ALL_TREC: &[&str] = &[
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "map",
        "gm_map",
        "Rprec",
        "bpref",
        "recip_rank",
        "iprec_at_recall",
        "P",
        "relstring",
        "recall",
        "unj",
        "rbp",
        "rbp_resid",
        "infAP",
        "gm_bpref",
        "utility",
        "11pt_avg",
        "ndcg",
        "relative_P",
        "Rprec_mult",
        "success",
        "map_cut",
        "ndcg_cut",
        "ndcg_rel",
        "Rndcg",
        "binG",
        "G",
        "set_P",
        "set_recall",
        "set_relative_P",
        "set_map",
        "set_F",
        "num_nonrel_judged_ret",
    ];
    const SET: &[&str] = &[
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "utility",
        "set_P",
        "set_recall",
        "set_relative_P",
        "set_map",
        "set_F",
    ];
    const ALL_PREFS: &[&str] = &[
        "runid",
        "num_q",
        "prefs_num_prefs_poss",
        "prefs_num_prefs_ful",
        "prefs_num_prefs_ful_ret",
        "prefs_simp",
        "prefs_pair",
        "prefs_avgjg",
        "prefs_avgjg_Rnonrel",
        "prefs_simp_ret",
        "prefs_pair_ret",
        "prefs_avgjg_ret",
        "prefs_avgjg_Rnonrel_ret",
        "prefs_simp_imp",
        "prefs_pair_imp",
        "prefs_avgjg_imp",
    ];
    const PREFS: &[&str] = &[
        "runid",
        "num_q",
        "prefs_num_prefs_poss",
        "prefs_num_prefs_ful",
        "prefs_num_prefs_ful_ret",
        "prefs_simp",
        "prefs_pair",
        "prefs_avgjg",
    ];
    const QRELS_JG: &[&str] = &["runid", "num_q", "map_avgjg", "P_avgjg", "Rprec_mult_avgjg"];
    const EXTRAS: &[&str] = &["ndcg_exp_cut", "err_cut", "gauc"];
    Some(match name {
        "official" => OFFICIAL,
        "set" => SET,
        "all_trec" => ALL_TREC,
        "all_prefs" => ALL_PREFS,
        "prefs" => PREFS,
        "qrels_jg" => QRELS_JG,
        "extras" => EXTRAS,
        _ => return None,
    })
}

/// A measure's parameters after parsing.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    None,
    Longs(Vec<i64>),
    Doubles(Vec<f64>),
    Pairs(Vec<(String, f64)>),
}

impl Params {
    pub fn longs(&self) -> &[i64] {
        match self {
            Params::Longs(v) => v,
            _ => &[],
        }
    }

    pub fn doubles(&self) -> &[f64] {
        match self {
            Params::Doubles(v) => v,
            _ => &[],
        }
    }

    pub fn pairs(&self) -> &[(String, f64)] {
        match self {
            Params::Pairs(v) => v,
            _ => &[],
        }
    }
}

/// One measure to compute.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    pub id: Id,
    pub params: Params,
    /// Printed names, one per value (none for `runid`).
    pub names: Vec<String>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MeasureError {
    #[error(
        "unknown measure {0:?}; known: every trec_eval 10.0 measure and nickname (trec_eval -h -m all_trec), ndcg_exp_cut, err_cut, gauc, extras"
    )]
    Unknown(String),
    #[error("-m {0}: empty parameter list")]
    Empty(String),
    #[error("measure {measure:?}: cutoff {value:?} is not a positive integer")]
    BadCutoff { measure: String, value: String },
    #[error("measure {measure:?}: parameter {value:?} is not a number")]
    BadNumber { measure: String, value: String },
    #[error("measure {measure:?}: parameter {value:?} is not of the form name=number")]
    BadPair { measure: String, value: String },
    #[error("measure {measure:?}: cutoff {value} given twice")]
    Duplicate { measure: String, value: String },
    #[error("measure {measure:?} takes exactly {expected} parameters, got {got}")]
    Count { measure: String, expected: usize, got: usize },
    #[error("measure {0:?}: no cutoff values")]
    NoValues(String),
}

/// The measures to compute, in printing order, plus notes for the user.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub measures: Vec<Measure>,
    pub notes: Vec<String>,
}

impl Plan {
    /// Parses the `-m` arguments; none means trec_eval's `official` set.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Plan, MeasureError> {
        let mut marked = vec![false; Id::ALL.len()];
        // (measure name, parameter string, the whole argument), in order.
        let mut given: Vec<(&str, &str, &str)> = Vec::new();
        let mark = |name: &str, arg: &str, marked: &mut Vec<bool>| -> Result<(), MeasureError> {
            if let Some(list) = nickname(name) {
                for n in list {
                    if let Some(id) = Id::from_name(n) {
                        marked[id as usize] = true;
                    }
                }
                return Ok(());
            }
            let id = Id::from_name(name).ok_or_else(|| MeasureError::Unknown(arg.to_string()))?;
            marked[id as usize] = true;
            Ok(())
        };
        if args.is_empty() {
            mark("official", "official", &mut marked)?;
        }
        for arg in args {
            let arg = arg.as_ref();
            let (name, params) = match arg.split_once('.') {
                Some((n, p)) => (n, Some(p)),
                None => (arg, None),
            };
            if let Some(p) = params {
                if p.is_empty() {
                    return Err(MeasureError::Empty(arg.to_string()));
                }
                given.push((name, p, arg));
            }
            mark(name, arg, &mut marked)?;
        }
        let mut notes = Vec::new();
        let mut measures = Vec::new();
        for &id in Id::ALL {
            if !marked[id as usize] {
                continue;
            }
            let mut mine = given.iter().filter(|(n, _, _)| *n == id.name());
            let first = mine.next();
            for (_, _, arg) in mine {
                notes.push(format!(
                    "-m {arg} ignored: {} takes its parameters from the first -m {}.… (-m {}), as trec_eval does",
                    id.name(),
                    id.name(),
                    first.map_or("", |f| f.2)
                ));
            }
            measures.push(Measure::new(id, first.map(|f| f.1))?);
        }
        Ok(Plan { measures, notes })
    }

    pub fn get(&self, id: Id) -> Option<&Measure> {
        self.measures.iter().find(|m| m.id == id)
    }
}

impl Measure {
    /// A measure with the given parameter string, or its defaults.
    pub fn new(id: Id, given: Option<&str>) -> Result<Measure, MeasureError> {
        let name = id.name();
        let bad_number = |v: &str| MeasureError::BadNumber { measure: name.to_string(), value: v.to_string() };
        let (params, names) = match (id.shape(), given) {
            (Shape::Empty | Shape::Long | Shape::Double, _) => {
                // trec_eval ignores parameters of measures that take none.
                let names = if id.shape() == Shape::Empty { vec![] } else { vec![name.to_string()] };
                (Params::None, names)
            }
            (Shape::CutLong(default), given) => {
                let mut cuts = match given {
                    None => default.to_vec(),
                    Some(p) => p
                        .split(',')
                        .map(|v| match atol(v) {
                            Some(k) if k > 0 => Ok(k),
                            _ => Err(MeasureError::BadCutoff { measure: name.to_string(), value: v.to_string() }),
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                };
                cuts.sort_unstable();
                if let Some(w) = cuts.windows(2).find(|w| w[0] == w[1]) {
                    return Err(MeasureError::Duplicate { measure: name.to_string(), value: w[0].to_string() });
                }
                let names = cuts.iter().map(|k| format!("{name}_{k}")).collect();
                (Params::Longs(cuts), names)
            }
            (Shape::CutDouble(default), given) => {
                let mut cuts = match given {
                    None => default.to_vec(),
                    Some(p) => {
                        p.split(',').map(|v| parse_double(v).ok_or_else(|| bad_number(v))).collect::<Result<_, _>>()?
                    }
                };
                cuts.sort_by(f64::total_cmp);
                if let Some(w) = cuts.windows(2).find(|w| w[0] == w[1]) {
                    return Err(MeasureError::Duplicate { measure: name.to_string(), value: w[0].to_string() });
                }
                let names = cuts.iter().map(|&c| double_name(name, c)).collect();
                (Params::Doubles(cuts), names)
            }
            (Shape::ParamDouble(default), given) => {
                let values: Vec<f64> = match given {
                    None => default.to_vec(),
                    Some(p) => {
                        p.split(',').map(|v| parse_double(v).ok_or_else(|| bad_number(v))).collect::<Result<_, _>>()?
                    }
                };
                // trec_eval fails these at the first topic; say so up front.
                if id == Id::Utility && values.len() != 4 {
                    return Err(MeasureError::Count { measure: name.to_string(), expected: 4, got: values.len() });
                }
                let names = vec![given.map_or_else(|| name.to_string(), |p| format!("{name}_{p}"))];
                (Params::Doubles(values), names)
            }
            (Shape::ParamPair, None) => (Params::Pairs(Vec::new()), vec![name.to_string()]),
            (Shape::ParamPair, Some(p)) => {
                let pairs = p
                    .split(',')
                    .map(|v| {
                        let bad = || MeasureError::BadPair { measure: name.to_string(), value: v.to_string() };
                        let (k, x) = v.split_once('=').ok_or_else(bad)?;
                        // trec_eval refuses a second `=` in a pair
                        // ("malformed pair parameters"); atof would read `2=3` as 2.
                        if k.is_empty() || x.contains('=') {
                            return Err(bad());
                        }
                        Ok((k.to_string(), parse_double(x).ok_or_else(bad)?))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                (Params::Pairs(pairs), vec![format!("{name}_{p}")])
            }
        };
        Ok(Measure { id, params, names })
    }
}

/// An integer as C's `atol` reads it: the leading digits (`23.4` is 23),
/// as trec_eval parses cutoffs; `None` when there are none.
fn atol(v: &str) -> Option<i64> {
    let v = v.trim_start();
    let sign_len = usize::from(v.starts_with(['+', '-']));
    let digits = v[sign_len..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    // Past the range, saturated as glibc's `atol` does.
    Some(v[..sign_len + digits].parse().unwrap_or(if v.starts_with('-') { i64::MIN } else { i64::MAX }))
}

/// A number as C's `atof` reads it: the longest numeric prefix (`.10`,
/// `-1`, `2.0`, `1e-3`, hexadecimal `0x10` or `0x0.8p0`); `None` when
/// there is none, or when it is not finite (`inf`, `nan`, `1e400`: no
/// measure has a meaning for them).
fn parse_double(v: &str) -> Option<f64> {
    let v = v.trim_start();
    if let Some(x) = parse_hex_double(v) {
        return Some(x).filter(|x| x.is_finite());
    }
    let b = v.as_bytes();
    let mut end = usize::from(v.starts_with(['+', '-']));
    let int = b[end..].iter().take_while(|c| c.is_ascii_digit()).count();
    end += int;
    let mut frac = 0;
    if b.get(end) == Some(&b'.') {
        frac = b[end + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        end += 1 + frac;
    }
    if int + frac == 0 {
        return None;
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let mut e = end + 1;
        e += usize::from(matches!(b.get(e), Some(b'+' | b'-')));
        let exp = b[e..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp > 0 {
            end = e + exp;
        }
    }
    v[..end].parse::<f64>().ok().filter(|x| x.is_finite())
}

/// The hexadecimal form `strtod` reads: `[sign]0x` hex digits, an optional
/// `.` and more, an optional binary exponent `p[sign]digits`; the longest
/// such prefix. `None` when `v` does not start with one.
fn parse_hex_double(v: &str) -> Option<f64> {
    let b = v.as_bytes();
    let negative = b.first() == Some(&b'-');
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    if !matches!(b.get(i..i + 2), Some([b'0', b'x' | b'X'])) {
        return None;
    }
    i += 2;
    // The first 60 bits of digits exactly; below them only whether any
    // is non-zero (a sticky bit), enough to round to 53 bits once.
    let mut mantissa = 0u64;
    let mut sticky = false;
    let mut exponent: i64 = 0;
    let mut digits = 0;
    let mut point = false;
    while let Some(&c) = b.get(i) {
        if c == b'.' && !point {
            point = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            digits += 1;
            if mantissa >> 56 == 0 {
                mantissa = mantissa * 16 + u64::from(d);
                exponent -= if point { 4 } else { 0 };
            } else {
                sticky |= d != 0;
                exponent += if point { 0 } else { 4 };
            }
        } else {
            break;
        }
        i += 1;
    }
    let signed = |x: f64| if negative { -x } else { x };
    if digits == 0 {
        // `0x` alone: strtod reads the `0`.
        return Some(signed(0.0));
    }
    if matches!(b.get(i), Some(b'p' | b'P')) {
        let mut e = i + 1;
        let exp_negative = b.get(e) == Some(&b'-');
        e += usize::from(matches!(b.get(e), Some(b'+' | b'-')));
        let len = b[e.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
        if len > 0 {
            let p: i64 = v[e..e + len].parse().unwrap_or(i64::MAX / 2).min(100_000);
            exponent += if exp_negative { -p } else { p };
        }
    }
    if mantissa == 0 {
        return Some(signed(0.0));
    }
    let mut value = (mantissa | u64::from(sticky)) as f64;
    // Scaled in steps that neither overflow nor underflow on the way.
    let mut e = exponent.clamp(-3_000, 3_000);
    while e != 0 {
        let step = e.clamp(-1_000, 1_000);
        value *= 2f64.powi(step as i32);
        e -= step;
    }
    Some(signed(value))
}

/// trec_eval's `append_double`: `name_%3.2f`, cut to the name plus nine
/// characters by its fixed-size buffer.
fn double_name(name: &str, value: f64) -> String {
    let mut s = format!("{name}_{value:3.2}");
    s.truncate(name.len() + 9);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(plan: &Plan) -> Vec<String> {
        plan.measures.iter().flat_map(|m| m.names.clone()).collect()
    }

    #[test]
    fn table_is_in_trec_eval_order_and_complete() {
        // 57 measures of trec_eval 10.0 (`te_trec_measures`) + 3 of rankpulse.
        assert_eq!(Id::ALL.len(), 60);
        for n in nickname("all_trec").unwrap().iter().chain(nickname("all_prefs").unwrap()) {
            assert!(Id::from_name(n).is_some(), "{n}");
        }
    }

    #[test]
    fn bare_measure_only_selects_and_first_params_win() {
        // The defect of the earlier selection: `-m P -m P.10` must give P_10 only.
        let plan = Plan::parse(&["P", "P.10"]).unwrap();
        assert_eq!(names(&plan), ["P_10"]);
        let plan = Plan::parse(&["official", "P.2"]).unwrap();
        assert!(names(&plan).contains(&"P_2".to_string()));
        assert!(!names(&plan).contains(&"P_5".to_string()));
        let plan = Plan::parse(&["P.5", "P.10"]).unwrap();
        assert_eq!(names(&plan), ["P_5"]);
        assert_eq!(plan.notes.len(), 1);
    }

    #[test]
    fn parameter_syntax_and_names() {
        let plan =
            Plan::parse(&["P.5,7,3", "ndcg.1=3,2=9,4=4.5", "iprec_at_recall..10,.5", "utility.2,-1,0,0"]).unwrap();
        assert_eq!(
            names(&plan),
            [
                "iprec_at_recall_0.10",
                "iprec_at_recall_0.50",
                "P_3",
                "P_5",
                "P_7",
                "utility_2,-1,0,0",
                "ndcg_1=3,2=9,4=4.5"
            ]
        );
        assert_eq!(double_name("Rprec_mult", 123456.0), "Rprec_mult_123456.0");
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(matches!(Plan::parse(&["nope"]), Err(MeasureError::Unknown(_))));
        assert!(matches!(Plan::parse(&["P.5,5"]), Err(MeasureError::Duplicate { .. })));
        assert!(matches!(Plan::parse(&["P.0"]), Err(MeasureError::BadCutoff { .. })));
        assert!(matches!(Plan::parse(&["P.x"]), Err(MeasureError::BadCutoff { .. })));
        // trec_eval reads cutoffs with atol: `23.4` is 23.
        assert_eq!(names(&Plan::parse(&["ndcg_cut.10,23.4"]).unwrap()), ["ndcg_cut_10", "ndcg_cut_23"]);
        assert_eq!(parse_double(".25x"), Some(0.25));
        assert_eq!(parse_double("1e-3"), Some(0.001));
        assert_eq!(parse_double("e3"), None);
        assert!(matches!(Plan::parse(&["P."]), Err(MeasureError::Empty(_))));
        assert!(matches!(Plan::parse(&["ndcg.1"]), Err(MeasureError::BadPair { .. })));
        assert!(matches!(Plan::parse(&["ndcg.1=2=3"]), Err(MeasureError::BadPair { .. })));
        assert!(matches!(Plan::parse(&["ndcg.1=2,2=3=4"]), Err(MeasureError::BadPair { .. })));
        assert!(matches!(Plan::parse(&["utility.1,2"]), Err(MeasureError::Count { .. })));
    }

    #[test]
    fn parameters_read_as_strtod_reads_them() {
        // Values by the C standard's hexadecimal form: digits in base 16,
        // `p` a power of two (edge.hex.out checks them against trec_eval).
        for (text, value) in [
            ("0x10", 16.0),
            ("0x0.8p0", 0.5),
            ("-0x1p-1", -0.5),
            ("0x.4", 0.25),
            ("0X1P3", 8.0),
            ("0x1p", 1.0),
            ("0x", 0.0),
            ("0xg", 0.0),
            ("0x2junk", 2.0),
            (".5", 0.5),
            ("2.5e1x", 25.0),
        ] {
            assert_eq!(parse_double(text), Some(value), "{text}");
        }
        // Past 53 bits rounded once, as strtod does; zero whatever its
        // exponent; tiny and many-digit forms not lost to the scaling.
        assert_eq!(parse_double("0x200000000000018"), Some(144115188075855904.0));
        assert_eq!(parse_double("0x0p1024"), Some(0.0));
        assert_eq!(parse_double("0x1p-1000"), Some(2f64.powi(-1000)));
        assert_eq!(parse_double(&format!("0x1.{}", "0".repeat(300))), Some(1.0));
        for text in ["x", "inf", "nan", "1e400", "0x1p99999", ""] {
            assert_eq!(parse_double(text), None, "{text}");
        }
        assert_eq!(atol("99999999999999999999"), Some(i64::MAX));
        assert_eq!(atol("-99999999999999999999"), Some(i64::MIN));
    }
}
