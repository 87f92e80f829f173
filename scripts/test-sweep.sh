#!/usr/bin/env bash
# The in-process quantization sweep (`llama-hotswap-perplexity sweep`):
# 1. tests/sweep.rs and the sweep's unit tests: a tiny llama model in one-tensor shards with
#    3 candidates (identical, Q8_0 type change, truncated): rows, resume, a corrupted restore
#    caught by the return check, the type change equal to a fresh load of the retyped model.
# 2. The real SmolLM2 (Q4_1 as shipped) in one-tensor shards, with an identical candidate
#    and a Q8_0 one from upstream's requantized copy: the identical candidate's PPL and KLD
#    equal the base round's exactly; the Q8_0 one is an ok row with a larger KLD.
# 3. In-memory candidates (--quantize, issue 36): the same tensor converted to Q8_0 in memory
#    gives the Q8_0 file's row exactly (bytes, PPL, KLD, top-1: the bytes equal upstream's
#    llama-quantize output, checked in make test-quantize); Q4_K, which a 576-wide row
#    cannot take, is a failed row saying so; a rerun skips both (resume).
# 4. From sweep to model: on the single-file SmolLM2, an in-memory Q4_0 candidate and a budget
#    just under the model's size: the pick (that tensor in Q4_0) written as a GGUF-Tool-Suite
#    recipe, as a llama-quantize --tensor-type-file, and as a model (--write-model) that is
#    byte-identical to upstream's llama-quantize run with that file; a --write-model path in
#    a missing directory fails before anything runs.
# 5. With an imatrix (--imatrix, written by upstream's llama-imatrix): the in-memory IQ4_NL
#    candidate gives exactly the row of the candidate file that upstream's llama-quantize
#    --imatrix writes, and differs from the candidate made without the imatrix; a truncated
#    imatrix and one made for another model fail before anything runs, naming the problem.
# 6. From a higher-precision source (--from, issue 36): on the Q8_0 base, in-memory Q4_0
#    candidates quantized from the F16 model give exactly the row of the candidate file
#    upstream's llama-quantize writes from that F16 file (and not the row of the Q4_0 made
#    from the base); --write-model quantizes the F16 file into the pick, byte-identical to
#    upstream's llama-quantize on it; a source lacking the tensor gives a failed row naming
#    it, a truncated or missing source fails before anything runs.
# 7. The grid IQ types with --imatrix: each in-memory row = the row of upstream's
#    llama-quantize file; without an imatrix the types llama-quantize refuses are failed rows.
# 8. The sweep users' MoE families on upstream's random-weight fixtures (deepseek2 with MLA,
#    glm4moe, gpt-oss with sinks and expert biases): a round swapping layer 1's stacked expert
#    tensor to Q8_0 and Q4_0 in memory gives ok rows of the right byte sizes whose PPL moves
#    from the base's (the swap reached the decode), each restore hash-checked by the sweep.
. "$(dirname "$0")/test-common.sh"
log="$WORK/test-sweep.log"
if ! cargo test --release --test sweep --bin llama-hotswap-perplexity >"$log" 2>&1; then
    grep -nE 'panicked at|^failures:|FAILED|^error(\[|:)' "$log" | head -n 40 || true
    tail -n 60 "$log"
    fail "sweep tests (full output: $log)"
fi
grep -E '^test result:' "$log"

model="$(bash scripts/fetch-models.sh)"
tools="$(bash scripts/build-upstream-tools.sh llama-quantize llama-imatrix)"
cargo build --release --quiet --bin llama-hotswap-perplexity --example sweep_fixtures
fixtures="$ROOT/target/release/examples/sweep_fixtures"
q8="$LLAMA_HOTSWAP_CACHE/models/engine/SmolLM2-135M-Instruct.Q8_0.gguf"
mkdir -p "$(dirname "$q8")"
[ -s "$q8" ] || { LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize "$model" "$q8.tmp" Q8_0 \
    >/dev/null 2>&1 && mv "$q8.tmp" "$q8"; }
