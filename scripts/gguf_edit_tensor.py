#!/usr/bin/env python3
"""Copy a GGUF file with one tensor dropped, mis-shaped or copied, for the engine's hostile
checks and the perplexity tool's unused-tensor lines.

usage: gguf_edit_tensor.py IN OUT drop|shrink|extra TENSOR [NEW_NAME]
  drop    the tensor is left out
  shrink  the tensor loses its last row (its second dimension, or its first when 1-D)
  extra   a copy of the tensor is added under NEW_NAME (a tensor no graph reads)
"""
import sys

import gguf


def main() -> None:
    src, dst, mode, name = sys.argv[1:5]
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if value is None or (val_type == gguf.GGUFValueType.ARRAY and len(value) == 0):
            continue  # gguf-py cannot write an empty array; no reader needs one
        writer.add_key_value(field.name, value, val_type, sub_type=sub_type)
    tensors = []
    found = False
    for t in reader.tensors:
        data = t.data
        if t.name == name:
            found = True
            if mode == "drop":
                continue
            if mode == "extra":
                tensors.append((t.name, t, data))
                tensors.append((sys.argv[5], t, data))
                continue
            if mode != "shrink":
                sys.exit(f"unknown mode {mode}")
            data = data[:-1] if data.ndim == 1 else data[..., :-1, :]
        tensors.append((t.name, t, data))
    if not found:
        sys.exit(f"no tensor {name} in {src}")
    for name, t, data in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, _, data in tensors:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()


if __name__ == "__main__":
    main()
