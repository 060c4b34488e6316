//! How one vector is made from a text's rows of hidden state, as sentence-transformers'
//! Pooling module does it, and the unit-length normalisation of its Normalize module.
//!
//! Plain loops over `f32` rows: the work is a few thousand additions per text, nothing next to
//! the encoder, and rows in memory are what both the BERT encoder and braid's decoder forward
//! have at hand.

/// Which rows make the vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the text's tokens (sentence-transformers' `pooling_mode_mean_tokens`).
    Mean,
    /// The first token's row (`pooling_mode_cls_token`).
    Cls,
    /// The last token's row (`pooling_mode_lasttoken`; how decoder embedders are used).
    Last,
}

impl Pooling {
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }

    /// The vector for one text from its `rows` (`len` rows of `dim` values, the text's own
    /// tokens only: padding already left out).
    pub fn pool(self, rows: &[f32], len: usize, dim: usize) -> Vec<f32> {
        assert!(
            len > 0 && rows.len() >= len * dim,
            "pooling needs the text's rows"
        );
        match self {
            Pooling::Cls => rows[..dim].to_vec(),
            Pooling::Last => rows[(len - 1) * dim..len * dim].to_vec(),
            Pooling::Mean => {
                // Summed in f64: a 256-token mean in f32 drifts in the last bits.
                let mut sum = vec![0f64; dim];
                for row in rows[..len * dim].chunks_exact(dim) {
                    for (s, &x) in sum.iter_mut().zip(row) {
                        *s += f64::from(x);
                    }
                }
                sum.iter().map(|&s| (s / len as f64) as f32).collect()
            }
        }
    }
}

/// Scales `v` to unit length (left as it is when it is all zeros), as
/// `torch.nn.functional.normalize` does.
pub fn normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    let norm = norm.max(1e-12);
    for x in v {
        *x = (f64::from(*x) / norm) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 9.0];

    #[test]
    fn each_pooling_takes_its_rows() {
        assert_eq!(Pooling::Mean.pool(&ROWS, 3, 2), vec![3.0, 5.0]);
        assert_eq!(Pooling::Cls.pool(&ROWS, 3, 2), vec![1.0, 2.0]);
        assert_eq!(Pooling::Last.pool(&ROWS, 3, 2), vec![5.0, 9.0]);
        // Rows past the text's length are padding and never read.
        assert_eq!(Pooling::Mean.pool(&ROWS, 2, 2), vec![2.0, 3.0]);
        assert_eq!(Pooling::Last.pool(&ROWS, 2, 2), vec![3.0, 4.0]);
    }

    #[test]
    fn normalize_gives_unit_length_and_keeps_zero() {
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0; 3];
        normalize(&mut z);
        assert_eq!(z, vec![0.0; 3]);
    }
}
