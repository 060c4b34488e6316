//! Rotary position embedding. Dimension `i` of each pair rotates by
//! `pos · scale · base^(-2i/d) / factor[i]`; which dimensions form a pair depends on the
//! family ([`RopeStyle`]). Llama 3's frequency factors (`rope_freqs.weight`) stretch the low
//! frequencies for long contexts. The angles are tabulated once for the whole context so a
//! step only multiplies.

use crate::config::RopeStyle;

pub struct Rope {
    half: usize,
    style: RopeStyle,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// `factors`, when given, holds `head_dim / 2` divisors of the pairs' frequencies.
    pub fn new(
        head_dim: usize,
        max_pos: usize,
        base: f32,
        scale: f32,
        style: RopeStyle,
        factors: Option<&[f32]>,
    ) -> Self {
        let half = head_dim / 2;
        let theta: Vec<f64> = (0..half)
            .map(|i| {
                let factor = factors.map_or(1.0, |f| f[i] as f64);
                scale as f64 / (base as f64).powf(2.0 * i as f64 / head_dim as f64) / factor
            })
            .collect();
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for t in &theta {
                let angle = p as f64 * t;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Self {
            half,
            style,
            cos,
            sin,
        }
    }

    /// Rotates every head of `x` (heads laid end to end) for position `pos`.
    #[inline(always)]
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let (cos, sin) = (
            &self.cos[pos * self.half..][..self.half],
            &self.sin[pos * self.half..][..self.half],
        );
        for head in x.chunks_exact_mut(2 * self.half) {
            match self.style {
                RopeStyle::Adjacent => {
                    for i in 0..self.half {
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * cos[i] - b * sin[i];
                        head[2 * i + 1] = a * sin[i] + b * cos[i];
                    }
                }
                RopeStyle::Halves => {
                    let (lo, hi) = head.split_at_mut(self.half);
                    for i in 0..self.half {
                        let (a, b) = (lo[i], hi[i]);
                        lo[i] = a * cos[i] - b * sin[i];
                        hi[i] = a * sin[i] + b * cos[i];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_styles_rotate_the_same_pairs_by_the_same_angles() {
        let d = 8;
        let x: Vec<f32> = (0..d).map(|i| i as f32 + 1.0).collect();
        let adjacent = Rope::new(d, 16, 100.0, 1.0, RopeStyle::Adjacent, None);
        let halves = Rope::new(d, 16, 100.0, 1.0, RopeStyle::Halves, None);
        // The same vector with pairs moved from (2i, 2i+1) to (i, i + d/2).
        let to_halves = |v: &[f32]| -> Vec<f32> {
            (0..d)
                .map(|j| {
                    if j < d / 2 {
                        v[2 * j]
                    } else {
                        v[2 * (j - d / 2) + 1]
                    }
                })
                .collect()
        };
        let (mut a, mut h) = (x.clone(), to_halves(&x));
        adjacent.apply(&mut a, 5);
        halves.apply(&mut h, 5);
        assert_eq!(to_halves(&a), h);
        assert_ne!(a, x);
    }

    #[test]
    fn factors_and_scale_divide_the_angles() {
        let d = 4;
        let plain = Rope::new(d, 64, 10.0, 1.0, RopeStyle::Halves, None);
        let factored = Rope::new(d, 64, 10.0, 1.0, RopeStyle::Halves, Some(&[1.0, 4.0]));
        let scaled = Rope::new(d, 64, 10.0, 0.25, RopeStyle::Halves, None);
        let x = [1.0, 1.0, 0.0, 0.0];
        let rotate = |r: &Rope, pos| {
            let mut v = x;
            r.apply(&mut v, pos);
            v
        };
        // Pair 1 at position 8 with factor 4 turns as far as at position 2 without.
        assert_eq!(rotate(&factored, 8)[1], rotate(&plain, 2)[1]);
        assert_eq!(rotate(&factored, 8)[0], rotate(&plain, 8)[0]);
        assert_eq!(rotate(&scaled, 8), rotate(&plain, 2));
    }
}
