"""Writes the ~1 B-parameter llama-shaped benchmark model (random F16 weights) for
`make bench-decode`, if absent: n_embd 2048, n_ff 5632, 22 layers, 32 heads / 4 KV heads
(every row a multiple of 256, so K-quants are real), tied output embedding, and the real
SmolLM2 vocabulary (its tokenizer.* metadata copied), so both libraries load it as they load a
trained model. Written next to DST and renamed into place, so an interrupted run leaves nothing.

With a third argument `small`: the same shape rules at n_embd 256, n_ff 768, 2 layers, 4 heads
/ 2 KV heads (~30 MB, the vocabulary's embedding most of it), for test-engine's bit-exact
checks of each weight type requantized --pure (every row a multiple of 256).

With `moe` (or `moe-small`): a qwen3moe-shaped model instead, the shape of the users' MoE
models at a size this machine can sweep: n_embd 1024, 16 heads / 4 KV heads, 4 layers, 64
experts of n_ff 256 with 8 used per token (~240 M parameters, ~0.5 GB F16, larger than the
caches), untied output; `moe-small`: n_embd 256, 4 / 2 heads, 2 layers, 16 experts of 128, 4
used (test-engine's fast-mode MoE row). Routers are random, so tokens spread over the experts.

usage: python gen_bench_model.py SMOLLM2_GGUF DST [small|moe|moe-small]
"""
import os
import sys

import numpy as np
import gguf

VARIANT = sys.argv[3] if len(sys.argv) > 3 else ""
N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 2048, 5632, 22, 32, 4
N_EXPERT, N_EXPERT_USED = 0, 0
if VARIANT == "small":
    N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 256, 768, 2, 4, 2
elif VARIANT == "moe":
    N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 1024, 256, 4, 16, 4
    N_EXPERT, N_EXPERT_USED = 64, 8
elif VARIANT == "moe-small":
    N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 256, 128, 2, 4, 2
    N_EXPERT, N_EXPERT_USED = 16, 4
elif VARIANT:
    sys.exit(f"unknown variant {VARIANT}")
HEAD_DIM = N_EMBD // N_HEAD


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    if os.path.exists(dst):
        return
    reader = gguf.GGUFReader(src)
    tmp = dst + ".tmp"
    moe = N_EXPERT > 0
    w = gguf.GGUFWriter(tmp, "qwen3moe" if moe else "llama")
    w.add_name(
        f"qwen3moe-{N_EMBD}-{N_EXPERT}x{N_EXPERT_USED} (random weights)" if moe
        else "bench-llama-1B (random weights)" if N_LAYER == 22 else "llama-256 (random weights)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    if moe:
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        w.add_expert_feed_forward_length(N_FF)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            value = field.contents()
            w.add_key_value(name, value, vtype, sub_type=field.types[-1])
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            w.add_key_value(name, field.contents(), vtype)
    w.add_vocab_size(n_vocab)

    rng = np.random.default_rng(42)

    def weight(rows: int, cols: int) -> np.ndarray:
        # numpy shape (rows, cols) is GGUF ne = [cols, rows]: rows outputs of cols inputs
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def experts(rows: int, cols: int) -> np.ndarray:
        # numpy (experts, rows, cols) is GGUF ne = [cols, rows, experts]
        return (rng.standard_normal((N_EXPERT, rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    ones = np.ones(N_EMBD, dtype=np.float32)
    w.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    w.add_tensor("output_norm.weight", ones)
    if moe:
        w.add_tensor("output.weight", weight(n_vocab, N_EMBD))
    kv = N_HEAD_KV * HEAD_DIM
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", weight(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", weight(kv, N_EMBD))
        w.add_tensor(p + "attn_v.weight", weight(kv, N_EMBD))
        w.add_tensor(p + "attn_output.weight", weight(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", ones)
        if moe:
            head_ones = np.ones(HEAD_DIM, dtype=np.float32)
            w.add_tensor(p + "attn_q_norm.weight", head_ones)
            w.add_tensor(p + "attn_k_norm.weight", head_ones)
            # a wider router, so the top-k choice is clear-cut rather than near ties
            w.add_tensor(p + "ffn_gate_inp.weight", (weight(N_EXPERT, N_EMBD).astype(np.float32) * 10))
            w.add_tensor(p + "ffn_gate_exps.weight", experts(N_FF, N_EMBD))
            w.add_tensor(p + "ffn_up_exps.weight", experts(N_FF, N_EMBD))
            w.add_tensor(p + "ffn_down_exps.weight", experts(N_EMBD, N_FF))
            continue
        w.add_tensor(p + "ffn_gate.weight", weight(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", weight(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", weight(N_EMBD, N_FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, dst)


if __name__ == "__main__":
    main()
