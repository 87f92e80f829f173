//! MiniMax-M3's block selection on the CPU (MSA: upstream composes it from GET_ROWS, MUL_MAT,
//! POOL_2D(MAX), ADD and TOP_K over the position axis): which position blocks a token's
//! attention reads, per KV head.

use super::indexer::{top_k_ordered, vec_dot_f32};
use super::nofa::reduce;
use crate::kernels::cpu::vec::fmadd;

/// The bias that puts a token's local blocks first (upstream's `1e30f`).
const LOCAL_BIAS: f32 = 1e30;

/// Upstream's position axis (`llama_kv_cache_msa_context::get_n_pos`): every position the
/// cache holds (`pos_max + 1` over all sequences), padded to a multiple of 256, at least 256.
pub fn msa_n_pos(pos_max: i32) -> usize {
    let used = (pos_max.max(-1) + 1) as usize;
    used.next_multiple_of(256).max(256)
}

/// One product of the score MUL_MAT (F32 by F32): llamafile's tinyBLAS order (one 8-lane FMA
/// accumulator, ggml's horizontal sum) where the length is a multiple of 8, else ggml's
/// `vec_dot_f32`.
pub fn msa_score_dot(k: &[f32], q: &[f32]) -> f32 {
    let n = k.len().min(q.len());
    if n % 8 != 0 {
        return vec_dot_f32(k, q);
    }
    let mut acc = [0f32; 8];
    for (e, (&a, &b)) in k[..n].iter().zip(&q[..n]).enumerate() {
        acc[e % 8] = fmadd(a, b, acc[e % 8]);
    }
    reduce(&acc, true)
}

/// The blocks one indexer head of a token at position `pos` selects, in TOP_K's order, into
/// `idx`: `scores` holds its score of each position of the axis (`-inf` where it does not
/// see the position); each block of `block` positions scores its maximum (POOL_2D MAX, from
/// `-FLT_MAX`: a block it sees nothing of scores `-FLT_MAX`), the token's `local` latest
/// blocks get `+1e30`, and the `min(top_k, blocks)` best are kept. `bs` is scratch.
pub fn msa_blocks(
    scores: &[f32],
    block: usize,
    top_k: usize,
    local: usize,
    pos: i32,
    bs: &mut Vec<f32>,
    idx: &mut Vec<i32>,
) {
    let n_blk = scores.len() / block;
    bs.clear();
    bs.extend(scores.chunks_exact(block).map(|c| {
        // std::max(x, res): `x < res ? res : x`
        c.iter()
            .fold(f32::MIN, |res, &x| if x < res { res } else { x })
    }));
    // the local-force bias (0 elsewhere: ADD of 0.0 changes no score)
    let latest = (pos.max(0) as usize) / block;
    for l in 0..local {
        let Some(b) = latest.checked_sub(l) else {
            break;
        };
        if b < n_blk {
            bs[b] += LOCAL_BIAS;
        }
    }
    top_k_ordered(bs, top_k.min(n_blk), idx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_pos_pads_to_256() {
        assert_eq!(msa_n_pos(-1), 256);
        assert_eq!(msa_n_pos(0), 256);
        assert_eq!(msa_n_pos(255), 256);
        assert_eq!(msa_n_pos(256), 512);
    }

    /// Block maxima, the local block first (then TOP_K's swap of the first two), unseen
    /// blocks last.
    #[test]
    fn blocks_rank_local_then_scores() {
        let ninf = f32::NEG_INFINITY;
        // 4 blocks of 2: maxima 1, 5, 3, (unseen)
        let scores = [1.0, 0.5, 5.0, -2.0, 3.0, ninf, ninf, ninf];
        let (mut bs, mut idx) = (Vec::new(), Vec::new());
        // token at position 4 (block 2): local block 2 ranks first, then 1, 0, 3
        msa_blocks(&scores, 2, 4, 1, 4, &mut bs, &mut idx);
        assert_eq!(bs[3], f32::MIN);
        // sorted [2, 1, 0, 3], first two swapped
        assert_eq!(idx, vec![1, 2, 0, 3]);
        // top 2 of them
        msa_blocks(&scores, 2, 2, 1, 4, &mut bs, &mut idx);
        assert_eq!(idx, vec![1, 2]);
        // two local blocks: 2 and 1 tie at 1e30 (both kept), then 0
        msa_blocks(&scores, 2, 3, 2, 4, &mut bs, &mut idx);
        let mut first: Vec<i32> = idx[..2].to_vec();
        first.sort();
        assert_eq!(first, vec![1, 2]);
        assert_eq!(idx[2], 0);
    }

    #[test]
    fn score_dot_is_the_plain_dot_on_exact_values() {
        let k: Vec<f32> = (0..128).map(|i| (i % 7) as f32 - 3.0).collect();
        let q: Vec<f32> = (0..128).map(|i| (i % 5) as f32 * 0.5).collect();
        let want: f32 = k.iter().zip(&q).map(|(a, b)| a * b).sum();
        assert_eq!(msa_score_dot(&k, &q), want);
        assert_eq!(msa_score_dot(&k[..100], &q[..100]), {
            k[..100]
                .iter()
                .zip(&q[..100])
                .map(|(a, b)| a * b)
                .sum::<f32>()
        });
    }
}
