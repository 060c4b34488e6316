//! Rotary position embedding, as llama.cpp lays out llama weights in GGUF: adjacent pairs
//! `(x[2i], x[2i+1])` rotate by `pos · base^(-2i/d)`. The angles are tabulated once for the
//! whole context so a step only multiplies.

pub struct Rope {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    pub fn new(head_dim: usize, max_pos: usize, base: f32) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for i in 0..half {
                let theta = 1.0 / (base as f64).powf(2.0 * i as f64 / head_dim as f64);
                let angle = p as f64 * theta;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Self { half, cos, sin }
    }

    /// Rotates every head of `x` (heads laid end to end) for position `pos`.
    #[inline(always)]
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let (cos, sin) = (
            &self.cos[pos * self.half..][..self.half],
            &self.sin[pos * self.half..][..self.half],
        );
        for head in x.chunks_exact_mut(2 * self.half) {
            for i in 0..self.half {
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * cos[i] - b * sin[i];
                head[2 * i + 1] = a * sin[i] + b * cos[i];
            }
        }
    }
}