data="$LLAMA_HOTSWAP_CACHE/bench-sweep"
shards=$("$fixtures" split "$model" "$data/shards/smol")
first=$(head -n1 <<<"$shards")
out="$WORK/sweep-smol"
rm -rf "$out" && mkdir -p "$out"
"$fixtures" candidates "$data/shards/smol" "$model" "$out/cand/same" blk.3.ffn_gate.weight >/dev/null
"$fixtures" candidates "$data/shards/smol" "$q8" "$out/cand/q8_0" blk.3.ffn_gate.weight >/dev/null
cat "$UPSTREAM_LLAMA/README.md" >"$out/text.txt"
"$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$first" -f "$out/text.txt" \
    --candidates "$out/cand" --csv "$out/rows.csv" -c 128 -b 128 --chunks 1 -t 2 --plain \
    >"$out/sweep.log" 2>&1 || { tail -n 30 "$out/sweep.log"; fail "sweep on SmolLM2"; }
python3 - "$out/rows.csv" "$out/sweep.log" <<'PY'
import csv, re, sys
rows = {r["file"].split("/")[-2]: r for r in csv.DictReader(open(sys.argv[1]))}  # canonical path: .../<dir>/<file>
log = open(sys.argv[2]).read()
m = re.search(r"^sweep: base model: PPL = (\S+) .*KLD vs base logits = ([^,]+),", log, re.M)
assert m, "no base line"
ppl, kld = m.group(1), m.group(2)
same, q8 = rows["same"], rows["q8_0"]
assert same["status"] == "ok" and q8["status"] == "ok", (same, q8)
assert same["ppl"] == ppl and same["kld"] == kld, (same["ppl"], ppl, same["kld"], kld)
assert q8["type"] == "q8_0" and float(q8["kld"]) > float(kld), q8
print(f"SmolLM2 shards: identical candidate PPL {same['ppl']} = base, KLD {same['kld']} = base; "
      f"Q8_0 candidate PPL {float(q8['ppl']):.4f}, KLD {float(q8['kld']):.6f}, top1 {float(q8['top1']):.2f}%")
PY
inmem() {
    "$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$first" --kl-divergence-base "$out/rows.csv.base-logits" \
        --quantize q8_0,q4_K --include '^blk\.3\.ffn_gate\.weight$' --csv "$out/inmem.csv" -c 128 -b 128 --chunks 1 -t 2 --plain \
        >"$out/inmem$1.log" 2>&1 || { tail -n 30 "$out/inmem$1.log"; fail "in-memory sweep on SmolLM2"; }
}
inmem ""
inmem "-rerun"
python3 - "$out/rows.csv" "$out/inmem.csv" "$out/inmem-rerun.log" <<'PY'
import csv, sys
files = {r["file"].split("/")[-2]: r for r in csv.DictReader(open(sys.argv[1]))}
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 2, rows
mem = {r["type"]: r for r in rows}
q8, k = files["q8_0"], mem["q4_K"]
m8 = mem["q8_0"]
assert m8["status"] == "ok" and m8["file"] == "(quantized in memory)", m8
for col in ("tensor", "bytes", "ppl", "kld", "top1"):
    assert m8[col] == q8[col], (col, m8[col], q8[col])
assert k["status"] != "ok" and "cannot be stored as q4_K" in k["reason"], k
rerun = open(sys.argv[3]).read()
assert "0 to run, 2 already in" in rerun, rerun[-500:]
print(f"in-memory Q8_0 candidate: PPL {m8['ppl']}, KLD {m8['kld']} = the Q8_0 file's row; "
      f"q4_K refused ({k['reason'][:60]}...); resumed run skips both")
PY
size=$("$VENV/bin/python" -c "import gguf,sys; print(sum(int(t.n_bytes) for t in gguf.GGUFReader(sys.argv[1]).tensors))" "$model")
budget=$((size - 1000))
rm -f "$out/mix.recipe" "$out/mix.types" "$out/mix.gguf"
"$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$model" -f "$out/text.txt" \
    --kl-divergence-base "$out/single.base-logits" --quantize q4_0 --include '^blk\.3\.ffn_gate\.weight$' \
    --csv "$out/mix.csv" -c 128 -b 128 --chunks 1 -t 2 --plain --budget "$budget" \
    --recipe "$out/mix.recipe" --tensor-type-file "$out/mix.types" --write-model "$out/mix.gguf" \
    >"$out/mix.log" 2>&1 || { tail -n 30 "$out/mix.log"; fail "sweep --write-model"; }
