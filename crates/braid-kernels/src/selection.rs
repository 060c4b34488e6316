//! Which kernel computes: the fastest this CPU runs, or the one `BRAID_KERNEL` asks for,
//! chosen once for the whole process.
//!
//! A kernel the CPU cannot run is refused with an error that names it, so a benchmark or a
//! test never silently measures another kernel than the one it asked for.

use crate::Kernel;
use std::sync::OnceLock;
/// Why a requested kernel cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("BRAID_KERNEL={0:?} is not a kernel braid has; choose one of {names}", names = Kernel::names())]
    Unknown(String),
    #[error(
        "the {kernel} kernel {why}; kernels this CPU can run: {supported}",
        kernel = .0.name(),
        why = .0.unsupported_reason().unwrap_or_default(),
        supported = supported_names()
    )]
    Unsupported(Kernel),
}

impl Kernel {
    fn names() -> String {
        Kernel::ALL.map(Kernel::name).join(", ")
    }

    pub fn parse(name: &str) -> Result<Kernel, KernelError> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == name.trim().to_ascii_lowercase())
            .ok_or_else(|| KernelError::Unknown(name.to_string()))
    }

    /// The kernels this CPU can run, fastest first.
    pub fn supported() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// Why this machine cannot run the kernel, as the rest of "the NAME kernel …", or `None`
    /// if it can: "needs" the features the CPU lacks, or for AMX on a CPU that has it, what
    /// else stopped it (the OS, the check at start).
    pub fn unsupported_reason(self) -> Option<String> {
        if self.is_supported() {
            return None;
        }
        let lacking: Vec<&str> = self
            .required_features()
            .iter()
            .copied()
            .filter(|f| !cpu_has(f))
            .collect();
        if lacking.is_empty() {
            // The CPU has every feature, so something beyond them said no.
            let why = self
                .ready()
                .err()
                .unwrap_or("this build does not run it here");
            return Some(format!("cannot run here: {why}"));
        }
        Some(format!(
            "needs {}, which this CPU does not have",
            lacking.join(", ")
        ))
    }

    /// What a kernel needs beyond the CPU's features (asked only where the CPU has them): for
    /// AMX, the tile state from the OS and a check against the reference.
    pub(crate) fn ready(self) -> Result<(), &'static str> {
        #[cfg(target_arch = "x86_64")]
        if self == Kernel::Amx {
            return crate::amx::usable();
        }
        Ok(())
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        Kernel::supported()[0]
    }
}

fn supported_names() -> String {
    Kernel::supported()
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the CPU running this process has the feature `name`.
pub(crate) fn cpu_has(name: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match name {
            "avx512f" => is_x86_feature_detected!("avx512f"),
            "avx512bw" => is_x86_feature_detected!("avx512bw"),
            "avx512vl" => is_x86_feature_detected!("avx512vl"),
            "avx512vnni" => is_x86_feature_detected!("avx512vnni"),
            "avx512bf16" => is_x86_feature_detected!("avx512bf16"),
            "avxvnni" => is_x86_feature_detected!("avxvnni"),
            "avx2" => is_x86_feature_detected!("avx2"),
            "fma" => is_x86_feature_detected!("fma"),
            "f16c" => is_x86_feature_detected!("f16c"),
            "amx-tile" | "amx-int8" => crate::amx::cpu_reports_amx(),
            _ => false,
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        match name {
            "neon" => std::arch::is_aarch64_feature_detected!("neon"),
            "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
            "i8mm" => std::arch::is_aarch64_feature_detected!("i8mm"),
            _ => false,
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = name;
        false
    }
}

/// Features beyond the kernel table's that a path uses: the embedding model's bf16 products
/// (`bf16.rs`).
const EXTRA_FEATURES: &[&str] = &["avx512bf16"];

/// The vector features of this CPU that any kernel could use, for `braid info`.
pub fn cpu_features() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = Kernel::ALL
        .iter()
        .flat_map(|k| k.required_features().iter().copied())
        .chain(EXTRA_FEATURES.iter().copied())
        .filter(|f| cpu_has(f))
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

static ACTIVE: OnceLock<Kernel> = OnceLock::new();

/// Chooses the kernel for the rest of the process: `requested` (a name, as `BRAID_KERNEL`
/// takes) if given, else the fastest this CPU has. Call it once at start-up, before the first
/// matmul; it returns the kernel in force, which is the first one chosen if it was called
/// before (a process computes with one kernel from start to end).
pub fn select(requested: Option<&str>) -> Result<Kernel, KernelError> {
    let kernel = match requested {
        Some(name) => {
            let k = Kernel::parse(name)?;
            if !k.is_supported() {
                return Err(KernelError::Unsupported(k));
            }
            k
        }
        None => Kernel::best(),
    };
    Ok(*ACTIVE.get_or_init(|| kernel))
}

/// [`select`] with `BRAID_KERNEL` from the environment (unset or empty: the fastest).
pub fn select_from_env() -> Result<Kernel, KernelError> {
    select(requested_by_env().as_deref())
}

/// The kernel `BRAID_KERNEL` asks for, if it is set and not empty.
fn requested_by_env() -> Option<String> {
    std::env::var("BRAID_KERNEL")
        .ok()
        .filter(|s| !s.trim().is_empty())
}

/// Whether `BRAID_KERNEL` chooses the kernel (rather than the CPU's fastest), for reports.
pub fn forced_by_env() -> bool {
    requested_by_env().is_some()
}

/// The kernel in force. A process that never called [`select`] (a test, a library user)
/// gets `BRAID_KERNEL`'s choice, and a panic naming the problem if that choice is invalid.
pub fn active() -> Kernel {
    // Not `get_or_init(select_from_env)`: `select` sets the same cell, and a `OnceLock`
    // initialized again from inside its own initializer deadlocks.
    match ACTIVE.get() {
        Some(&kernel) => kernel,
        None => select_from_env().unwrap_or_else(|e| panic!("{e}")),
    }
}
