//! Shared by the model tests: where the real model and the reference data live.
#![allow(dead_code)]

use braid_model::LoadedModel;
use std::path::PathBuf;
use std::sync::OnceLock;

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The default model, loaded once per test binary. Fails with the fix when it is missing.
pub fn real_model() -> &'static LoadedModel {
    static MODEL: OnceLock<LoadedModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = workspace_root().join(braid_model::DEFAULT_MODEL_PATH);
        LoadedModel::load(&path).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// llama.cpp's tokenizations, chat renderings and greedy continuations for the default model,
/// kept in the repository so that a fresh clone can check against them.
pub fn reference() -> serde_json::Value {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/smollm2-reference.json"
    ));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("reference JSON")
}
