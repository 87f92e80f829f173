#!/usr/bin/env python3
"""Copy a GGUF file with one F32 tensor's values multiplied by FACTOR: "new weights" of the
same layout (same tensors, types, shapes and offsets; every other byte equal) for the
hot-swap checks on tensors other than norms (a recurrent model's SSM weights).

usage: gguf_scale_tensor.py IN OUT TENSOR FACTOR
"""
import shutil
import sys

import numpy as np

import gguf


def main() -> None:
    src, dst, name, factor = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    reader = gguf.GGUFReader(src)
    found = [t for t in reader.tensors if t.name == name]
    if not found:
        sys.exit(f"{src}: no tensor {name}")
    t = found[0]
    if t.tensor_type != gguf.GGMLQuantizationType.F32:
        sys.exit(f"{src}: {name} is not F32")
    values = np.asarray(t.data, dtype=np.float32) * np.float32(factor)
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    with open(tmp, "r+b") as f:
        f.seek(int(t.data_offset))
        f.write(values.astype("<f4").tobytes())
    shutil.move(tmp, dst)
    print(f"{dst}: {name} scaled by {factor}")


if __name__ == "__main__":
    main()
