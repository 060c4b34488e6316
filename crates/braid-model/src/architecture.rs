//! The architectures braid runs: one row each, holding every way the family differs from the
//! shared forward, so that adding a family is a row here (plus any new piece the forward
//! needs) and the forward, the loader and the tiny test models read the same flags.
//!
//! Flags are what a GGUF does not say for itself: a file has biases or norms as tensors, but
//! which rope pairing, activation and embedding scale its family uses is only known by name.

/// Which dimensions rope rotates together. llama.cpp's converter permutes llama's Q and K so
/// that pairs are adjacent; the other families keep Hugging Face's halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// `(x[2i], x[2i+1])`.
    Adjacent,
    /// `(x[i], x[i + d/2])` (GPT-NeoX).
    Halves,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU with GELU's tanh approximation: `gelu(gate) · up`.
    GeluTanh,
}

/// What tells one family apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchitectureFlags {
    pub rope_style: RopeStyle,
    pub activation: Activation,
    /// Q, K and V carry biases.
    pub qkv_bias: bool,
    /// Each query and key head is RMS-normalized before rope.
    pub qk_norm: bool,
    /// Attention's and the MLP's outputs are normalized before the residual add.
    pub post_norms: bool,
    /// The embedding rows are scaled by √hidden as they are read.
    pub scaled_embedding: bool,
    /// Some layers attend to a sliding window of keys (`attention.sliding_window`).
    pub sliding_window: bool,
}

/// Generates [`Architecture`] with its names and flags from one list.
macro_rules! architectures {
    ($($(#[doc = $doc:literal])* $arch:ident = $name:literal $flags:expr;)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Architecture {
            $($(#[doc = $doc])* $arch,)*
        }

        impl Architecture {
            pub const ALL: [Architecture; [$(Architecture::$arch),*].len()] =
                [$(Architecture::$arch),*];

            /// The name in a GGUF's `general.architecture`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Architecture::$arch => $name,)*
                }
            }

            pub fn flags(self) -> ArchitectureFlags {
                match self {
                    $(Architecture::$arch => $flags,)*
                }
            }
        }
    };
}

const LLAMA_LIKE: ArchitectureFlags = ArchitectureFlags {
    rope_style: RopeStyle::Halves,
    activation: Activation::Silu,
    qkv_bias: false,
    qk_norm: false,
    post_norms: false,
    scaled_embedding: false,
    sliding_window: false,
};

architectures! {
    /// SmolLM, Llama 2, Llama 3.x, TinyLlama: Q and K permuted by llama.cpp's converter.
    Llama = "llama" ArchitectureFlags { rope_style: RopeStyle::Adjacent, ..LLAMA_LIKE };
    /// Qwen2, Qwen2.5.
    Qwen2 = "qwen2" ArchitectureFlags { qkv_bias: true, ..LLAMA_LIKE };
    /// Qwen3 (dense).
    Qwen3 = "qwen3" ArchitectureFlags { qk_norm: true, ..LLAMA_LIKE };
    /// Gemma 3 (text).
    Gemma3 = "gemma3" ArchitectureFlags {
        activation: Activation::GeluTanh,
        qk_norm: true,
        post_norms: true,
        scaled_embedding: true,
        sliding_window: true,
        ..LLAMA_LIKE
    };
}

impl Architecture {
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The names braid runs, as a refusal lists them.
    pub fn names() -> String {
        Self::ALL.map(|a| format!("`{}`", a.name())).join(", ")
    }
}
