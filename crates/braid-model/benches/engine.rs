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
    println!("\nlinear layers of one forward, tokens/s (candle's paths vs braid's int8 kernel, same run):");
    println!(
        "{:>5} {:>16} {:>12} {:>11} {:>11}",
        "rows", "candle as shipped", "candle Q8_0", "candle f32", "braid int8"
    );
    let rows =
        braid_model::kernel_comparison::run(&path, model.config().num_layers, &[1, 4, 16, 64, 256])
            .expect("kernel comparison");
    for r in rows {
        println!(
            "{:>5} {:>16.0} {:>12.0} {:>11.0} {:>11.0}",
            r.rows, r.candle_as_shipped, r.candle_q8_0, r.candle_f32, r.braid_int8
        );
    }
}
