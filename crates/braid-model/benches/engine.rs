//! `cargo bench -p braid-model`: the engine alone on the default model (see docs/PERFORMANCE.md).

use braid_model::engine_bench::{run, EngineBenchOptions};
use braid_model::LoadedModel;
use std::path::PathBuf;

fn main() {
    let path = std::env::var("BRAID_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(braid_model::DEFAULT_MODEL_PATH)
        });
    let model = LoadedModel::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let report = run(&model, &EngineBenchOptions::default()).expect("engine benchmark");
    print!("{report}");
}
