//! The weight-stationary loop every instruction set runs: rows in panels, each panel meeting
//! every weight tile of the task, and a packed format's blocks unpacked once per full panel.
//!
//! Panels are small enough for their activations to stay in L2 while the panel meets every
//! weight tile of the task. A panel of many rows (a prompt slice) unpacks a 4- or 5-bit tile
//! row once, into L1, to a byte per weight, and every row meets the unpacked blocks: the same
//! integers, so the same results. Steps with fewer rows read the packed bytes directly: for
//! them, unpacking costs more than it saves (`braid bench-engine` on Gemma 3 270M, whose
//! layers are 5-bit, shows both sides). How a block meets the rows is each instruction set's
//! own ([`PanelTile`]).

use crate::int4::Unpacked;
use crate::QuantizedRows;
use std::ops::Range;

/// Rows per panel (a multiple of every instruction set's rows per weight load).
pub(crate) const MB: usize = 64;

/// Rows in a panel from which a packed format's blocks are unpacked once for the whole panel:
/// a full panel, which prompt slices fill.
const UNPACK_ROWS: usize = MB;

/// How one instruction set multiplies rows of a panel by one tile row of a weight, whose
/// blocks are `T`s or the same blocks unpacked.
pub(crate) trait PanelTile<T> {
    /// The block with one byte per weight, for a format that packs them tighter.
    ///
    /// # Safety
    ///
    /// The CPU must have the instruction set's features.
    unsafe fn unpacked(block: &T) -> Option<Unpacked>;

    /// Rows `rows` times tile `t`, whose `k_blocks` blocks are `blocks`.
    ///
    /// # Safety
    ///
    /// The CPU must have the instruction set's features, `rows.end` is at most the rows of the
    /// activations, and the output is as [`crate::kernel_ops::TilesFn`] requires.
    unsafe fn tile(&self, blocks: &[T], rows: Range<usize>, t: usize);

    /// [`PanelTile::tile`] with the blocks unpacked.
    ///
    /// # Safety
    ///
    /// As for [`PanelTile::tile`].
    unsafe fn tile_unpacked(&self, blocks: &[Unpacked], rows: Range<usize>, t: usize);
}

/// Every panel of the rows of `x` times every tile of `tiles` of `weights`
/// (`[n_tiles][k_blocks]`), through `isa`.
///
/// # Safety
///
/// As for [`PanelTile::tile`]; called from an instruction set's `#[target_feature]` entry
/// point, into which everything here is inlined.
#[inline(always)]
pub(crate) unsafe fn for_each_panel<T, P: PanelTile<T>>(
    isa: &P,
    x: &QuantizedRows,
    weights: &[T],
    tiles: Range<usize>,
) {
    let (m, kbs) = (x.m, x.k_blocks);
    let mut unpacked = Vec::new();
    // The remainder rows take the same path, which computes each element in the same order
    // (results do not depend on `m`).
    for panel in (0..m).step_by(MB) {
        let end = (panel + MB).min(m);
        for t in tiles.clone() {
            let tile_row = &weights[t * kbs..(t + 1) * kbs];
            if end - panel >= UNPACK_ROWS {
                unpacked.clear();
                for block in tile_row {
                    // SAFETY: the caller vouches for the features.
                    match unsafe { P::unpacked(block) } {
                        Some(u) => unpacked.push(u),
                        None => break,
                    }
                }
                if unpacked.len() == kbs {
                    // SAFETY: as below, with the same blocks unpacked.
                    unsafe { isa.tile_unpacked(&unpacked, panel..end, t) };
                    continue;
                }
            }
            // SAFETY: `panel..end` are rows of `x`, `tile_row` is tile `t`'s `kbs` blocks, and
            // the features and the output are our caller's.
            unsafe { isa.tile(tile_row, panel..end, t) };
        }
    }
}