grep -qx 'blk\\.3\\.ffn_gate\\.weight=q4_0' "$out/mix.recipe" || fail "recipe: no q4_0 line for blk.3.ffn_gate ($(grep ffn_gate "$out/mix.recipe" | head -3))"
grep -qx 'blk\\.3\\.ffn_up\\.weight=q4_1' "$out/mix.recipe" || fail "recipe: blk.3.ffn_up is not kept in q4_1"
LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize --pure --tensor-type-file "$out/mix.types" \
    "$model" "$out/mix-upstream.gguf" Q8_0 >"$out/mix-upstream.log" 2>&1 || { tail -n 20 "$out/mix-upstream.log"; fail "upstream llama-quantize with our tensor-type file"; }
cmp -s "$out/mix.gguf" "$out/mix-upstream.gguf" || fail "--write-model: our model differs from upstream's llama-quantize with the same --tensor-type-file"
say "sweep to model: budget $budget bytes picks blk.3.ffn_gate in q4_0; recipe and tensor-type file written; --write-model byte-identical to upstream's llama-quantize ($(stat -c %s "$out/mix.gguf") bytes)"
if "$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$model" --quantize q4_0 --csv "$out/x.csv" --budget 1G \
    --write-model "$out/no/such/dir/m.gguf" >"$out/nodir.log" 2>&1 || ! grep -q "directory does not exist" "$out/nodir.log"; then
    fail "--write-model into a missing directory: $(tail -n 2 "$out/nodir.log")"
fi
rm -f "$out/mix.gguf" "$out/mix-upstream.gguf"

# 5. imatrix
LD_LIBRARY_PATH="$tools" "$tools/llama-imatrix" -m "$model" -f "$out/text.txt" -c 128 --chunks 2 -t 2 \
    -o "$out/im.gguf" >"$out/imatrix.log" 2>&1 || { tail -n 20 "$out/imatrix.log"; fail "upstream llama-imatrix"; }
LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize --pure --imatrix "$out/im.gguf" \
    "$model" "$out/iq4nl-im.gguf" IQ4_NL 2 >"$out/iq4nl-im.log" 2>&1 || { tail -n 20 "$out/iq4nl-im.log"; fail "upstream llama-quantize --imatrix"; }
"$fixtures" candidates "$data/shards/smol" "$out/iq4nl-im.gguf" "$out/cand-im/iq4_nl" blk.3.ffn_gate.weight >/dev/null
rm -f "$out/iq4nl-im.gguf"
imsweep() { # OUT.csv LOG ARGS...
    local csv=$1 log=$2; shift 2
    "$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$first" --kl-divergence-base "$out/rows.csv.base-logits" \
        --include '^blk\.3\.ffn_gate\.weight$' --csv "$csv" -c 128 -b 128 --chunks 1 -t 2 --plain "$@" >"$log" 2>&1
}
imsweep "$out/im-file.csv" "$out/im-file.log" --candidates "$out/cand-im" || { tail -n 20 "$out/im-file.log"; fail "sweep over the imatrix candidate file"; }
imsweep "$out/im-mem.csv" "$out/im-mem.log" --quantize iq4_nl --imatrix "$out/im.gguf" || { tail -n 20 "$out/im-mem.log"; fail "in-memory sweep with --imatrix"; }
imsweep "$out/noim-mem.csv" "$out/noim-mem.log" --quantize iq4_nl || { tail -n 20 "$out/noim-mem.log"; fail "in-memory sweep without imatrix"; }
python3 - "$out/im-file.csv" "$out/im-mem.csv" "$out/noim-mem.csv" <<'PY'
import csv, sys
f, m, n = (list(csv.DictReader(open(p)))[0] for p in sys.argv[1:4])
assert f["status"] == m["status"] == n["status"] == "ok", (f, m, n)
for col in ("tensor", "type", "bytes", "ppl", "kld", "top1"):
    assert f[col] == m[col], (col, f[col], m[col])
assert n["kld"] != m["kld"], ("the imatrix changed nothing", n["kld"])
print(f"in-memory IQ4_NL with --imatrix: KLD {m['kld']} = the file row of upstream's llama-quantize --imatrix; without: KLD {n['kld']}")
PY
head -c 1000 "$out/im.gguf" >"$out/im-cut.gguf"
if imsweep "$out/x.csv" "$out/im-cut.log" --quantize iq4_nl --imatrix "$out/im-cut.gguf" \
    || ! grep -q -- "--imatrix .*im-cut.gguf: not a valid GGUF imatrix" "$out/im-cut.log"; then
    fail "a truncated imatrix: $(tail -n 2 "$out/im-cut.log")"
