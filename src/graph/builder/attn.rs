//! Attention: projections, rotary embedding, the attention products, MLA and the
//! indexer (upstream's `build_attn` family).

use super::*;

impl<'m> Builder<'m> {
    /// Q, K and V: separate projections (with optional biases) or a fused `attn_qkv`.
    pub fn qkv(&mut self, il: usize, x: NodeId) -> Result<(NodeId, NodeId, NodeId), BuildError> {
        self.cb_norm_default(x, "attn_norm", il);
        let hp = self.hp;
        let n_embd = hp.n_embd as i64;
        let nq = (hp.head_k * hp.n_head[il]) as i64;
        let nk = hp.n_embd_k_gqa(il) as i64;
        let nv = hp.n_embd_v_gqa(il) as i64;
        if let Some(w) = self.lw_opt(il, "attn_qkv.weight", &[n_embd, nq + nk + nv])? {
            let bias = self.lw_opt(il, "attn_qkv.bias", &[nq + nk + nv])?;
            let mut qkv = self.linear(w, bias, x);
            if hp.ext.clamp_kqv > 0.0 {
                qkv = self.clamp(qkv, -hp.ext.clamp_kqv, hp.ext.clamp_kqv);
            }
            let q = self.view(qkv, 0, nq as usize);
            let k = self.view(qkv, nq as usize, nk as usize);
            let v = self.view(qkv, (nq + nk) as usize, nv as usize);
            return Ok((q, k, v));
        }
        let wq = self.lw(il, "attn_q.weight", &[n_embd, nq])?;
        let wk = self.lw(il, "attn_k.weight", &[n_embd, nk])?;
        let wv = self.lw(il, "attn_v.weight", &[n_embd, nv])?;
        let bq = self.lw_opt(il, "attn_q.bias", &[nq])?;
        let bk = self.lw_opt(il, "attn_k.bias", &[nk])?;
        let bv = self.lw_opt(il, "attn_v.bias", &[nv])?;
        let c = hp.ext.clamp_kqv;
        let heads = [
            (hp.head_k, hp.n_head[il]),
            (hp.head_k, hp.n_head_kv[il]),
            (hp.head_v, hp.n_head_kv[il]),
        ];
        let mut out = [0; 3];
        for (i, (w, b, name, clamped)) in [
            (wq, bq, "Qcur", "Qcur_clamped"),
            (wk, bk, "Kcur", "Kcur_clamped"),
            (wv, bv, "Vcur", "Vcur_clamped"),
        ]
        .into_iter()
        .enumerate()
        {
            let mut y = self.linear(w, b, x);
            self.cb_linear(y, name, Some(il));
            if c > 0.0 {
                y = self.clamp(y, -c, c);
                self.cb(y, clamped, Some(il));
            }
            // build_qkv's RESHAPE to [head, n_head, T], named as the projection
            let (head, n) = heads[i];
            self.shown_reshape(y, name, Some(il), [head, n, self.ne1(y)]);
            out[i] = y;
        }
        Ok((out[0], out[1], out[2]))
    }

    pub fn rope(
        &mut self,
        x: NodeId,
        head_dim: usize,
        mode: RopeMode,
        freq_factors: Option<WeightId>,
        swa: bool,
    ) -> NodeId {
        let mut params = self.rope_params(swa);
        params.mode = mode;
        self.rope_with(x, head_dim, params, freq_factors)
    }

    /// The rotation a layer gets by default: the context's rope values, with the
    /// sliding-window base and scale on `swa` layers, the architecture's mode.
    pub fn rope_params(&self, swa: bool) -> RopeParams {
        let r = self.rope;
        RopeParams {
            n_rot: self.hp.n_rot,
            mode: self.rope_mode,
            n_ctx_orig: r.n_ctx_orig,
            freq_base: if swa {
                self.hp.rope_freq_base_swa
            } else {
                r.freq_base
            },
            freq_scale: if swa {
                self.hp.rope_freq_scale_swa
            } else {
                r.freq_scale
            },
            ext_factor: r.ext_factor,
            attn_factor: r.attn_factor,
            beta_fast: r.beta_fast,
            beta_slow: r.beta_slow,
        }
    }

    /// ROPE with the caller's values (architectures that rotate some layers otherwise:
    /// their own rotary width, no YaRN).
    pub fn rope_with(
        &mut self,
        x: NodeId,
        head_dim: usize,
        params: RopeParams,
        freq_factors: Option<WeightId>,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let y = self.push(
            "rope",
            Op::Rope {
                src: x,
                head_dim,
                params,
                freq_factors,
            },
            n0,
            n1,
        );
        // upstream rotates [head, n_head, T] and names the result as its input
        self.nodes[y].shown.name = self.nodes[x].shown.name;
        self.shown_heads(y, head_dim);
        y
    }

