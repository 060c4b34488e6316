//! `braid info`: what this binary would compute with on this machine, and the model it
//! would serve: the version, the CPU and its vector features, every kernel and which one is
//! chosen (and why), the compute threads, and the model's shape.

use braid_kernels::{self as kernels, Kernel};
use braid_model::LoadedModel;
use serde_json::{json, Value};
use std::path::Path;

/// Everything `braid info` reports, as the JSON `--json` prints; the text form is read from it.
pub fn collect(model: &Path, threads: usize) -> Value {
    let active = kernels::active();
    let features = kernels::cpu_features();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "cpu": {
            "model": cpu_model(),
            "arch": std::env::consts::ARCH,
            "features": features,
        },
        "kernel": active.name(),
        "kernel_forced_by_env": kernels::forced_by_env(),
        "kernels": Kernel::ALL.map(|k| json!({
            "name": k.name(),
            "supported": k.is_supported(),
            "selected": k == active,
            // The features the kernel needs that this CPU lacks.
            "missing": k.required_features().iter().filter(|f| !features.contains(f)).collect::<Vec<_>>(),
            "unsupported_reason": k.unsupported_reason(),
        })),
        "supported_kernels": Kernel::supported().iter().map(|k| k.name()).collect::<Vec<_>>(),
        // The embedding model's matrix products (bf16 × bf16, summed in f32).
        "bf16_products": kernels::bf16::Bf16Path::for_kernel(active).name(),
        "threads": threads,
        "model": model_summary(model),
    })
}

/// The CPU's marketing name from /proc/cpuinfo (x86 Linux has it; most Arm kernels do not).
fn cpu_model() -> Option<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

fn model_summary(path: &Path) -> Value {
    if !path.exists() {
        return json!({"path": path, "found": false});
    }
    match LoadedModel::load(path) {
        Ok(m) => {
            let c = m.config();
            json!({
                "path": path,
                "found": true,
                "name": c.name,
                "architecture": c.architecture.name(),
                "sliding_window": c.sliding_window.as_ref().map(|w| w.size),
                "layers": c.num_layers,
                "hidden": c.hidden,
                "ffn": c.ffn,
                "heads": c.num_heads,
                "kv_heads": c.num_kv_heads,
                "head_dim": c.head_dim,
                "vocab": c.vocab_size,
                "context_length": c.context_length,
                "packed_weight_bytes": m.model.weights.size_in_bytes(),
                "packed_weight_bytes_by_format": m.model.weights.bytes_by_format(),
            })
        }
        Err(e) => json!({"path": path, "found": true, "error": e.to_string()}),
    }
}

/// The report as text, one fact a line.
pub fn render(info: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("unknown").to_string();
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!("braid {}", s(&info["version"])));
    let cpu = &info["cpu"];
    line(format!("cpu: {} ({})", s(&cpu["model"]), s(&cpu["arch"])));
    let features: Vec<String> = cpu["features"]
        .as_array()
        .map(|a| a.iter().map(s).collect())
        .unwrap_or_default();
    line(format!(
        "vector features: {}",
        if features.is_empty() {
            "none".to_string()
        } else {
            features.join(" ")
        }
    ));
    line("kernels:".into());
    for k in info["kernels"].as_array().into_iter().flatten() {
        let note = if k["selected"] == true {
            if info["kernel_forced_by_env"] == true {
                "yes  <- selected (forced by BRAID_KERNEL)".to_string()
            } else {
                "yes  <- selected (the fastest supported)".to_string()
            }
        } else if k["supported"] == true {
            "yes".to_string()
        } else {
            let missing: Vec<String> = k["missing"]
                .as_array()
                .map(|a| a.iter().map(s).collect())
                .unwrap_or_default();
            if missing.is_empty() {
                // The CPU has every feature and something else said no (AMX: the OS).
                format!("no   ({})", s(&k["unsupported_reason"]))
            } else {
                format!("no   (lacks {})", missing.join(" "))
            }
        };
        line(format!("  {:<11} supported: {note}", s(&k["name"])));
    }
    line(format!(
        "bf16 products (a prompt's attention, the embedding model): {}",
        s(&info["bf16_products"])
    ));
    line(format!("compute threads: {}", info["threads"]));
    let m = &info["model"];
    let path = s(&m["path"]);
    if m["found"] != true {
        line(format!(
            "model: {path} does not exist (scripts/fetch-model.sh fetches the default; --model or BRAID_MODEL picks another)"
        ));
    } else if let Some(error) = m["error"].as_str() {
        line(format!("model: {path} cannot be loaded: {error}"));
    } else {
        line(format!("model: {path}"));
        line(format!(
            "  {} ({}): {} layers, hidden {}, ffn {}, {} heads / {} kv heads of {}, vocab {}, context {}",
            s(&m["name"]),
            s(&m["architecture"]),
            m["layers"],
            m["hidden"],
            m["ffn"],
            m["heads"],
            m["kv_heads"],
            m["head_dim"],
            m["vocab"],
            m["context_length"],
        ));
        let mb = |v: &Value| v.as_f64().unwrap_or(0.0) / 1e6;
        let formats = m["packed_weight_bytes_by_format"]
            .as_object()
            .map(|by| {
                by.iter()
                    .map(|(format, bytes)| format!("{format} {:.1} MB", mb(bytes)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        line(format!(
            "  packed weights: {:.1} MB ({formats})",
            mb(&m["packed_weight_bytes"])
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{collect, render};
    use std::path::Path;

    #[test]
    fn a_missing_model_is_a_line_not_an_error() {
        let info = collect(Path::new("/nonexistent/model.gguf"), 3);
        assert_eq!(info["model"]["found"], false);
        assert_eq!(info["threads"], 3);
        let text = render(&info);
        assert!(
            text.contains("model: /nonexistent/model.gguf does not exist"),
            "{text}"
        );
        assert!(text.contains("compute threads: 3"), "{text}");
    }

    #[test]
    fn exactly_one_kernel_is_selected_and_it_is_supported() {
        let info = collect(Path::new("/nonexistent/model.gguf"), 1);
        let kernels = info["kernels"].as_array().unwrap();
        let selected: Vec<_> = kernels.iter().filter(|k| k["selected"] == true).collect();
        assert_eq!(selected.len(), 1, "{kernels:?}");
        assert_eq!(selected[0]["supported"], true);
        assert_eq!(selected[0]["name"], info["kernel"]);
        assert!(info["supported_kernels"]
            .as_array()
            .unwrap()
            .contains(&info["kernel"]));
    }
}