fi
"$VENV/bin/python" - "$out/im.gguf" "$out/im-other.gguf" <<'PY'
import sys
import numpy as np
import gguf
r = gguf.GGUFReader(sys.argv[1])
w = gguf.GGUFWriter(sys.argv[2], arch="imatrix")
w.add_array("imatrix.datasets", ["other"]); w.add_uint32("imatrix.chunk_count", 1); w.add_uint32("imatrix.chunk_size", 128)
for t in r.tensors:
    d = np.array(t.data, dtype=np.float32)
    if t.name == "blk.3.ffn_gate.weight.in_sum2":
        d = np.concatenate([d, d], axis=-1)  # rows twice as long: another model's
    w.add_tensor(t.name, d)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
if imsweep "$out/x.csv" "$out/im-other.log" --quantize iq4_nl --imatrix "$out/im-other.gguf" \
    || ! grep -q "imatrix entry 'blk.3.ffn_gate.weight'.*another model" "$out/im-other.log"; then
    fail "an imatrix of another model: $(tail -n 2 "$out/im-other.log")"
fi
say "imatrix: a truncated file and another model's refused before any round"

# 6. --from: quantize the candidates from a higher-precision copy of the base
f16="$LLAMA_HOTSWAP_CACHE/models/engine/SmolLM2-135M-Instruct.F16.gguf"
[ -s "$f16" ] || { LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize "$model" "$f16.tmp" F16 \
    >/dev/null 2>&1 && mv "$f16.tmp" "$f16"; } || fail "llama-quantize F16"
LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize --pure "$f16" "$out/f16-q4_0.gguf" Q4_0 2 \
    >"$out/f16-q4_0.log" 2>&1 || { tail -n 20 "$out/f16-q4_0.log"; fail "upstream llama-quantize F16 -> Q4_0"; }
"$fixtures" candidates "$data/shards/smol" "$out/f16-q4_0.gguf" "$out/cand-f16/q4_0" blk.3.ffn_gate.weight >/dev/null
rm -f "$out/f16-q4_0.gguf"
fromsweep() { # OUT.csv LOG ARGS...
    local csv=$1 log=$2; shift 2
    "$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$q8" -f "$out/text.txt" --kl-divergence-base "$out/q8.base-logits" \
        --include '^blk\.3\.ffn_gate\.weight$' --csv "$csv" -c 128 -b 128 --chunks 1 -t 2 --plain "$@" >"$log" 2>&1
}
fromsweep "$out/from-file.csv" "$out/from-file.log" --candidates "$out/cand-f16" || { tail -n 20 "$out/from-file.log"; fail "sweep over the F16-made candidate file"; }
size8=$("$VENV/bin/python" -c "import gguf,sys; print(sum(int(t.n_bytes) for t in gguf.GGUFReader(sys.argv[1]).tensors))" "$q8")
rm -f "$out/from.gguf" "$out/from.types"
fromsweep "$out/from-mem.csv" "$out/from-mem.log" --quantize q4_0 --from "$f16" --budget $((size8 - 1000)) \
    --tensor-type-file "$out/from.types" --write-model "$out/from.gguf" || { tail -n 20 "$out/from-mem.log"; fail "in-memory sweep --from"; }
fromsweep "$out/base-mem.csv" "$out/base-mem.log" --quantize q4_0 || { tail -n 20 "$out/base-mem.log"; fail "in-memory sweep from the base"; }
python3 - "$out/from-file.csv" "$out/from-mem.csv" "$out/base-mem.csv" <<'PY'
import csv, sys
f, m, b = (list(csv.DictReader(open(p)))[0] for p in sys.argv[1:4])
assert f["status"] == m["status"] == b["status"] == "ok", (f, m, b)
assert m["file"].startswith("(quantized in memory from ") and m["file"].endswith("F16.gguf)"), m["file"]
for col in ("tensor", "type", "bytes", "ppl", "kld", "top1"):
    assert f[col] == m[col], (col, f[col], m[col])
assert b["kld"] != m["kld"], ("--from changed nothing", b["kld"])
print(f"--from F16: in-memory Q4_0 KLD {m['kld']} = the row of upstream's Q4_0 file made from F16; from the Q8_0 base: KLD {b['kld']}")
PY
grep -qxF '^blk\.3\.ffn_gate\.weight$=q4_0' "$out/from.types" || fail "--from --budget: no q4_0 pick for blk.3.ffn_gate ($(head -3 "$out/from.types"))"
LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize --pure --tensor-type-file "$out/from.types" \
    "$f16" "$out/from-upstream.gguf" Q8_0 >"$out/from-upstream.log" 2>&1 || { tail -n 20 "$out/from-upstream.log"; fail "upstream llama-quantize of the F16 model with our tensor-type file"; }
