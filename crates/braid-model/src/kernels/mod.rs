//! The instruction sets braid computes with, chosen once when the process starts.
//!
//! One binary runs on any x86-64-v2 or aarch64 CPU, so nothing fast may depend on how it was
//! compiled: every hot loop exists once per instruction set, each copy compiled with that set's
//! target features, and [`active`] picks the copy when the process starts. `BRAID_KERNEL`
//! forces a choice; a kernel the CPU cannot run is refused with an error that names it, so a
//! benchmark or a test never silently measures another kernel than the one it asked for.
//!
//! The module is organised by (instruction set × weight format). A weight format is a file that
//! packs tiles of 16 output rows × 32 K values and holds the portable reference: int8 blocks
//! ([`int8`], any GGUF type requantized), 4-bit blocks ([`int4`], Q4_0, Q4_1 and Q4_K) and
//! 5-bit blocks ([`int5`], Q5_0, Q5_1 and Q5_K: the 4-bit tile plus a plane of fifth bits).
//! An instruction set is a file (`avx512.rs`, `avx2.rs`, `neon.rs`) with one weight-stationary
//! loop over tiles and rows, and one block function per format that says how a tile of that
//! format meets the rows; [`PackedWeight`] dispatches on both. Float loops that the compiler vectorizes
//! (attention, the softmax's exponential) are written once, generic over [`Lanes`], and
//! instantiated per instruction set by a `#[target_feature]` entry point each.
//!
//! Every path produces the same bits: integer dot products are exact whatever their order,
//! and the float arithmetic after them (and in attention) is the same sequence of IEEE
//! operations on every path, with fused multiply-adds where the source says `mul_add`. The
//! tests compare each path the CPU has to the portable one bit for bit.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(test)]
mod format_checks;
pub mod int4;
pub mod int5;
pub mod int8;
mod lanes;
#[cfg(target_arch = "aarch64")]
mod neon;
mod packed_weight;
pub mod peak;
mod quantized_rows;

pub use int4::{Int4Source, Int4Weight};
pub use int5::{Int5Source, Int5Weight};
pub use int8::{Int8Source, Int8Weight};
#[cfg(target_arch = "x86_64")]
pub(crate) use lanes::{Avx512Lanes, F16cLanes};
pub(crate) use lanes::{Lanes, PortableLanes};
pub use packed_weight::{matmul, matmul_reference, matmul_with, PackedWeight};
pub use quantized_rows::QuantizedRows;

use std::sync::OnceLock;

/// Values per quantization block along K, in every weight format.
pub const BLOCK: usize = 32;
/// Output rows per packed tile, in every weight format.
pub const TILE_N: usize = 16;

/// One instruction-set path. The order of [`Kernel::ALL`] is the order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// AVX-512 F/BW/VL with VNNI (`vpdpbusd` on 512-bit vectors): Intel Ice Lake and later
    /// servers, AMD Zen 4 and Zen 5.
    Avx512Vnni,
    /// AVX-VNNI (`vpdpbusd` on 256-bit vectors, VEX-encoded): Intel Alder Lake and later
    /// client chips, which have no AVX-512.
    AvxVnni,
    /// AVX2 with FMA and F16C (`vpmaddubsw`/`vpmaddwd`): every x86-64 CPU since Haswell and Zen 1.
    Avx2,
    /// Arm NEON with the i8mm matrix multiply (`smmla`): Graviton 3 and 4, Apple M2 and later.
    NeonI8mm,
    /// Arm NEON with dot products (`sdot`): Graviton 2, Ampere Altra, Apple M1.
    Neon,
    /// Plain Rust, compiled for the baseline CPU: the reference every other path must match.
    Portable,
}

/// Why a requested kernel cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("BRAID_KERNEL={0:?} is not a kernel braid has; choose one of {names}", names = Kernel::names())]
    Unknown(String),
    #[error(
        "the {kernel} kernel needs {needs}, which this CPU does not have; \
         kernels this CPU can run: {supported}",
        kernel = .0.name(),
        needs = .0.required_features().join(", "),
        supported = supported_names()
    )]
    Unsupported(Kernel),
}

impl Kernel {
    pub const ALL: [Kernel; 6] = [
        Kernel::Avx512Vnni,
        Kernel::AvxVnni,
        Kernel::Avx2,
        Kernel::NeonI8mm,
        Kernel::Neon,
        Kernel::Portable,
    ];

    /// The name `BRAID_KERNEL` and `--kernel` take, and every report shows.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni => "avx512vnni",
            Kernel::AvxVnni => "avxvnni",
            Kernel::Avx2 => "avx2",
            Kernel::NeonI8mm => "neon-i8mm",
            Kernel::Neon => "neon",
            Kernel::Portable => "portable",
        }
    }

    fn names() -> String {
        Kernel::ALL.map(Kernel::name).join(", ")
    }

    pub fn parse(name: &str) -> Result<Kernel, KernelError> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name() == name.trim().to_ascii_lowercase())
            .ok_or_else(|| KernelError::Unknown(name.to_string()))
    }

    /// The CPU features the kernel's code is compiled for (as `is_x86_feature_detected!` and
    /// `is_aarch64_feature_detected!` name them).
    pub fn required_features(self) -> &'static [&'static str] {
        match self {
            Kernel::Avx512Vnni => &[
                "avx512f",
                "avx512bw",
                "avx512vl",
                "avx512vnni",
                "avx2",
                "fma",
                "f16c",
            ],
            Kernel::AvxVnni => &["avxvnni", "avx2", "fma", "f16c"],
            Kernel::Avx2 => &["avx2", "fma", "f16c"],
            Kernel::NeonI8mm => &["neon", "dotprod", "i8mm"],
            Kernel::Neon => &["neon", "dotprod"],
            Kernel::Portable => &[],
        }
    }

    /// Whether this CPU can run the kernel. Miri interprets no vector intrinsics: under it,
    /// only the portable path exists.
    pub fn is_supported(self) -> bool {
        if cfg!(miri) {
            return self == Kernel::Portable;
        }
        self.required_features().iter().all(|f| cpu_has(f))
    }

    /// The kernels this CPU can run, fastest first.
    pub fn supported() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        Kernel::supported()[0]
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
fn cpu_has(name: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match name {
            "avx512f" => is_x86_feature_detected!("avx512f"),
            "avx512bw" => is_x86_feature_detected!("avx512bw"),
            "avx512vl" => is_x86_feature_detected!("avx512vl"),
            "avx512vnni" => is_x86_feature_detected!("avx512vnni"),
            "avxvnni" => is_x86_feature_detected!("avxvnni"),
            "avx2" => is_x86_feature_detected!("avx2"),
            "fma" => is_x86_feature_detected!("fma"),
            "f16c" => is_x86_feature_detected!("f16c"),
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

/// The vector features of this CPU that any kernel could use, for `braid info`.
pub fn cpu_features() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = Kernel::ALL
        .iter()
        .flat_map(|k| k.required_features().iter().copied())
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
