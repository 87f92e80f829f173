"""Oracle side of tests/kernels_upstream.rs.

usage: kernels_crosscheck.py DIR [LIBGGML_CPU]

DIR holds, per weight type NAME (gguf-py's enum name, e.g. Q4_K):
  NAME.w    weight rows (ggml bytes), NAME.x  f32 activation rows, NAME.shape  "n_rows k m"
Writes:
  NAME.deq  gguf.quants.dequantize of NAME.w as f32
and, when LIBGGML_CPU (upstream's libggml-cpu.so) is given:
  NAME.xq   upstream's from_float of each activation row into the vec_dot type
  NAME.dot  upstream's vec_dot of every (weight row, activation row), f32, [m][n_rows]
"""
import ctypes
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize
from gguf.constants import GGML_QUANT_SIZES


def main():
    d = sys.argv[1]
    lib = None
    if len(sys.argv) > 2:
        lib = ctypes.CDLL(sys.argv[2])
        lib.ggml_cpu_init()

        class Traits(ctypes.Structure):
            _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                        ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]

        lib.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
        lib.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
        from_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
        vec_dot_t = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.c_int)
    names = sorted(f[:-2] for f in os.listdir(d) if f.endswith(".w"))
    for name in names:
        qtype = GGMLQuantizationType[name]
        n_rows, k, m = map(int, open(os.path.join(d, name + ".shape")).read().split())
        w = np.fromfile(os.path.join(d, name + ".w"), dtype=np.uint8)
        if qtype == GGMLQuantizationType.F32:
            deq = w.view(np.float32)
        elif qtype == GGMLQuantizationType.F16:
            deq = w.view(np.float16).astype(np.float32)
        else:
            deq = dequantize(w.reshape(n_rows, -1), qtype).astype(np.float32)
        np.ascontiguousarray(deq, dtype=np.float32).tofile(os.path.join(d, name + ".deq"))
        if lib is None:
            continue
        traits = lib.ggml_get_type_traits_cpu(int(qtype)).contents
        vt = GGMLQuantizationType(traits.vec_dot_type)
        # sizeof(block_*) of ggml-common.h; gguf-py's table says 40 for Q8_1 (an old layout with
        # f32 d and s), but upstream's block_q8_1 is ggml_half2 ds + 32 quants = 36 bytes.
        block, size = {"Q8_1": (32, 36)}.get(vt.name, GGML_QUANT_SIZES[vt])
        xrow = k // block * size
        x = np.fromfile(os.path.join(d, name + ".x"), dtype=np.float32).reshape(m, k)
        xq = np.zeros(m * xrow, dtype=np.uint8)
        if vt == GGMLQuantizationType.F32:
            xq = x.copy().view(np.uint8).reshape(-1)
        else:
            # The vec_dot type's own from_float (Q4_0's traits hold quantize_row_q4_0).
            from_float = from_float_t(lib.ggml_get_type_traits_cpu(int(vt)).contents.from_float)
            for j in range(m):
                row = np.ascontiguousarray(x[j])
                from_float(row.ctypes.data, xq[j * xrow:].ctypes.data, k)
        xq.tofile(os.path.join(d, name + ".xq"))
        vec_dot = vec_dot_t(traits.vec_dot)
        wrow = len(w) // n_rows
        out = np.zeros((m, n_rows), dtype=np.float32)
        s = ctypes.c_float()
        for j in range(m):
            for i in range(n_rows):
                vec_dot(k, ctypes.addressof(s), 0, w[i * wrow:].ctypes.data, 0,
                        xq[j * xrow:].ctypes.data, 0, 1)
                out[j, i] = s.value
        out.tofile(os.path.join(d, name + ".dot"))
    print(f"crosscheck: {len(names)} types{' with libggml-cpu' if lib else ''}")


if __name__ == "__main__":
    main()