cmp -s "$out/from.gguf" "$out/from-upstream.gguf" || fail "--from --write-model: our model differs from upstream's llama-quantize of the F16 file"
say "--from: --write-model quantizes the F16 source into the pick, byte-identical to upstream's llama-quantize ($(stat -c %s "$out/from.gguf") bytes)"
rm -f "$out/from.gguf" "$out/from-upstream.gguf"
# hostile sources: a model with blk.3.ffn_gate in another shape and without blk.3.ffn_up
"$VENV/bin/python" - "$out/from-other.gguf" <<'PY'
import sys
import numpy as np
import gguf
w = gguf.GGUFWriter(sys.argv[1], arch="llama")
w.add_tensor("blk.3.ffn_gate.weight", np.zeros((64, 576), dtype=np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
fromsweep "$out/from-x.csv" "$out/from-other.log" --quantize q4_0 --from "$out/from-other.gguf" --include '^blk\.3\.ffn_(gate|up)\.weight$' \
    || { tail -n 5 "$out/from-other.log"; fail "--from a model lacking the tensor: the sweep stopped"; }
grep -q "the --from model has no tensor 'blk.3.ffn_up.weight'" "$out/from-x.csv" || fail "--from lacking the tensor: no failed row naming it ($(tail -n 2 "$out/from-x.csv"))"
grep -q "'blk.3.ffn_gate.weight': shape \[576, 64, 1, 1\] in the --from model" "$out/from-x.csv" || fail "--from with another shape: no failed row saying so ($(tail -n 2 "$out/from-x.csv"))"
head -c 4000 "$f16" >"$out/f16-cut.gguf"
if fromsweep "$out/x.csv" "$out/from-cut.log" --quantize q4_0 --from "$out/f16-cut.gguf" \
    || ! grep -q -- "--from .*f16-cut.gguf: not a valid GGUF" "$out/from-cut.log"; then
    fail "a truncated --from: $(tail -n 2 "$out/from-cut.log")"
fi
if fromsweep "$out/x.csv" "$out/from-none.log" --quantize q4_0 --from "$out/no-such.gguf" \
    || ! grep -q -- "--from .*no-such.gguf: cannot open" "$out/from-none.log"; then
    fail "a missing --from: $(tail -n 2 "$out/from-none.log")"
fi
say "--from: a source lacking the tensor or holding another shape gives a failed row saying so; a truncated and a missing source fail before any round"

# 7. The grid IQ types (issue 36): on blk.3.ffn_down (1536-wide rows; the 576-wide ones cannot
#    take 256-element blocks) each in-memory candidate with --imatrix gives exactly the row of
#    the file upstream's llama-quantize writes with that imatrix (that tensor alone retyped
#    by --tensor-type, the rest copied); without --imatrix the six types llama-quantize
#    refuses are failed rows saying so, and IQ3_S, which needs none, is an ok row.
grid="iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m"
rm -rf "$out/cand-grid"
for t in $grid; do
    LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize --pure --imatrix "$out/im.gguf" \
        --tensor-type "blk.3.ffn_down.weight=$t" "$model" "$out/grid-$t.gguf" Q4_1 2 >"$out/grid-$t.log" 2>&1 \
        || { tail -n 20 "$out/grid-$t.log"; fail "upstream llama-quantize --tensor-type blk.3.ffn_down.weight=$t"; }
    "$fixtures" candidates "$data/shards/smol" "$out/grid-$t.gguf" "$out/cand-grid/$t" blk.3.ffn_down.weight >/dev/null
    rm -f "$out/grid-$t.gguf"
done
gridsweep() { # OUT.csv LOG ARGS...
    local csv=$1 log=$2; shift 2
    "$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$first" --kl-divergence-base "$out/rows.csv.base-logits" \
        --include '^blk\.3\.ffn_down\.weight$' --csv "$csv" -c 128 -b 128 --chunks 1 -t 2 --plain "$@" >"$log" 2>&1
}
rm -f "$out/grid-file.csv" "$out/grid-mem.csv" "$out/grid-noim.csv"
gridsweep "$out/grid-file.csv" "$out/grid-file.log" --candidates "$out/cand-grid" || { tail -n 20 "$out/grid-file.log"; fail "sweep over the grid candidate files"; }
gridsweep "$out/grid-mem.csv" "$out/grid-mem.log" --quantize "${grid// /,}" --imatrix "$out/im.gguf" \
    || { tail -n 20 "$out/grid-mem.log"; fail "in-memory sweep of the grid types with --imatrix"; }
gridsweep "$out/grid-noim.csv" "$out/grid-noim.log" --quantize "${grid// /,}" \
    || { tail -n 20 "$out/grid-noim.log"; fail "in-memory sweep of the grid types without an imatrix"; }
python3 - "$out/grid-file.csv" "$out/grid-mem.csv" "$out/grid-noim.csv" "$grid" <<'PY'
import csv, sys
files = {r["file"].split("/")[-2]: r for r in csv.DictReader(open(sys.argv[1]))}
mem = {r["type"]: r for r in csv.DictReader(open(sys.argv[2]))}
noim = {r["type"]: r for r in csv.DictReader(open(sys.argv[3]))}
types = sys.argv[4].split()
assert sorted(files) == sorted(types) and sorted(mem) == sorted(types) and sorted(noim) == sorted(types), (files.keys(), mem.keys(), noim.keys())
klds = []
for t in types:
    f, m = files[t], mem[t]
    assert f["status"] == "ok" and m["status"] == "ok", (t, f, m)
    assert m["type"] == t and m["file"] == "(quantized in memory)", m
    for col in ("tensor", "type", "bytes", "ppl", "kld", "top1"):
        assert f[col] == m[col], (t, col, f[col], m[col])
    n = noim[t]
    if t == "iq3_s":
        assert n["status"] == "ok" and n["kld"] != m["kld"], ("iq3_s without an imatrix", n, m["kld"])
    else:
        assert n["status"] != "ok" and "needs an importance matrix with an entry for 'blk.3.ffn_down.weight'" in n["reason"], (t, n)
    klds.append(f"{t} {float(m['kld']):.6f}")
print("grid types in memory with --imatrix = upstream's llama-quantize files (bytes, PPL, KLD, top-1); KLD: " + ", ".join(klds))
print("without --imatrix: iq3_s an ok row, the other six refused as llama-quantize refuses them")
PY
fx="$(bash scripts/upstream-arch-fixtures.sh)"
for arch in deepseek2 glm4moe gpt-oss; do
    rm -f "$out/moe-$arch.csv"*
    "$ROOT/target/release/llama-hotswap-perplexity" sweep -m "$fx/$arch-moe.gguf" -f "$out/text.txt" \
        --quantize q8_0,q4_0 --include '^blk\.1\.ffn_down_exps\.weight$' --csv "$out/moe-$arch.csv" \
        -c 64 -b 64 --chunks 1 -t 2 --plain >"$out/moe-$arch.log" 2>&1 \
        || { tail -n 20 "$out/moe-$arch.log"; fail "sweep round on the $arch fixture"; }
    python3 - "$out/moe-$arch.csv" "$out/moe-$arch.log" "$arch" <<'PY'
import csv, re, sys
rows = {r["type"]: r for r in csv.DictReader(open(sys.argv[1]))}
base = float(re.search(r"^sweep: base PPL = (\S+)", open(sys.argv[2]).read(), re.M).group(1))
assert sorted(rows) == ["q4_0", "q8_0"], rows.keys()
n = None
for t, block_bytes in (("q8_0", 34), ("q4_0", 18)):
    r = rows[t]
    assert r["status"] == "ok" and r["tensor"] == "blk.1.ffn_down_exps.weight", r
    n = int(r["bytes"]) // block_bytes * 32 if n is None else n
    assert int(r["bytes"]) == n // 32 * block_bytes, (t, r["bytes"], n)
    assert float(r["ppl"]) != base, (t, "the swap did not change the PPL", r["ppl"], base)
print(f"{sys.argv[3]} fixture: blk.1.ffn_down_exps ({n} values) in Q8_0 PPL {float(rows['q8_0']['ppl']):.4f}, "
      f"Q4_0 {float(rows['q4_0']['ppl']):.4f} (base {base:.4f}); restores hash-checked")
PY
done
say "sweep: ok"
