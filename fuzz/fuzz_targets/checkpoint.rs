//! A checkpoint's payload from arbitrary bytes, restored as the daemon
//! restores it when the settings match: nothing on disk may panic the
//! process. Restoring puts every list of the checkpoint through the list
//! store's compact encoding (or a big list), and finalizing decodes them all.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rankpulse::config::Config;
use rankpulse_core::pipeline::Pipeline;
use rankpulse::state;
use std::sync::LazyLock;

static CONFIG: LazyLock<Config> = LazyLock::new(Config::default);

fuzz_target!(|data: &[u8]| {
    let Ok(checkpoint) = state::decode(data) else { return };
    for shard in checkpoint.shards {
        let mut pipeline = Pipeline::new(&CONFIG.pipeline_settings());
        // As the daemon: `decode` refused the numbers no stream makes.
        pipeline.restore(shard.assembler, shard.sessions, Some((shard.accumulators, shard.counters)));
        pipeline.finalize_expired(Some(1_700_000_000_000));
        pipeline.finalize_all();
        assert_eq!(pipeline.open_lists(), 0);
    }
});
