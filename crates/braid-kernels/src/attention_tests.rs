//! The attention against a plain two-pass softmax, and its bits against tiling, splitting
//! and every kernel.

use super::*;
use rand::{Rng, SeedableRng};

/// Head shapes `(heads, kv_heads, head_dim)`: two heads a group with 16 floats and with 64
/// (value tiles of four pieces), and the default model's three with 64 (a decoding row's
/// group of three queries scored against four blocks at once).
const SHAPES: [(usize, usize, usize); 3] = [(4, 2, 16), (6, 2, 64), (9, 3, 64)];

/// Plain two-pass softmax attention, one row and head at a time; with `bf16`, of the query,
/// keys, weights and values rounded to bf16.
fn naive(keys: &[Vec<f32>], values: &[Vec<f32>], q: &[f32], bf16: bool) -> Vec<f32> {
    let r = |x: f32| if bf16 { attention_bf16::round(x) } else { x };
    let scale = 1.0 / (q.len() as f32).sqrt();
    let scores: Vec<f32> = keys
        .iter()
        .map(|k| k.iter().zip(q).map(|(a, b)| r(*a) * r(*b)).sum::<f32>() * scale)
        .collect();
    let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = scores.iter().map(|s| r((s - max).exp())).collect();
    let total: f32 = w.iter().sum();
    (0..q.len())
        .map(|i| values.iter().zip(&w).map(|(v, w)| r(v[i]) * w).sum::<f32>() / total)
        .collect()
}

#[test]
fn max_of_is_the_folded_maximum() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for len in [0, 1, 15, 16, 17, 100, 256] {
        let mut xs: Vec<f32> = (0..len).map(|_| rng.random_range(-50.0..50.0)).collect();
        if len > 3 {
            xs[len / 2] = f32::NAN;
        }
        let folded = xs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        assert_eq!(max_of(&xs).to_bits(), folded.to_bits(), "{len} values");
    }
}

#[test]
fn matches_two_pass_softmax_and_ignores_tiling() {
    for shape in SHAPES {
        for bf16 in [false, true] {
            check_attention(None, shape, KvDtype::F16, bf16);
        }
    }
}

/// Windows inside one block, across blocks, and across key partitions.
#[test]
fn sliding_windows_see_only_their_keys_and_ignore_tiling() {
    for window in [5, 40, 300] {
        for shape in SHAPES {
            for bf16 in [false, true] {
                check_attention(Some(window), shape, KvDtype::F16, bf16);
            }
        }
    }
}

/// int8 keys and values: keys scored by int8 dot products (f32 rows) or widened (bf16 rows),
/// values read in place by a decoding row's group of three heads and widened once for larger
/// groups, the same bits either way, on every kernel.
#[test]
fn q8_0_keys_and_values_match_two_pass_softmax_and_ignore_tiling() {
    for shape in SHAPES.into_iter().filter(|s| s.2.is_multiple_of(Q8_GROUP)) {
        for bf16 in [false, true] {
            check_attention(None, shape, KvDtype::Q8_0, bf16);
            check_attention(Some(40), shape, KvDtype::Q8_0, bf16);
        }
    }
}

/// What the pool gives back for `x`: its half float, or its q8_0 value.
fn cached(x: &[f32], dtype: KvDtype) -> Vec<f32> {
    match dtype {
        KvDtype::F16 => x.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        KvDtype::Q8_0 => x
            .chunks(Q8_GROUP)
            .flat_map(|group| {
                let (scale, q) = crate::quantize_q8_0(group);
                q.map(|q| q as f32 * crate::f16_to_f32(scale))
            })
            .collect(),
    }
}

