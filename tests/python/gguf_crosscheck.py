#!/usr/bin/env python3
"""Cross-check our GGUF reader/writer against gguf-py (the gguf package in the venv).

Driven by tests/gguf_crosscheck.rs:

  write-py DIR  Write py_*.gguf with gguf-py's GGUFWriter (every value type, arrays of every
                element type, tensors of several types including gguf-py's own Q8_0, Q4_0, F16 and
                BF16 quantizations) and, for each, py_*.expected.json describing what was
                written.
  check DIR     (a) Read every rs_*.gguf (written by our writer) with gguf-py's GGUFReader and
                    compare with rs_*.rust.json, our writer's description of what it wrote.
                (b) Compare every py_*.rust.json (our reader's description of py_*.gguf) with
                    py_*.expected.json, and our dequantizations and quantizations recorded
                    there with gguf-py's.
                Prints every mismatch and exits 1 if there was any.

Descriptions are JSON: {"version", "alignment", "data_offset", "kvs": [{"key", "type",
"elem"?, "value"}], "tensors": [{"name", "type", "ne", "offset", "nbytes", "data"}]}.
Strings are hex of their bytes, floats are the integer of their IEEE bits, so comparisons
are exact. Tensor entries may carry "dequant_bits" (our f32 dequantization, as bits) and
"requant" (hex of our quantization of tensor "requant_from", an F32 tensor of the file).
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGUFValueType, GGMLQuantizationType, quants

SCALAR_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "str",
    GGUFValueType.ARRAY: "arr", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def f64_bits(v):
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def encode_scalar(vtype, value):
    """A Python value as gguf-py writes it, in the description encoding."""
    if vtype == GGUFValueType.STRING:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return raw.hex()
    if vtype == GGUFValueType.FLOAT32:
        return f32_bits(value)
    if vtype == GGUFValueType.FLOAT64:
        return f64_bits(value)
    if vtype == GGUFValueType.BOOL:
        return bool(value)
    return int(value)


# ---------------------------------------------------------------- write-py

def value_fixtures():
    """(key, value, type, sub_type) for every scalar type and every array element type."""
    T = GGUFValueType
    return [
        ("py.u8", 200, T.UINT8, None),
        ("py.i8", -100, T.INT8, None),
        ("py.u16", 60000, T.UINT16, None),
        ("py.i16", -30000, T.INT16, None),
        ("py.u32", 4_000_000_000, T.UINT32, None),
        ("py.i32", -2_000_000_000, T.INT32, None),
        ("py.f32", 0.1, T.FLOAT32, None),
        ("py.bool", True, T.BOOL, None),
        ("py.str", "gguf-py wrote this \u2581\u00e9", T.STRING, None),
        ("py.u64", 2**64 - 1, T.UINT64, None),
        ("py.i64", -(2**63), T.INT64, None),
        ("py.f64", 1.0 / 3.0, T.FLOAT64, None),
        ("py.arr.u8", [0, 1, 255], T.ARRAY, T.UINT8),
        ("py.arr.i8", [-128, 127], T.ARRAY, T.INT8),
        ("py.arr.u16", [1, 65535], T.ARRAY, T.UINT16),
        ("py.arr.i16", [-32768, 5], T.ARRAY, T.INT16),
        ("py.arr.u32", [7, 2**32 - 1], T.ARRAY, T.UINT32),
        ("py.arr.i32", [-1, 0, 1], T.ARRAY, T.INT32),
        ("py.arr.f32", [0.5, -1e-3, 3.0e38], T.ARRAY, T.FLOAT32),
        ("py.arr.bool", [True, False, True], T.ARRAY, T.BOOL),
        ("py.arr.str", ["a", "", "\u2581tok", "quote\"back\\"], T.ARRAY, T.STRING),
        ("py.arr.u64", [2**64 - 1, 0], T.ARRAY, T.UINT64),
        ("py.arr.i64", [-(2**63), 2**63 - 1], T.ARRAY, T.INT64),
        ("py.arr.f64", [2.5, -0.0], T.ARRAY, T.FLOAT64),
    ]


def source_values(rows, cols, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)) * 0.7).astype(np.float32)


def describe_writer(writer, alignment):
    """What a GGUFWriter (before writing) is going to write."""
    kvs = []
    for key, val in writer.kv_data[0].items():
        entry = {"key": key, "type": SCALAR_NAMES[val.type]}
        if val.type == GGUFValueType.ARRAY:
            sub = val.sub_type if val.sub_type is not None else GGUFValueType.get_type(val.value[0])
            entry["elem"] = SCALAR_NAMES[sub]
            entry["value"] = [encode_scalar(sub, v) for v in val.value]
        else:
            entry["value"] = encode_scalar(val.type, val.value)
        kvs.append(entry)
    tensors = []
    offset = 0
    for name, ti in writer.tensors[0].items():
        data = np.ascontiguousarray(ti.tensor).tobytes()
        tensors.append({
            "name": name,
            "type": int(ti.dtype),
            "ne": [int(d) for d in reversed(ti.shape)],
            "offset": offset,
            "nbytes": int(ti.nbytes),
            "data": data.hex(),
        })
        offset += GGUFWriter.ggml_pad(ti.nbytes, alignment)
    return {"version": 3, "alignment": alignment, "kvs": kvs, "tensors": tensors}


def write_py(out_dir):
    out_dir = Path(out_dir)
    Q = GGMLQuantizationType

    def finish(writer, name, alignment=32):
        expected = describe_writer(writer, alignment)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        (out_dir / f"{name}.expected.json").write_text(json.dumps(expected))

    # Every value type, no tensors.
    w = GGUFWriter(out_dir / "py_values.gguf", "llama")
    for key, value, vtype, sub in value_fixtures():
        w.add_key_value(key, value, vtype, sub_type=sub)
    finish(w, "py_values")

    # Tensors: plain types, and gguf-py's own quantizations of F32 sources.
    w = GGUFWriter(out_dir / "py_tensors.gguf", "llama")
    w.add_string("general.name", "crosscheck")
    w.add_tensor("plain.f32", source_values(3, 5, 1))
    w.add_tensor("plain.f16", source_values(2, 8, 2).astype(np.float16))
    w.add_tensor("plain.f64", source_values(2, 3, 3).astype(np.float64))
    w.add_tensor("plain.i8", np.arange(-6, 6, dtype=np.int8).reshape(3, 4))
    w.add_tensor("plain.i16", np.arange(-8, 8, dtype=np.int16).reshape(2, 2, 4))
    w.add_tensor("plain.i32", np.arange(10, dtype=np.int32))
    w.add_tensor("plain.i64", np.arange(6, dtype=np.int64).reshape(1, 2, 3, 1))
    for qtype, rows, cols in [(Q.Q8_0, 4, 64), (Q.Q4_0, 3, 96), (Q.BF16, 2, 40), (Q.F16, 2, 24)]:
        src = source_values(rows, cols, int(qtype))
        # An exact tie, a zero block and extreme values exercise rounding and zero scales.
        src[0, :32] = 0.0
        src[1, 0] = 1e-30
        src[-1, -1] = -3.75
        w.add_tensor(f"src.{qtype.name.lower()}", src)
        w.add_tensor(f"q.{qtype.name.lower()}", quants.quantize(src, qtype), raw_dtype=qtype)
    finish(w, "py_tensors")

    # A non-default alignment.
    w = GGUFWriter(out_dir / "py_align64.gguf", "llama")
    w.add_custom_alignment(64)
    w.add_tensor("a", source_values(1, 3, 7))
    w.add_tensor("b", source_values(2, 16, 8).astype(np.float16))
    finish(w, "py_align64", 64)


# ---------------------------------------------------------------- reading with gguf-py

def read_field(field):
    main = field.types[0]
    if main == GGUFValueType.ARRAY:
        sub = field.types[-1]
        entry = {"type": "arr", "elem": SCALAR_NAMES[sub]}
        entry["value"] = [encode_part(sub, field.parts[i]) for i in field.data]
        return entry
    return {"type": SCALAR_NAMES[main], "value": encode_part(main, field.parts[field.data[0]])}


def encode_part(vtype, part):
    if vtype == GGUFValueType.STRING:
        return bytes(part).hex()
    if vtype == GGUFValueType.FLOAT32:
        return int(part.view(np.uint32)[0])
    if vtype == GGUFValueType.FLOAT64:
        return int(part.view(np.uint64)[0])
    if vtype == GGUFValueType.BOOL:
        return bool(part[0])
    return int(part[0])


def describe_reader(path):
    reader = GGUFReader(path)
    kvs = []
    for key, field in reader.fields.items():
        if key in ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"):
            continue
        kvs.append({"key": key, **read_field(field)})
    tensors = []
    for t in reader.tensors:
        tensors.append({
            "name": t.name,
            "type": int(t.tensor_type),
            "ne": [int(d) for d in t.shape],
            "offset": int(t.data_offset - reader.data_offset),
            "nbytes": int(t.n_bytes),
            "data": np.ascontiguousarray(t.data).tobytes().hex(),
        })
    version = int(reader.fields["GGUF.version"].parts[0][0])
    return {"version": version, "alignment": int(reader.alignment),
            "data_offset": int(reader.data_offset), "kvs": kvs, "tensors": tensors}


# ---------------------------------------------------------------- comparison

class Report:
    def __init__(self):
        self.failures = []
        self.comparisons = 0

    def eq(self, what, ours, theirs):
        self.comparisons += 1
        if ours != theirs:
            shown = lambda v: (repr(v)[:200] + "...") if len(repr(v)) > 200 else repr(v)  # noqa: E731
            self.failures.append(f"{what}: ours {shown(ours)} != gguf-py {shown(theirs)}")


def compare(report, label, ours, theirs):
    report.eq(f"{label}: version", ours["version"], theirs["version"])
    report.eq(f"{label}: alignment", ours["alignment"], theirs["alignment"])
    report.eq(f"{label}: keys in order", [kv["key"] for kv in ours["kvs"]],
              [kv["key"] for kv in theirs["kvs"]])
    theirs_kvs = {kv["key"]: kv for kv in theirs["kvs"]}
    for kv in ours["kvs"]:
        other = theirs_kvs.get(kv["key"])
        if other is None:
            continue
        for field in ("type", "elem", "value"):
            report.eq(f"{label}: key {kv['key']} {field}", kv.get(field), other.get(field))
    report.eq(f"{label}: tensor names", [t["name"] for t in ours["tensors"]],
              [t["name"] for t in theirs["tensors"]])
    if ours["tensors"] and "data_offset" in ours and "data_offset" in theirs:
        report.eq(f"{label}: data offset", ours["data_offset"], theirs["data_offset"])
    theirs_tensors = {t["name"]: t for t in theirs["tensors"]}
    for t in ours["tensors"]:
        other = theirs_tensors.get(t["name"])
        if other is None:
            continue
        for field in ("type", "ne", "offset", "nbytes", "data"):
            report.eq(f"{label}: tensor {t['name']} {field}", t[field], other[field])


def check_quantization(report, label, ours_desc):
    """Our dequantization and quantization, recorded by the Rust test, against gguf-py's."""
    by_name = {t["name"]: t for t in ours_desc["tensors"]}
    checked = 0
    for t in ours_desc["tensors"]:
        qtype = GGMLQuantizationType(t["type"])
        raw = np.frombuffer(bytes.fromhex(t["data"]), dtype=np.uint8)
        if "dequant_bits" in t:
            rows = int(np.prod(t["ne"][1:])) if len(t["ne"]) > 1 else 1
            theirs = quants.dequantize(raw.reshape(rows, -1), qtype).astype(np.float32)
            theirs_bits = [int(b) for b in theirs.reshape(-1).view(np.uint32)]
            report.eq(f"{label}: dequantize {t['name']} ({qtype.name})", t["dequant_bits"], theirs_bits)
            checked += 1
        if "requant" in t:
            src = by_name[t["requant_from"]]
            values = np.frombuffer(bytes.fromhex(src["data"]), dtype=np.float32)
            theirs = quants.quantize(values.reshape(-1, src["ne"][0]), qtype)
            report.eq(f"{label}: quantize {t['requant_from']} as {qtype.name}", t["requant"],
                      np.ascontiguousarray(theirs).tobytes().hex())
            checked += 1
    return checked