    /// `build_attn` with a KV cache: store K and V, FLASH_ATTN_EXT, output projection.
    #[allow(clippy::too_many_arguments)]
    pub fn attn(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        wo: WeightId,
        wo_b: Option<WeightId>,
        scale: f32,
    ) -> NodeId {
        self.attn_sinks(il, q, k, v, wo, wo_b, scale, None)
    }

    /// [`Builder::attn`] with attention sinks (`[n_head]` logits joined to each softmax).
    #[allow(clippy::too_many_arguments)]
    pub fn attn_sinks(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        wo: WeightId,
        wo_b: Option<WeightId>,
        scale: f32,
        sinks: Option<WeightId>,
    ) -> NodeId {
        let kqv = self.attn_kqv(il, q, k, v, scale, sinks);
        let out = self.linear(wo, wo_b, kqv);
        // unnamed in upstream's build_attn (some architectures name it attn_out)
        self.cb_output(out, "", Some(il));
        out
    }

    /// `build_attn` without the output projection (upstream's `wo` = nullptr): the heads'
    /// attention results `[n_head * head_v, T]`.
    pub fn attn_kqv(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        scale: f32,
        sinks: Option<WeightId>,
    ) -> NodeId {
        self.attn_kqv_sel(il, q, k, v, scale, sinks, None)
    }

