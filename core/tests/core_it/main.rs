//! The core crate's integration tests, one executable (each file its own
//! would link the crate again for each): differential input formats,
//! evaluation against trec_eval and hostile input, the statistics against
//! independent computations, and the simulation tier (`#[ignore]`d,
//! selected by module path in `.ci/run`).

mod compare_scipy;
mod eval_hostile;
mod eval_jg;
mod eval_prefs;
mod mapped_differential;
mod ubi_differential;

// Simulation tier.
mod interleaving_sensitivity;
mod quality_drop_calibration;
mod sequential_calibration;
