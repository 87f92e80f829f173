//! The state-space layers the recurrent and hybrid architectures share, after upstream's
//! `llm_build_mamba_base` (`build_mamba_layer`, `build_mamba2_layer`): the input
//! projection, SSM_CONV over the sequence's conv state, SSM_SCAN over its SSM state, the
//! gate, the output projection. The states live in the recurrent memory (`kv_cache::recurrent`);
//! the two state ops read and update them in place.

use super::builder::{BuildError, Builder, Outputs};
use super::{GluKind, NodeId, Op, Operand, ScanShape};

impl Builder<'_> {
    /// SSM_CONV of `x` (`[channels, T]`) with the conv state of layer `il`.
    pub fn ssm_conv(&mut self, il: usize, x: NodeId, w: super::WeightId, d_conv: usize) -> NodeId {
        self.ssm_conv_at(il, x, w, d_conv, 0)
    }

    /// SSM_CONV of `x` with the part of layer `il`'s conv row from value `row0` on.
    pub fn ssm_conv_at(
        &mut self,
        il: usize,
        x: NodeId,
        w: super::WeightId,
        d_conv: usize,
        row0: usize,
    ) -> NodeId {
        self.ssm_conv_dilated(il, x, w, d_conv, row0, 1)
    }

    /// A depthwise causal conv whose taps are `dilation` tokens apart (see [`Op::SsmConv`]),
    /// its history kept in layer `il`'s conv row from value `row0` on.
    pub fn ssm_conv_dilated(
        &mut self,
        il: usize,
        x: NodeId,
        w: super::WeightId,
        d_conv: usize,
        row0: usize,
        dilation: usize,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let op = Op::SsmConv {
            x,
            w,
            layer: il,
            d_conv,
            row0,
            dilation,
        };
        self.push("ssm_conv", op, n0, n1)
    }

    /// SSM_SCAN with the SSM state of layer `il`.
    #[allow(clippy::too_many_arguments)]
    pub fn ssm_scan(
        &mut self,
        il: usize,
        x: NodeId,
        dt: NodeId,
        b: NodeId,
        c: NodeId,
        a: super::WeightId,
        shape: ScanShape,
    ) -> NodeId {
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let op = Op::SsmScan {
            x,
            dt,
            b,
            c,
            a,
            layer: il,
            shape,
        };
        self.push("ssm_scan", op, n0, n1)
    }

    /// `build_mamba_layer`: Mamba-1's mixer of layer `il` on the normed input `cur`.
    pub fn mamba_layer(&mut self, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
        let hp = self.hp;
        let s = hp.ext.ssm;
        let n_embd = hp.n_embd as i64;
        let (d_conv, d_inner, d_state, dt_rank) = (
            s.d_conv as i64,
            s.d_inner as i64,
            s.d_state as i64,
            s.dt_rank as i64,
        );
        let ssm_in = self.lw(il, "ssm_in.weight", &[n_embd, 2 * d_inner])?;
        let conv_w = self.lw(il, "ssm_conv1d.weight", &[d_conv, d_inner])?;
        let conv_b = self.lw(il, "ssm_conv1d.bias", &[d_inner])?;
        let ssm_x = self.lw(il, "ssm_x.weight", &[d_inner, dt_rank + 2 * d_state])?;
        let ssm_dt = self.lw(il, "ssm_dt.weight", &[dt_rank, d_inner])?;
        let ssm_dt_b = self.lw(il, "ssm_dt.bias", &[d_inner])?;
        let a = self.lw(il, "ssm_a", &[d_state, d_inner])?;
        let d = self.lw(il, "ssm_d", &[d_inner])?;
        let ssm_out = self.lw(il, "ssm_out.weight", &[d_inner, n_embd])?;
        let dt_norm = self.lw_opt(il, "ssm_dt_norm.weight", &[dt_rank])?;
        let b_norm = self.lw_opt(il, "ssm_b_norm.weight", &[d_state])?;
        let c_norm = self.lw_opt(il, "ssm_c_norm.weight", &[d_state])?;
        let (d_inner, d_state, dt_rank) = (s.d_inner, s.d_state, s.dt_rank);

        let xz = self.mul_mat(ssm_in, cur);
        let x = self.view(xz, 0, d_inner);
        let z = self.view(xz, d_inner, d_inner);
        let x = self.ssm_conv(il, x, conv_w, s.d_conv);
        let x = self.add(x, Operand::Weight(conv_b));
        let x = self.silu(x);

        let x_db = self.mul_mat(ssm_x, x);
        let mut dt = self.view(x_db, 0, dt_rank);
        let mut b = self.view(x_db, dt_rank, d_state);
        let mut c = self.view(x_db, dt_rank + d_state, d_state);
        let norms = (dt_norm, b_norm, c_norm);
        if s.dt_b_c_rms || matches!(norms, (Some(_), Some(_), Some(_))) {
            let eps = hp.eps_rms;
            dt = self.rms_norm(dt, dt_norm, eps);
            b = self.rms_norm(b, b_norm, eps);
            c = self.rms_norm(c, c_norm, eps);
        }
        let dt = self.mul_mat(ssm_dt, dt);
        let dt = self.add(dt, Operand::Weight(ssm_dt_b));
        let shape = ScanShape {
            d_state,
            head_dim: 1,
            n_head: d_inner,
            n_group: 1,
        };
        let y = self.ssm_scan(il, x, dt, b, c, a, shape);
        let xd = self.mul(x, Operand::Weight(d));
        let y = self.add(y, Operand::Node(xd));
        let y = self.glu(z, y, GluKind::Swiglu);
        Ok(self.mul_mat(ssm_out, y))
    }

    /// `build_mamba2_layer`: Mamba-2's mixer of layer `il` on the normed input `cur`
    /// (heads of `d_inner / dt_rank`, B and C in `n_group` groups, an optional grouped RMS
    /// norm before the output projection).
    pub fn mamba2_layer(&mut self, il: usize, cur: NodeId) -> Result<NodeId, BuildError> {
        let hp = self.hp;
        let s = hp.ext.ssm;
        let (d_inner, d_state, n_head, n_group) = (s.d_inner, s.d_state, s.dt_rank, s.n_group);
        if n_head == 0 || n_group == 0 || d_inner % n_head != 0 || d_inner % n_group != 0 {
            return Err(BuildError::Invalid(format!(
                "ssm.inner_size {d_inner} must divide into ssm.time_step_rank {n_head} heads and ssm.group_count {n_group} groups"
            )));
        }
        let head_dim = d_inner / n_head;
        let conv_dim = d_inner + 2 * n_group * d_state;
        let d_in_proj = d_inner + conv_dim + n_head;
        let n_embd = hp.n_embd as i64;
        let ssm_in = self.lw(il, "ssm_in.weight", &[n_embd, d_in_proj as i64])?;
        let conv_w = self.lw(il, "ssm_conv1d.weight", &[s.d_conv as i64, conv_dim as i64])?;
        let conv_b = self.lw(il, "ssm_conv1d.bias", &[conv_dim as i64])?;
        let dt_b = self.lw(il, "ssm_dt.bias", &[n_head as i64])?;
        let a = self.lw(il, "ssm_a", &[1, n_head as i64])?;
        let d = self.lw(il, "ssm_d", &[1, n_head as i64])?;
        let norm = self.lw_opt(
            il,
            "ssm_norm.weight",
            &[(d_inner / n_group) as i64, n_group as i64],
        )?;
        let ssm_out = self.lw(il, "ssm_out.weight", &[d_inner as i64, n_embd])?;

        let zxbcdt = self.mul_mat(ssm_in, cur);
        let z = self.view(zxbcdt, 0, d_inner);
        let xbc = self.view(zxbcdt, d_inner, conv_dim);
        let dt = self.view(zxbcdt, d_inner + conv_dim, n_head);
        let xbc = self.ssm_conv(il, xbc, conv_w, s.d_conv);
        let xbc = self.add(xbc, Operand::Weight(conv_b));
        let xbc = self.silu(xbc);
        let x = self.view(xbc, 0, d_inner);
        let b = self.view(xbc, d_inner, n_group * d_state);
        let c = self.view(xbc, d_inner + n_group * d_state, n_group * d_state);
        let dt = self.add(dt, Operand::Weight(dt_b));
        let shape = ScanShape {
            d_state,
            head_dim,
            n_head,
            n_group,
        };
        let y = self.ssm_scan(il, x, dt, b, c, a, shape);
        let (n0, n1) = (self.ne0(x), self.ne1(x));
        let xd = self.push(
            "mul",
            Op::MulRep {
                a: x,
                b: d,
                rep: head_dim,
            },
            n0,
            n1,
        );
        let y = self.add(y, Operand::Node(xd));
        let mut y = self.glu(z, y, GluKind::Swiglu);
        if let Some(w) = norm {
            y = self.head_rms_norm(y, d_inner / n_group, w, hp.eps_rms);
        }
        Ok(self.mul_mat(ssm_out, y))
    }

    /// The graph of upstream's `llama_model_mamba` (mamba and mamba2): per layer an RMS
    /// norm, the Mamba-1 (or Mamba-2) mixer and the residual; the final norm and output.
    pub fn mamba_graph(&mut self, mamba2: bool) -> Result<Outputs, BuildError> {
        let hp = self.hp;
        let n_embd = hp.n_embd as i64;
        let (tok_embd, mut inp) = self.inp_embd()?;
        for il in 0..hp.n_layer {
            let norm = self.lw(il, "attn_norm.weight", &[n_embd])?;
            let cur = self.rms_norm(inp, Some(norm), hp.eps_rms);
            let mut cur = if mamba2 {
                self.mamba2_layer(il, cur)?
            } else {
                self.mamba_layer(il, cur)?
            };
            if il == hp.n_layer - 1 {
                cur = self.get_rows_out(cur);
                inp = self.get_rows_out(inp);
            }
            inp = self.add(cur, Operand::Node(inp));
            inp = self.cvec(inp, il);
        }
        self.rms_output(inp, tok_embd, false)
    }

    /// UNARY(SILU).
    pub fn silu(&mut self, src: NodeId) -> NodeId {
        let (n0, n1) = (self.ne0(src), self.ne1(src));
        self.push("silu", Op::Silu { src }, n0, n1)
    }

    /// GLU with split inputs: `act(gate) * up`.
    pub fn glu(&mut self, gate: NodeId, up: NodeId, kind: GluKind) -> NodeId {
        let (n0, n1) = (self.ne0(gate), self.ne1(gate));
        self.push("glu", Op::Glu { gate, up, kind }, n0, n1)
    }
}