/// `heads` query heads over `kv_heads` KV heads of `d` floats each.
/// With `bf16`, the rows are a prompt's: compared with the rounded reference to a few bf16
/// ulps of the output's magnitude (the partitions round their weights against their own
/// maxima, the reference against the row's), and with the f32 one to 0.02.
fn check_attention(
    window: Option<usize>,
    (heads, kv_heads, d): (usize, usize, usize),
    dtype: KvDtype,
    bf16: bool,
) {
    let shape = crate::KvShape {
        num_layers: 1,
        num_kv_heads: kv_heads,
        head_dim: d,
    };
    let g = heads / kv_heads;
    // A shorter context under Miri, which runs the full one too slowly: still three
    // blocks, but one key partition. Otherwise three partitions, the last one partial.
    let bs = 16;
    let ctx: usize = if cfg!(miri) { 34 } else { 600 };
    let n_blocks = ctx.div_ceil(bs);
    let mut pool = KvPool::with_dtype(shape, bs, n_blocks + 2, dtype);
    // Blocks out of order, as a real block table has them.
    let table: Vec<u32> = (0..n_blocks as u32)
        .map(|b| (b * 7 + 3) % (n_blocks as u32 + 2))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut rand_vec = |n: usize| {
        (0..n)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect::<Vec<f32>>()
    };
    let (mut keys, mut values) = (vec![Vec::new(); kv_heads], vec![Vec::new(); kv_heads]);
    for pos in 0..ctx {
        let (k, v) = (rand_vec(kv_heads * d), rand_vec(kv_heads * d));
        pool.write(0, &table, pos, &k, &v);
        // The reference reads the values as the pool rounded them.
        for h in 0..kv_heads {
            keys[h].push(cached(&k[h * d..(h + 1) * d], dtype));
            values[h].push(cached(&v[h * d..(h + 1) * d], dtype));
        }
    }
    let queries = rand_vec(ctx * heads * d);
    let q = |row: usize, head: usize| queries[(row * heads + head) * d..].as_ptr();
    // One scratch for every call, as a compute thread keeps its own across tasks: what one
    // task leaves in it must not reach the next.
    let scratch = std::cell::RefCell::new(Scratch::default());
    // Rows `start..start + rows` of KV head `kv_head`, partitions `parts`, into `out`.
    let attend = |kernel: Kernel,
                  (start, rows): (usize, usize),
                  kv_head: usize,
                  (parts, split): (std::ops::Range<usize>, bool),
                  out: &dyn Fn(usize, usize) -> *mut f32| {
        let task = GroupTask {
            layer: 0,
            block_table: &table,
            start,
            rows,
            kv_head,
            first_head: kv_head * g,
            group: g,
            parts,
            split,
            window,
            bf16,
        };
        // SAFETY: `queries` holds `ctx` rows of `heads` heads; the callers' `out` gives each
        // (row, head) its own region of a buffer that outlives the call.
        unsafe {
            attend_group(
                kernel,
                &pool,
                &task,
                d,
                &mut scratch.borrow_mut(),
                |r, h| q(start + r, h),
                out,
            )
        };
    };
    let run = |kernel: Kernel, start: usize, rows: usize| {
        let mut out = vec![0f32; rows * heads * d];
        let ptr = out.as_mut_ptr();
        for kv_head in 0..kv_heads {
            let whole = (0..usize::MAX, false);
            attend(kernel, (start, rows), kv_head, whole, &|r, h| {
                ptr.wrapping_add((r * heads + h) * d)
            });
        }
        out
    };
    // The same rows with their keys split over tasks of `per` partitions each (as a lone
    // sequence at a long context runs), merged afterwards.
    let run_split = |kernel: Kernel, start: usize, rows: usize, per: usize| {
        let n_parts = parts_for(start + rows - 1, bs);
        let plen = partial_len(d);
        // Each (row, head) has `n_parts` partials; the tasks write disjoint partitions.
        let mut partials = vec![f32::NAN; rows * heads * n_parts * plen];
        let ptr = partials.as_mut_ptr();
        for kv_head in 0..kv_heads {
            for p in (0..n_parts).step_by(per) {
                attend(
                    kernel,
                    (start, rows),
                    kv_head,
                    (p..p + per, true),
                    &|r, h| ptr.wrapping_add((r * heads + h) * n_parts * plen),
                );
            }
        }
        let mut out = vec![0f32; rows * heads * d];
        for (o, p) in out.chunks_mut(d).zip(partials.chunks(n_parts * plen)) {
            combine(p, o);
        }
        out
    };
    let whole = run(Kernel::Portable, 0, ctx);
    // How far the rows are from the f32 reference at most: bf16 rows must show their rounding.
    let mut farthest = 0f32;
    for pos in [0, 15, 16, 17, 33, 63, 99, 255, 256, 300, 599]
        .into_iter()
        .filter(|&p| p < ctx)
    {
        for head in 0..heads {
            let kv = head / g;
            let lo = window.map_or(0, |w| (pos + 1).saturating_sub(w));
            // f32 rows score q8_0 keys with the query rounded to q8_0 as well.
            let query = &queries[(pos * heads + head) * d..][..d];
            let query = if dtype == KvDtype::Q8_0 && !bf16 {
                let mut rounded = QuantizedQueries::default();
                // SAFETY: the portable set runs on every CPU.
                unsafe { rounded.fill::<crate::PortableLanes>(1, d, |_| query) };
                rounded.dequantized(0)
            } else {
                query.to_vec()
            };
            let reference =
                |rounded| naive(&keys[kv][lo..=pos], &values[kv][lo..=pos], &query, rounded);
            let got = &whole[(pos * heads + head) * d..][..d];
            let (want, exact) = (reference(bf16), reference(false));
            let tolerance = if bf16 { 3e-3 } else { 1e-5 };
            for ((a, b), e) in got.iter().zip(&want).zip(&exact) {
                assert!(
                    (a - b).abs() < tolerance,
                    "window {window:?} pos {pos} head {head}, bf16 {bf16}: {a} vs {b}"
                );
                assert!(
                    (a - e).abs() < 0.02,
                    "window {window:?} pos {pos} head {head}, bf16 {bf16}: {a} vs exact {e}"
                );
                farthest = farthest.max((a - e).abs());
            }
        }
    }
    assert_eq!(farthest > 1e-4, bf16, "{farthest} from the f32 reference");
    // The same rows computed in other tiles are bit-identical.
    let tiles = [
        (17, 1),
        (20, 13),
        (37, 1),
        (50, 13),
        (90, 10),
        (250, 12),
        (599, 1),
    ];
    for (start, rows) in tiles.into_iter().filter(|&(s, r)| s + r <= ctx) {
        assert_eq!(
            run(Kernel::Portable, start, rows),
            whole[start * heads * d..(start + rows) * heads * d],
            "rows {start}..{}",
            start + rows
        );
    }
    // Every instruction set's copy of the loops computes the same bits, whole or in tiles.
    for kernel in Kernel::supported() {
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(
            bits(run(kernel, 0, ctx)),
            bits(whole.clone()),
            "{kernel} differs from portable"
        );
        assert_eq!(
            bits(run(kernel, 20, 13)),
            bits(whole[20 * heads * d..33 * heads * d].to_vec()),
            "{kernel} differs from portable on rows 20..33"
        );
        // Keys split over tasks: the same bits, however many partitions a task takes.
        for (start, rows) in tiles.into_iter().filter(|&(s, r)| s + r <= ctx) {
            for per in [1, 2] {
                assert_eq!(
                    bits(run_split(kernel, start, rows, per)),
                    bits(whole[start * heads * d..(start + rows) * heads * d].to_vec()),
                    "{kernel}, rows {start}..{}, {per} partitions per task",
                    start + rows
                );
            }
        }
    }
}
