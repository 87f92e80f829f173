#!/usr/bin/env python3
"""Write a random LoRA adapter (upstream's adapter GGUF layout) for a model, or a broken one.

usage: make_lora.py MODEL OUT [MODE]
MODE (default good):
  good            rank-8 pairs (alpha 16) for every layer's attn_q/k/v/output (F16) and
                  ffn_gate/up/down (F32); for an untied model also token_embd and output;
                  an aLoRA invocation sequence and a task name in the metadata
  bad-shape       one lora_a one column short
  bad-arch        general.architecture of another family
  not-adapter     general.type = model
  not-lora        adapter.type = ia3
  unpaired        one lora_b left out
  not-transposed  one lora_b one rank too wide (the pair does not chain)
  not-in-model    a pair for a tensor the model lacks
  bad-suffix      a tensor named neither .lora_a nor .lora_b
  alpha-type      adapter.lora.alpha written as a string
  experts         good, plus rank-8 pairs (F32, one matrix per expert) for every layer's
                  ffn_gate_exps / ffn_up_exps / ffn_down_exps (upstream's build_lora_mm_id)
The factors are pseudo-random (fixed seed), scaled so the adapter moves the logits clearly.
"""
import sys

import numpy as np

import gguf

RANK = 8
ALPHA = 16.0


def main() -> None:
    src, dst = sys.argv[1:3]
    mode = sys.argv[3] if len(sys.argv) > 3 else "good"
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}  # ggml order: ne0 first
    rng = np.random.default_rng(1234)

    writer = gguf.GGUFWriter(dst, "qwen2" if mode == "bad-arch" and arch != "qwen2" else
                             "llama" if mode == "bad-arch" else arch)
    writer.add_string(gguf.Keys.General.TYPE, "model" if mode == "not-adapter" else "adapter")
    writer.add_string(gguf.Keys.Adapter.TYPE, "ia3" if mode == "not-lora" else "lora")
    if mode == "alpha-type":
        writer.add_string(gguf.Keys.Adapter.LORA_ALPHA, "sixteen")
    else:
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, ALPHA)
    writer.add_string(gguf.Keys.Adapter.LORA_TASK_NAME, "llama-hotswap test")
    writer.add_key_value(gguf.Keys.Adapter.ALORA_INVOCATION_TOKENS, [7, 11, 13],
                         gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)

    names = []
    for name, ne in shapes.items():
        parts = name.split(".")
        if len(ne) != 2:
            continue
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in (
                "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            names.append(name)
    if "output.weight" in shapes:
        names += ["token_embd.weight", "output.weight"]

    if mode == "experts":
        for name, ne in shapes.items():
            parts = name.split(".")
            if len(ne) == 3 and len(parts) == 4 and parts[0] == "blk" and parts[2] in (
                    "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                k, n, n_exp = ne
                # A [k, r, n_expert], B [r, n, n_expert] (numpy shapes reversed)
                a = rng.standard_normal((n_exp, RANK, k)) / np.sqrt(k)
                b = rng.standard_normal((n_exp, n, RANK)) * 0.05
                writer.add_tensor(name + ".lora_a", a.astype(np.float32))
                writer.add_tensor(name + ".lora_b", b.astype(np.float32))

    first = True
    for name in names:
        k, n = shapes[name]
        f16 = ".attn_" in name
        dtype = np.float16 if f16 else np.float32
        if name == "token_embd.weight":
            # A [r, n_vocab], B [r, n_embd] (numpy shapes reversed)
            a = rng.standard_normal((n, RANK)) * 0.5
            b = rng.standard_normal((k, RANK)) * 0.05
        else:
            # A [k, r], B [r, n]
            a = rng.standard_normal((RANK, k)) / np.sqrt(k)
            b = rng.standard_normal((n, RANK)) * 0.05
        if first and mode == "bad-shape":
            a = a[:, :-1] if name != "token_embd.weight" else a[:-1, :]
        if first and mode == "not-transposed":
            b = np.concatenate([b, b[:, :1]], axis=1)
        writer.add_tensor(name + ".lora_a", a.astype(dtype))
        if not (first and mode == "unpaired"):
            writer.add_tensor(name + ".lora_b", b.astype(dtype))
        first = False
    if mode == "not-in-model":
        writer.add_tensor("blk.999.attn_q.weight.lora_a", np.zeros((RANK, 4), np.float32))
        writer.add_tensor("blk.999.attn_q.weight.lora_b", np.zeros((4, RANK), np.float32))
    if mode == "bad-suffix":
        writer.add_tensor("blk.0.attn_q.weight.lora_c", np.zeros((RANK, 4), np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
