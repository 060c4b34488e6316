//! Writes one of the tiny random-weight GGUFs, so that scripts/tiny-arch-references.py can run
//! llama.cpp on exactly the file the architecture tests build at test time.
//!
//! `cargo run --release -p braid-model --example write-tiny-gguf -- ARCH PATH SEED`

use braid_model::tiny_gguf::{write_arch, Arch};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
    let usage = format!("usage: write-tiny-gguf {{{}}} PATH SEED", names.join("|"));
    let [arch, path, seed] = args.as_slice() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let (Some(arch), Ok(seed)) = (Arch::from_name(arch), seed.parse::<u64>()) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    match write_arch(Path::new(path), arch, seed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writing {path}: {e}");
            ExitCode::FAILURE
        }
    }
}
