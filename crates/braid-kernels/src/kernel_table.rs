//! The table of kernels: one row per instruction set, holding everything that differs between
//! them, so that the choice is made once, when the process starts, and nowhere else.
//!
//! ggml's CPU type traits are the model: a row names the kernel, the CPU features its code is
//! compiled for, and its operations ([`KernelOps`]): a tile function per weight format, which
//! compilation of the float loops runs with it ([`FloatIsa`]), and the multiply-add instruction
//! its int8 peak is measured with. The [`Kernel`] enum, its names and [`Kernel::ALL`] are
//! generated from the rows. Adding an instruction set means a file with its tile functions
//! and one row here. A row's operations exist only on the architecture it runs on; elsewhere
//! the kernel is listed (for `braid info`) but never supported.

use crate::kernel_ops::KernelOps;
use crate::{int4, int5, int8, FloatIsa};
use std::sync::OnceLock;

/// One row of the table.
pub(crate) struct KernelRow {
    pub name: &'static str,
    pub features: &'static [&'static str],
    /// `None` on an architecture the kernel does not run on.
    pub ops: Option<&'static KernelOps>,
}

/// The operations of an instruction-set file that exists only on `arch`.
macro_rules! ops_on {
    ($arch:literal, $ops:path) => {{
        #[cfg(target_arch = $arch)]
        let ops = Some(&$ops);
        #[cfg(not(target_arch = $arch))]
        let ops = None;
        ops
    }};
}

/// Generates [`Kernel`] and the rows from one list, in order of preference.
macro_rules! kernel_table {
    ($($(#[doc = $doc:literal])* $kernel:ident = $name:literal [$($feature:literal),*] $ops:expr;)*) => {
        /// One instruction-set path. The order of [`Kernel::ALL`] is the order of preference.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kernel {
            $($(#[doc = $doc])* $kernel,)*
        }

        impl Kernel {
            pub const ALL: [Kernel; [$(Kernel::$kernel),*].len()] = [$(Kernel::$kernel),*];
        }

        static ROWS: [KernelRow; Kernel::ALL.len()] = [
            $(KernelRow { name: $name, features: &[$($feature),*], ops: $ops },)*
        ];
    };
}

kernel_table! {
    /// AMX int8 tile multiplies for prompt rows (16 at a time), AVX-512 VNNI for the rest:
    /// Intel Sapphire Rapids and later Xeons, where Linux lends the process the tile state.
    Amx = "amx" [
        "amx-tile", "amx-int8", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx2", "fma", "f16c"
    ] ops_on!("x86_64", crate::amx::OPS);
    /// AVX-512 F/BW/VL with VNNI (`vpdpbusd` on 512-bit vectors): Intel Ice Lake and later
    /// servers, AMD Zen 4 and Zen 5.
    Avx512Vnni = "avx512vnni" ["avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx2", "fma", "f16c"]
        ops_on!("x86_64", crate::avx512::OPS);
    /// AVX-VNNI (`vpdpbusd` on 256-bit vectors, VEX-encoded): Intel Alder Lake and later
    /// client chips, which have no AVX-512.
    AvxVnni = "avxvnni" ["avxvnni", "avx2", "fma", "f16c"] ops_on!("x86_64", crate::avx2::AVXVNNI_OPS);
    /// AVX2 with FMA and F16C (`vpmaddubsw`/`vpmaddwd`): every x86-64 CPU since Haswell and Zen 1.
    Avx2 = "avx2" ["avx2", "fma", "f16c"] ops_on!("x86_64", crate::avx2::AVX2_OPS);
    /// Arm NEON with the i8mm matrix multiply (`smmla`): Graviton 3 and 4, Apple M2 and later.
    NeonI8mm = "neon-i8mm" ["neon", "dotprod", "i8mm"] ops_on!("aarch64", crate::neon::I8MM_OPS);
    /// Arm NEON with dot products (`sdot`): Graviton 2, Ampere Altra, Apple M1.
    Neon = "neon" ["neon", "dotprod"] ops_on!("aarch64", crate::neon::DOTPROD_OPS);
    /// Plain Rust, compiled for the baseline CPU: the reference every other path must match.
    Portable = "portable" [] Some(&PORTABLE_OPS);
}

/// The portable reference: every format's `reference_tiles`, the float loops as compiled for
/// the baseline CPU, and no multiply-add instruction to measure.
static PORTABLE_OPS: KernelOps = KernelOps {
    int8: <int8::Tile as crate::format_tile::FormatTile>::reference_tiles,
    int4: <int4::Tile as crate::format_tile::FormatTile>::reference_tiles,
    int5: <int5::Tile as crate::format_tile::FormatTile>::reference_tiles,
    floats: FloatIsa::Portable,
    peak: None,
};

impl Kernel {
    pub(crate) fn row(self) -> &'static KernelRow {
        &ROWS[self as usize]
    }

    /// The kernel's operations.
    ///
    /// # Panics
    ///
    /// If this CPU cannot run the kernel: code that computes asks for the kernel in force
    /// ([`crate::active`]) or checks [`Kernel::is_supported`] first.
    pub(crate) fn ops(self) -> &'static KernelOps {
        assert!(
            self.is_supported(),
            "the {self} kernel does not run on this CPU"
        );
        self.row().ops.expect("a supported kernel has operations")
    }

    /// The name `BRAID_KERNEL` and `--kernel` take, and every report shows.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The CPU features the kernel's code is compiled for (as `is_x86_feature_detected!` and
    /// `is_aarch64_feature_detected!` name them).
    pub fn required_features(self) -> &'static [&'static str] {
        self.row().features
    }

    /// Whether this CPU can run the kernel. Miri interprets no vector intrinsics: under it,
    /// only the portable path exists. Every matmul and attention call asks, so the CPU's
    /// features are looked up once per process.
    pub fn is_supported(self) -> bool {
        static SUPPORTED: OnceLock<[bool; Kernel::ALL.len()]> = OnceLock::new();
        SUPPORTED.get_or_init(|| {
            Kernel::ALL.map(|k| {
                if cfg!(miri) {
                    return k == Kernel::Portable;
                }
                k.row().ops.is_some()
                    && k.required_features().iter().all(|f| crate::cpu_has(f))
                    && k.ready().is_ok()
            })
        })[self as usize]
    }

    /// Runs `loops` compiled for this kernel's float instruction set.
    pub fn run_float_loops<F: crate::FloatLoops>(self, loops: F) -> F::Output {
        // SAFETY: `ops` checked that this CPU runs the kernel, so it has the features of the
        // kernel's float loops.
        unsafe { self.ops().floats.run(loops) }
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
