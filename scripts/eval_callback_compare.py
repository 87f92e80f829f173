#!/usr/bin/env python3
"""Compares what upstream's llama-eval-callback prints on two libraries (upstream's, ours).

Each printed tensor is (name, type, op, shape) plus its printed values and sum. Unnamed
tensors (`node_<index>`) compare as `node_*(<first source>)`: the index is a position in the
graph. The
k-th upstream tensor with a given (name, type, op, shape) pairs with our k-th one.

Fails (exit 1) when
  * an upstream tensor has no pair in ours, or one of ours has no upstream pair,
  * a pair's printed values differ by more than TOL (relative to the tensor's largest printed
    magnitude, at least 1) or its sums by more than TOL_SUM relative.
Prints a summary: counts, the order agreement (longest common subsequence), worst differences.

usage: eval_callback_compare.py UPSTREAM_OUT OURS_OUT
"""
import difflib
import re
import sys
from collections import Counter, defaultdict

HEADER = re.compile(r"^common_debug_cb_eval:\s+(.*?) = \((\w+)\)\s+(\S+)\((.*?)\{.*\) = \{([^}]*)\}$")
NUMBER = re.compile(r"-?\d+\.\d+|-?inf|-?nan", re.I)
TOL = 2e-3
TOL_SUM = 1e-3


def parse(path):
    entries = []
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = HEADER.match(line)
        if m:
            name, ty, op, src0, shape = m.groups()
            if re.match(r"^node_\d+$", name):
                # an unnamed tensor: told apart by what it reads (views read as the viewed)
                src0 = re.sub(r"^node_\d+$", "node_*", re.sub(r"( \((view|permuted|reshaped)\))+$", "", src0))
                name = f"node_*({src0})"
            entries.append({"key": (name, ty, op, shape.replace(" ", "")), "values": [], "sum": None})
        elif entries and line.strip().startswith("sum = "):
            entries[-1]["sum"] = float(line.split("=")[1])
        elif entries and line.strip().startswith("[") and line.strip() != "[":
            entries[-1]["values"] += [float(x) for x in NUMBER.findall(line)]
    return entries


def paired(up, ours):
    """(upstream index, our index) pairs: the k-th of each key with the k-th."""
    where = defaultdict(list)
    for j, e in enumerate(ours):
        where[e["key"]].append(j)
    taken = Counter()
    pairs = []
    for i, e in enumerate(up):
        k = e["key"]
        if taken[k] < len(where[k]):
            pairs.append((i, where[k][taken[k]]))
            taken[k] += 1
    return pairs


def strip_layer(key):
    return (re.sub(r"-\d+\b|_l\d+\b", "-L", key[0]),) + key[1:3]


def main():
    up, ours = parse(sys.argv[1]), parse(sys.argv[2])
    if not up or not ours:
        sys.exit(f"nothing printed: upstream {len(up)} tensors, ours {len(ours)}")
    pairs = paired(up, ours)
    up_paired = {i for i, _ in pairs}
    ours_paired = {j for _, j in pairs}
    failures = []
    missing = Counter(strip_layer(e["key"]) for i, e in enumerate(up) if i not in up_paired)
    if missing:
        failures.append(f"upstream tensors missing in ours: {sorted(missing.items())[:8]}")
    extra = Counter(strip_layer(e["key"]) for j, e in enumerate(ours) if j not in ours_paired)
    if extra:
        failures.append(f"tensors of ours upstream does not print: {sorted(extra.items())[:8]}")
    worst, worst_sum, worst_name = 0.0, 0.0, ""
    compared = 0
    for i, j in pairs:
        a, b = up[i], ours[j]
        if not a["values"] or len(a["values"]) != len(b["values"]):
            if len(a["values"]) != len(b["values"]):
                failures.append(f"{a['key'][0]}: {len(a['values'])} vs {len(b['values'])} values printed")
            continue
        compared += 1
        scale = max(1.0, max(abs(x) for x in a["values"]))
        d = max(abs(x - y) for x, y in zip(a["values"], b["values"])) / scale
        if d > worst:
            worst, worst_name = d, a["key"][0]
        if a["sum"] is not None and b["sum"] is not None:
            ds = abs(a["sum"] - b["sum"]) / max(1.0, abs(a["sum"]))
            worst_sum = max(worst_sum, ds)
            if ds > TOL_SUM:
                failures.append(f"{a['key'][0]} ({a['key'][2]}): sum {a['sum']} vs {b['sum']}")
        if d > TOL:
            failures.append(f"{a['key'][0]} ({a['key'][2]}): values differ by {d:.3g} (relative)")
    order = difflib.SequenceMatcher(None, [e["key"] for e in up], [e["key"] for e in ours], autojunk=False)
    in_order = sum(block.size for block in order.get_matching_blocks())
    print(f"upstream printed {len(up)} tensors, ours {len(ours)}; {len(pairs)} pairs with the same "
          f"(name, type, op, shape), {in_order} of them in upstream's order")
    print(f"values of {compared} pairs: worst {worst:.3g} relative ({worst_name}), sums within {worst_sum:.3g}")
    if failures:
        print("FAIL")
        for f in failures[:20]:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