def check(out_dir):
    out_dir = Path(out_dir)
    report = Report()
    ours_written = sorted(out_dir.glob("rs_*.gguf"))
    py_written = sorted(out_dir.glob("py_*.gguf"))
    if not ours_written or not py_written:
        print(f"FAIL: nothing to check in {out_dir}")
        return 1
    quant_checks = 0
    for path in ours_written:
        ours = json.loads(path.with_suffix(".rust.json").read_text())
        theirs = describe_reader(path)
        compare(report, path.name + " (gguf-py reads ours)", ours, theirs)
    for path in py_written:
        expected = json.loads(path.with_suffix(".expected.json").read_text())
        ours = json.loads(path.with_suffix(".rust.json").read_text())
        # gguf-py pads the data offset even without tensors; we (like upstream) do not.
        compare(report, path.name + " (we read gguf-py's)", ours, expected)
        compare(report, path.name + " (vs GGUFReader)", ours, describe_reader(path))
        quant_checks += check_quantization(report, path.name, ours)
    if quant_checks == 0:
        report.failures.append("no quantization was cross-checked")
    for failure in report.failures:
        print("MISMATCH", failure)
    print(f"gguf crosscheck: {len(ours_written)} of our files, {len(py_written)} gguf-py files, "
          f"{report.comparisons} comparisons, {quant_checks} quantization checks, "
          f"{len(report.failures)} mismatches")
    return 1 if report.failures else 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("write-py", "check"):
        print(__doc__)
        return 2
    if argv[1] == "write-py":
        write_py(argv[2])
        return 0
    return check(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
