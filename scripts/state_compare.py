#!/usr/bin/env python3
"""Compares two state files of an MLA model (K-only caches) field by field.

    state_compare.py KIND A B [MAX_REL]
    state_compare.py zero KIND A SECTION OUT

KIND: session (llama_state_save_file), state (llama_state_get_data), seq
(llama_state_seq_save_file) or partial (llama_state_seq_get_data_ext's buffer). Every
header, cell (position, sequences), layer count, type and row size must be equal, the files
must end where the last cache section ends, and each cached value (F16 or F32) of A must
equal B's within MAX_REL (default 0: bit for bit) of the largest magnitude of its row.
Prints one line per cache section (its layers, cells, values differing, largest relative
difference); exits 1 on a difference beyond the tolerance, 2 on a layout difference.
Used by scripts/test-differential.sh where the engines' floats differ in their last bits
(so the bytes do not), to show the layout is upstream's all the same.

`zero` writes A to OUT with the cached values of cache section SECTION (0: the first
`n_stream` record) set to zero: a state whose restore must change the next logits, showing
that a test comparing them would see that section restored wrong.
"""
import struct
import sys

F32, F16 = 0, 1


class Layout(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if self.at + n > len(self.data):
            raise Layout("ends early at byte %d (%d more wanted)" % (self.at, n))
        b = self.data[self.at:self.at + n]
        self.at += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def i32(self):
        return struct.unpack("<i", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]


def parse(kind, data):
    """The file's fields in order: ('meta', value) and ('rows', type, row_bytes, bytes)."""
    r = Reader(data)
    out = []
    meta = lambda v: out.append(("meta", v))
    if kind in ("session", "seq"):
        meta(r.u32())  # magic
        meta(r.u32())  # version
        n = r.u32()
        meta(n)
        meta(r.take(4 * n))
    if kind in ("session", "state"):
        n = r.u32()
        meta(r.take(n))  # the architecture's name
    if kind == "partial":
        meta(r.u32())  # io magic
        meta(r.i32())  # sequence id
    while r.at < len(data):
        n_stream = r.u32()
        if not 0 < n_stream <= 64:
            raise Layout("byte %d: %d streams" % (r.at - 4, n_stream))
        meta(("streams", n_stream))
        for _ in range(n_stream):
            count = r.u32()
            meta(("cells", count))
            if count == 0:
                continue
            for _ in range(count):
                pos, n_seq = r.i32(), r.u32()
                meta(("cell", pos, n_seq, r.take(4 * n_seq)))
            v_trans, n_layer = r.u32(), r.u32()
            meta(("v_trans", v_trans, "layers", n_layer))
            for _ in range(n_layer):
                ty, row = r.i32(), r.u64()
                meta(("k", ty, row))
                at = r.at
                out.append(("rows", ty, row, r.take(count * row), at))
    return out


def values(ty, b):
    if ty == F16:
        return struct.unpack("<%de" % (len(b) // 2), b)
    if ty == F32:
        return struct.unpack("<%df" % (len(b) // 4), b)
    raise Layout("cache type %d (F16 and F32 only here)" % ty)


def zero(kind, fa, section, fout):
    data = bytearray(open(fa, "rb").read())
    n = -1
    for x in parse(kind, bytes(data)):
        if x[0] == "meta" and isinstance(x[1], tuple) and x[1][0] == "streams":
            n += 1
        if x[0] == "rows" and n == section:
            data[x[4]:x[4] + len(x[3])] = bytes(len(x[3]))
    if n < section:
        print("no cache section %d (%d in the file)" % (section, n + 1))
        return 2
    open(fout, "wb").write(data)
    return 0


def main():
    if sys.argv[1] == "zero":
        return zero(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    kind, fa, fb = sys.argv[1:4]
    max_rel = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    try:
        a, b = (parse(kind, open(f, "rb").read()) for f in (fa, fb))
    except Layout as e:
        print("layout: %s" % e)
        return 2
    if len(a) != len(b):
        print("layout: %d fields against %d" % (len(a), len(b)))
        return 2
    worst, n_diff, n_val, layer = 0.0, 0, 0, 0
    for x, y in zip(a, b):
        if x[0] != y[0] or (x[0] == "meta" and x != y) or (x[0] == "rows" and x[1:3] != y[1:3]):
            print("layout: %r against %r" % (x[:3] if x[0] == "rows" else x, y[:3] if y[0] == "rows" else y))
            return 2
        if x[0] != "rows":
            continue
        ty, row = x[1], x[2]
        va, vb = values(ty, x[3]), values(ty, y[3])
        per_row = len(va) // max(1, len(x[3]) // row)
        d, w = 0, 0.0
        for i in range(0, len(va), per_row):
            ra, rb = va[i:i + per_row], vb[i:i + per_row]
            scale = max(max(abs(v) for v in ra), max(abs(v) for v in rb), 1e-30)
            for p, q in zip(ra, rb):
                if p != q:
                    d += 1
                    w = max(w, abs(p - q) / scale)
        print("layer %d: %d values, %d differ, largest relative difference %.3g" % (layer, len(va), d, w))
        layer += 1
        n_diff += d
        n_val += len(va)
        worst = max(worst, w)
    print("%s: %d cached values, %d differ, largest relative difference %.3g (allowed %g)"
          % (kind, n_val, n_diff, worst, max_rel))
    return 0 if worst <= max_rel else 1


if __name__ == "__main__":
    sys.exit(main())