    /// MiniMax-M3's block-sparse attention of layer `il`: the indexer keys `ik` (`[head, T]`)
    /// stored in the indexer's cache (layer `n_layer + il` of the memory), the blocks each
    /// token's queries `iq` (`[head*n_head, T]`, one indexer head per KV head) select
    /// ([`Op::MsaSelect`]), then K and V stored and FLASH_ATTN_EXT over the selected cells,
    /// the output projection `wo`.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_msa(
        &mut self,
        il: usize,
        (q, k, v): (NodeId, NodeId, NodeId),
        (iq, ik): (NodeId, NodeId),
        wo: WeightId,
        scale: f32,
    ) -> NodeId {
        let hp = self.hp;
        let ix = &hp.ext.indexer;
        let layer = hp.n_layer + il;
        let dep = self.push(
            "indexer_k_set",
            Op::SetRows {
                src: ik,
                layer,
                v: false,
            },
            0,
            0,
        );
        let op = Op::MsaSelect {
            q: iq,
            dep,
            layer,
            head: ix.head,
            block: ix.block,
            top_k: ix.top_k,
            local: ix.local,
        };
        let sel = self.push("msa_select", op, 0, 0);
        let kqv = self.attn_kqv_sel(il, q, k, v, scale, None, Some(sel));
        let out = self.linear(wo, None, kqv);
        self.cb_output(out, "", Some(il));
        out
    }

    /// [`Builder::attn_kqv`] over a sparse selection (`sel`: an [`Op::MsaSelect`]).
    #[allow(clippy::too_many_arguments)]
    fn attn_kqv_sel(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        scale: f32,
        sinks: Option<WeightId>,
        sel: Option<NodeId>,
    ) -> NodeId {
        let hp = self.hp;
        let n_head = hp.n_head[il];
        let n_head_kv = hp.n_head_kv[il];
        let (rot_k, rot_v) = self.kv_rot;
        let (q, k) = if rot_k > 0 {
            (self.hadamard(q, rot_k), self.hadamard(k, rot_k))
        } else {
            (q, k)
        };
        let v = if rot_v > 0 {
            self.hadamard(v, rot_v)
        } else {
            v
        };
        let ks = self.push(
            "k_set",
            Op::SetRows {
                src: k,
                layer: il,
                v: false,
            },
            0,
            0,
        );
        let vs = self.push(
            "v_set",
            Op::SetRows {
                src: v,
                layer: il,
                v: true,
            },
            0,
            0,
        );
        let n_swa = if hp.swa_layers[il] { hp.n_swa } else { 0 };
        let t = self.ne1(q);
        let kqv = self.push(
            "fattn",
            Op::FlashAttnExt {
                q,
                deps: [ks, vs],
                layer: il,
                n_head,
                n_head_kv,
                dk: hp.head_k,
                dv: hp.head_v,
                scale,
                softcap: hp.attn_logit_softcap,
                n_swa,
                v_in_k: false,
                sinks,
                max_bias: hp.ext.max_alibi_bias,
                sel,
            },
            n_head * hp.head_v,
            t,
        );
        self.cb(ks, "cache_k_l# (view)", Some(il));
        self.cb(vs, "cache_v_l# (view)", Some(il));
        // FLASH_ATTN_EXT's result is [head_v, n_head, T], unnamed; build_attn_mha
        // RESHAPEs it to [n_head * head_v, T] and build_attn names that kqv_out
        self.cb(kqv, "", None);
        self.shown_heads(kqv, hp.head_v);
        let kqv = if rot_v > 0 {
            self.hadamard(kqv, rot_v)
        } else {
            kqv
        };
        self.shown_reshape(kqv, "kqv_out", Some(il), [n_head * hp.head_v, t, 1]);
        kqv
    }

    /// `build_attn` over a compressed (latent) cache, as upstream's MLA: K (one head of the
    /// latent and the rotary part) stored, V read as the latent part of the cached K rows,
    /// FLASH_ATTN_EXT, each head's result decompressed by `wv_b` (`[latent, head_v,
    /// n_head]`), the output projection.
    #[allow(clippy::too_many_arguments)]
    pub fn attn_latent(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        wv_b: WeightId,
        wo: WeightId,
        scale: f32,
        sel: Option<NodeId>,
    ) -> NodeId {
        let kqv = self.attn_latent_heads(il, q, k, wv_b, scale, sel);
        self.linear(wo, None, kqv)
    }

    /// [`Builder::attn_latent`] without the output projection (`build_attn` with `wo`
    /// NULL: the graphs that gate the heads first).
    pub fn attn_latent_heads(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        wv_b: WeightId,
        scale: f32,
        sel: Option<NodeId>,
    ) -> NodeId {
        self.attn_latent_heads_sinks(il, q, k, wv_b, scale, sel, None)
    }

    /// [`Builder::attn_latent_heads`] with attention sinks (`[n_head]` logits joined to each
    /// softmax: HY-V4).
    #[allow(clippy::too_many_arguments)]
    pub fn attn_latent_heads_sinks(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
        wv_b: WeightId,
        scale: f32,
        sel: Option<NodeId>,
        sinks: Option<WeightId>,
    ) -> NodeId {
        let hp = self.hp;
        let n_head = hp.n_head[il];
        let ks = self.push(
            "k_set",
            Op::SetRows {
                src: k,
                layer: il,
                v: false,
            },
            0,
            0,
        );
        // (the sliding-window layers of dots3note; none elsewhere)
        let n_swa = if hp.swa_layers.get(il).copied().unwrap_or(false) {
            hp.n_swa
        } else {
            0
        };
        let t = self.ne1(q);
        let kqv = self.push(
            "fattn",
            Op::FlashAttnExt {
                q,
                deps: [ks, ks],
                layer: il,
                n_head,
                n_head_kv: 1,
                dk: hp.head_k,
                dv: hp.head_v,
                scale,
                softcap: hp.attn_logit_softcap,
                n_swa,
                v_in_k: true,
                sinks,
                max_bias: 0.0,
                sel,
            },
            n_head * hp.head_v,
            t,
        );
        self.mul_mat_heads(wv_b, kqv, n_head)
    }

    /// DeepSeek's lightning indexer of layer `il`: stores the micro-batch's indexer keys `k`
    /// (`[head, T]`) in the indexer's cache (layer `n_layer + il` of the memory), then selects
    /// for each token the `top_k` cells whose keys score best against its queries `q`
    /// (`[head*n_head, T]`) weighted by `w` (`[n_head, T]`, pre-scaled): see
    /// [`Op::LightningIndexer`]. At most the context's cells are selected.
    pub fn lightning_indexer(&mut self, il: usize, q: NodeId, k: NodeId, w: NodeId) -> NodeId {
        let hp = self.hp;
        let ix = &hp.ext.indexer;
        let layer = hp.n_layer + il;
        let dep = self.push(
            "indexer_k_set",
            Op::SetRows {
                src: k,
                layer,
                v: false,
            },
            0,
            0,
        );
        // the node holds one row index per selected cell: never more than the cells
        let cells = if self.n_ctx_seq > 0 {
            self.n_ctx_seq as usize
        } else {
            ix.top_k
        };
        let k_sel = ix.top_k.min(cells).max(1);
        let t = self.ne1(q);
        let op = Op::LightningIndexer {
            q,
            w,
            dep,
            layer,
            head: ix.head,
            k: k_sel,
        };
        self.push("top_k", op, k_sel, t)
    }

    /// Of every head (`stride` values), the values `offset .. offset + len`.
    pub fn view_heads(&mut self, src: NodeId, stride: usize, offset: usize, len: usize) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        let op = Op::ViewHeads {
            src,
            stride,
            offset,
            len,
        };
        self.push("view_heads", op, n0 / stride * len, n1)
    }

    /// Per head, `a`'s values then `b`'s.
    pub fn concat_heads(&mut self, a: NodeId, b: NodeId, n_head: usize) -> NodeId {
        let (n0, n1) = (self.ne0(a) + self.ne0(b), self.ne1(a));
        self.push("concat", Op::ConcatHeads { a, b, n_head }, n0, n1)
    }

    /// Head h of `x` times matrix h of `w` (`[k, n, n_head]`).
    pub fn mul_mat_heads(&mut self, w: WeightId, x: NodeId, n_head: usize) -> NodeId {
        let (n, t) = (self.wrows(w), self.ne1(x));
        self.push(
            "mul_mat_heads",
            Op::MulMatHeads { w, x, n_head },
            n * n_head,
            t,
        )
    }

    /// The Walsh-Hadamard rotation of every `n` values (see [`Op::Hadamard`]).
    pub fn hadamard(&mut self, src: NodeId, n: usize) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push(
            "hadamard",
            Op::Hadamard {
                src,
                n,
                dense: false,
                one_row: false,
            },
            n0,
            n1,
        )
    }

    /// MUL_MAT of every `n` values by the Walsh-Hadamard matrix as a plain product
    /// ([`Op::Hadamard`] with `dense`; `one_row`: upstream's activations are one row per
    /// batch, `[n, 1, T]`).
    pub fn hadamard_dense(&mut self, src: NodeId, n: usize, one_row: bool) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push(
            "mul_mat",
            Op::Hadamard {
                src,
                n,
                dense: true,
                one_row,
            },
            n0,
            n1,
        )
    }

    /// The attention scale: `attention.scale` when the file gives one, else
    /// 1/sqrt(head size).
    pub fn kq_scale(&self) -> f32 {
        if self.hp.attention_scale == 0.0 {
            1.0 / (self.hp.head_k as f32).sqrt()
        } else {
            self.hp.attention_scale
        }
    }

    /// Per-head RMS norms of Q and K (`attn_q_norm`, `attn_k_norm`: qwen3, gemma3, ...).
    pub fn qk_norm(
        &mut self,
        il: usize,
        q: NodeId,
        k: NodeId,
    ) -> Result<(NodeId, NodeId), BuildError> {
        let head = self.hp.head_k;
        let qn = self.lw(il, "attn_q_norm.weight", &[head as i64])?;
        let kn = self.lw(il, "attn_k_norm.weight", &[head as i64])?;
        let eps = self.hp.eps_rms;
        let (q, k) = (
            self.head_rms_norm(q, head, qn, eps),
            self.head_rms_norm(k, head, kn, eps),
        );
        // build_norm's "norm", then the architectures' Qcur_normed / Kcur_normed, per head
        for (n, name) in [(q, "Qcur_normed"), (k, "Kcur_normed")] {
            self.cb_norm(n, name, Some(il));
            self.shown_heads(n, head);
            if let Op::Mul { a, .. } = self.nodes[n].op {
                let (h0, h1) = (self.ne0(a), self.ne1(a));
                let heads = self.ne0(n) / head.max(1);
                if h0 == head && h1 == heads * self.ne1(n) {
                    self.nodes[a].shown.ne = Some([head, heads, self.ne1(n)]);
                }
            }
        }
        Ok((q, k))
    }

    /// ROPE of Q and K with the architecture's mode.
    pub fn rope_qk(
        &mut self,
        q: NodeId,
        k: NodeId,
        freq_factors: Option<WeightId>,
        swa: bool,
    ) -> (NodeId, NodeId) {
        let (head, mode) = (self.hp.head_k, self.rope_mode);
        let (qr, kr) = (
            self.rope(q, head, mode, freq_factors, swa),
            self.rope(k, head, mode, freq_factors, swa),
        );
        // the architectures name the rotated Q and K Qcur / Kcur (after any Q/K norm)
        for (n, name) in [(qr, "Qcur"), (kr, "Kcur")] {
            if let Some(layer) = self.nodes[n].shown.name.and_then(|c| c.layer) {
                self.cb(n, name, Some(layer as usize));
            }
        }
        (qr, kr)
    }
}
