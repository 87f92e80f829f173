#!/usr/bin/env python3
"""Copy a GGUF file with new values in its F32 norm weights: "new weights" of the same layout
for the automatic hot-swap checks (same tensors, types, shapes and offsets; other bytes equal).

usage: gguf_perturb.py IN OUT [SEED]
Every F32 tensor whose name ends in "_norm.weight" except output_norm (which only scales the
logits) is multiplied element-wise by pseudo-random factors in [0.5, 1.5) (fixed seed), so the
model's greedy text changes.
"""
import shutil
import sys

import numpy as np

import gguf


def main() -> None:
    src, dst = sys.argv[1:3]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rng = np.random.default_rng(seed)
    reader = gguf.GGUFReader(src)
    patches = []
    for t in reader.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            continue
        if not t.name.endswith("_norm.weight") or t.name.startswith("output_norm"):
            continue
        values = np.asarray(t.data, dtype=np.float32)
        factors = rng.uniform(0.5, 1.5, size=values.shape).astype(np.float32)
        patches.append((int(t.data_offset), (values * factors).astype("<f4").tobytes()))
    if not patches:
        sys.exit(f"{src}: no F32 norm weights to change")
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    with open(tmp, "r+b") as f:
        for offset, data in patches:
            f.seek(offset)
            f.write(data)
    shutil.move(tmp, dst)
    print(f"{dst}: {len(patches)} tensors changed")


if __name__ == "__main__":
    main()
