//! Criterion benchmarks of the metric engine: scoring one ranked list with
//! every metric at the daemon's default cutoffs, and folding values into the
//! accumulators. Inputs come from a fixed-seed generator so runs compare.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use rankpulse_core::accumulate::Moments;
use rankpulse_core::metrics::{
    Gain, Grade, IdealScope, Scratch,
    auc::{auc_by_position, auc_by_score},
    count_relevant, dcg, err, precision, rr,
};

use rankpulse_testkit::Rng;

/// A grade, mostly non-relevant like real judgments.
fn grade(rng: &mut Rng) -> Grade {
    [0, 0, 0, 0, 1, 1, 2, 3, 4][(rng.next() % 9) as usize]
}

struct List {
    shown: Vec<Grade>,
    scores: Vec<f64>,
    judged: Vec<Grade>,
}

fn lists(n: usize, len: usize) -> Vec<List> {
    let mut rng = Rng::new(0x5eed);
    (0..n)
        .map(|_| {
            let shown: Vec<Grade> = (0..len).map(|_| grade(&mut rng)).collect();
            let scores = (0..len).map(|i| (len - i) as f64 + (rng.next() % 100) as f64 / 1000.0).collect();
            let mut judged = shown.clone();
            judged.extend((0..len / 2).map(|_| grade(&mut rng)));
            List { shown, scores, judged }
        })
        .collect()
}

const CUTOFFS: &[usize] = &[1, 3, 5, 10];

fn score_all(list: &List, scratch: &mut Scratch, out: &mut [f64], opt: &mut [Option<f64>]) -> f64 {
    let mut acc = 0.0;
    let ideal = scratch.ideal(IdealScope::Judged, &list.shown, &list.judged);
    dcg::ndcg_at(&list.shown, ideal, Gain::Exp2, CUTOFFS, opt);
    acc += opt.iter().flatten().sum::<f64>();
    err::err_at(&list.shown, 4, CUTOFFS, out);
    acc += out.iter().sum::<f64>();
    rr::reciprocal_rank_at(&list.shown, 1, CUTOFFS, out);
    acc += out.iter().sum::<f64>();
    precision::precision_at(&list.shown, 1, CUTOFFS, out);
    acc += out.iter().sum::<f64>();
    let num_rel = count_relevant(&list.judged, 1);
    precision::recall_at(&list.shown, 1, num_rel, CUTOFFS, opt);
    acc += opt.iter().flatten().sum::<f64>();
    precision::average_precision_at(&list.shown, 1, num_rel, CUTOFFS, opt);
    acc += opt.iter().flatten().sum::<f64>();
    acc + auc_by_position(&list.shown, 1).map_or(0.0, |a| a.auc)
}

fn engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    for len in [10usize, 50] {
        let input = lists(1024, len);
        group.throughput(Throughput::Elements(input.len() as u64));
        group.bench_with_input(BenchmarkId::new("all_metrics_per_list", len), &input, |b, input| {
            let mut scratch = Scratch::new();
            let mut out = vec![0.0; CUTOFFS.len()];
            let mut opt = vec![None; CUTOFFS.len()];
            b.iter(|| {
                let mut total = 0.0;
                for list in input {
                    total += score_all(list, &mut scratch, &mut out, &mut opt);
                }
                black_box(total)
            })
        });
        group.bench_with_input(BenchmarkId::new("ndcg_at_4_cutoffs", len), &input, |b, input| {
            let mut scratch = Scratch::new();
            let mut opt = vec![None; CUTOFFS.len()];
            b.iter(|| {
                for list in input {
                    let ideal = scratch.ideal(IdealScope::Judged, &list.shown, &list.judged);
                    dcg::ndcg_at(&list.shown, ideal, Gain::Exp2, CUTOFFS, &mut opt);
                    black_box(&opt);
                }
            })
        });
        group.bench_with_input(BenchmarkId::new("auc_by_score", len), &input, |b, input| {
            let mut buf = Vec::new();
            b.iter(|| {
                for list in input {
                    black_box(auc_by_score(&list.shown, &list.scores, 1, &mut buf));
                }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("accumulate");
    let values: Vec<(f64, u32)> = {
        let mut rng = Rng::new(7);
        (0..4096).map(|_| ((rng.next() % 10_000) as f64 / 10_000.0, 1 + (rng.next() % 10) as u32)).collect()
    };
    group.throughput(Throughput::Elements(values.len() as u64));
    group.bench_function("moments_add", |b| {
        b.iter(|| {
            let mut m = Moments::default();
            for &(v, w) in &values {
                m.add(v, w);
            }
            black_box(m)
        })
    });
    group.finish();
}

/// The stream stages on the production-shaped mix of `rankpulse-bench`:
/// decoding each message type, and the whole pipeline (decode, assemble,
/// finalize, score, accumulate) per event.
fn stream(c: &mut Criterion) {
    use rankpulse::config::Config;
    use rankpulse_bench::engine::mix;
    use rankpulse_core::event::decode;
    let config = Config::default();
    let limits = config.decode_limits();
    let messages = mix(0, 20_000, 42, 1_763_780_000_000, 4.0);
    let impression = messages.iter().find(|m| !m.judgment).map(|m| m.payload.clone()).unwrap_or_default();
    let judgment = messages.iter().find(|m| m.judgment).map(|m| m.payload.clone()).unwrap_or_default();
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Elements(1));
    group
        .bench_function("decode_impression_10_results", |b| b.iter(|| decode(black_box(&impression), &limits).is_ok()));
    group.bench_function("decode_judgment", |b| b.iter(|| decode(black_box(&judgment), &limits).is_ok()));
    group.throughput(Throughput::Elements(messages.len() as u64));
    group.sample_size(10);
    group.bench_function("pipeline_mix_20000_lists", |b| {
        b.iter(|| rankpulse_bench::engine::pipeline_throughput(&config, black_box(&messages)))
    });
    group.finish();
}

criterion_group!(benches, engine, stream);
criterion_main!(benches);
