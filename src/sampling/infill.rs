//! The fill-in-the-middle sampler: prefers end-of-generation when text tokens are unlikely,
//! merges tokens whose pieces are prefixes of one another, then thresholds.

use std::sync::Arc;

use super::array;
use super::{Candidates, Sampler, VocabAccess};

#[derive(Clone)]
pub struct Infill {
    vocab: Arc<dyn VocabAccess>,
}

impl Infill {
    pub fn new(vocab: Arc<dyn VocabAccess>) -> Self {
        Infill { vocab }
    }
}

impl Sampler for Infill {
    fn name(&self) -> &str {
        "infill"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        if cur.is_empty() {
            crate::log_error!("llama_sampler_apply: infill: no candidates; nothing to do");
            return;
        }
        let vocab = &*self.vocab;
        array::softmax(cur, true);

        let mut p_txt_sum = 0.0f32;
        let mut p_eog_sum = 0.0f32;
        for t in cur.data() {
            if vocab.is_eog(t.id) {
                p_eog_sum += t.p;
            } else {
                p_txt_sum += t.p;
            }
        }
        if 3.0 * p_eog_sum * cur.len() as f32 > p_txt_sum {
            // keep just the EOG tokens
            let size_org = cur.len();
            let data = cur.data_mut();
            let mut n = 0usize;
            let mut p_sum = 0.0f32;
            for i in 0..size_org {
                if vocab.is_eog(data[i].id) {
                    p_sum += data[i].p;
                    data[n] = data[i];
                    n += 1;
                }
            }
            for t in &mut data[..n] {
                t.p /= p_sum;
            }
            cur.truncate(n);
            return;
        }

        // combine tokens with a common prefix
        let size = cur.len();
        let pieces: Vec<Vec<u8>> = cur.data().iter().map(|t| vocab.piece(t.id)).collect();
        let data = cur.data_mut();
        for i0 in 0..size {
            for i1 in 0..size {
                if data[i0].logit == f32::NEG_INFINITY {
                    break;
                }
                if i0 == i1 || data[i1].logit == f32::NEG_INFINITY {
                    continue;
                }
                let (a, b) = (&pieces[i0], &pieces[i1]);
                if !a.is_empty() && a.len() <= b.len() && b[..a.len()] == a[..] {
                    let (mut dst, mut src) = (i0, i1);
                    if data[i1].p > data[i0].p {
                        std::mem::swap(&mut dst, &mut src);
                    }
                    data[dst].p += data[src].p;
                    data[src].logit = f32::NEG_INFINITY;
                    data[src].p = 0.0;
                }
            }
        }

        let mut n_non_eog = 0usize;
        let mut p_sum = 0.0f32;
        let thold = 0.2f32;
        let mut n = 0usize;
        for i in 0..size {
            let is_eog = vocab.is_eog(data[i].id);
            if data[i].p < thold && !is_eog {
                continue;
            }
            if !is_eog {
                n_non_eog += 1;
            }
            p_sum += data[i].p;
            data[n] = data[i];
            n += 1;
        }
        if n_non_eog == 0 {
            // reduce to a single end-of-turn (or end-of-sequence) token
            let mut id = vocab.eot();
            if id == array::TOKEN_NULL {
                id = vocab.eos();
            }
            data[0].id = id;
            data[0].logit = 1.0;
            cur.truncate(1);
            if id == array::TOKEN_NULL {
                crate::log_error!(
                    "llama_sampler_apply: infill: the vocabulary has neither EOT nor EOS"
                );
            }
            return;
        }
        for t in &mut data[..n] {
            t.p /= p_sum;
        }

        let size_org = n;
        let mut p_sum = 0.0f32;
        let thold = (1.0f64 / (n_non_eog + 1) as f64) as f32;
        let mut n = 0usize;
        for i in 0..size_org {
            let is_eog = vocab.is_eog(data[i].id);
            if data[i].p < thold && !is_eog {
                continue;
            }
            p_sum += data[i].p;
            data[n] = data[i];
            n += 1;
        }
        for t in &mut data[..n] {
            t.p /= p_sum;
        }
        cur.truncate(n);
    }
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(self.clone()))
    }
}
