# Sourced by the decode benchmarks (scripts/bench-decode.sh, scripts/bench-decode-native.sh):
# the benchmark models by name, made on first use and cached. Needs scripts/env.sh sourced and
# $out (a work directory for llama-quantize's logs).
#   smollm2-q4_1: SmolLM2-135M as shipped; smollm2-TYPE: it requantized to TYPE by upstream's
#       llama-quantize (Q4_0, Q8_0, F16, BF16, Q4_K_M, Q6_K, IQ4_XS, ...);
#   1b-f16: a generated 1.07 B-parameter llama with random weights (scripts/gen_bench_model.py),
#       1b-TYPE its requantizations;
#   moe-TYPE: a generated qwen3moe-shaped model, 64 experts, 8 used (gen_bench_model.py moe,
#       ~0.5 GB F16), requantized to TYPE.
smollm2="${smollm2:-$(bash scripts/fetch-models.sh)}"
need_tools() { tools="${tools:-$(bash scripts/build-upstream-tools.sh llama-quantize)}"; }
# requantize SRC DST TYPE: upstream's llama-quantize, cached (written aside, renamed in place)
requantize() {
    [ -s "$2" ] && return 0
    need_tools
    LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize "$1" "$2.tmp" "$3" \
        >"$out/quantize-$(basename "$2").log" 2>&1 || { tail -5 "$out/quantize-$(basename "$2").log" >&2; return 1; }
    mv "$2.tmp" "$2"
}
model_path() { # NAME -> path (making it when missing)
    local name=$1 t
    case "$name" in
        smollm2-q4_1) echo "$smollm2" ;;
        smollm2-*)
            t=${name#smollm2-}; t=${t^^}
            local f="$LLAMA_HOTSWAP_CACHE/models/engine/SmolLM2-135M-Instruct.$t.gguf"
            mkdir -p "$(dirname "$f")"
            requantize "$smollm2" "$f" "$t" && echo "$f" ;;
        moe-*)
            local dir="$LLAMA_HOTSWAP_CACHE/models/bench" f16
            f16="$dir/qwen3moe-1024.F16.gguf"
            mkdir -p "$dir"
            [ -s "$f16" ] || bash scripts/setup-venv.sh >/dev/null
            [ -s "$f16" ] || "$VENV/bin/python" scripts/gen_bench_model.py "$smollm2" "$f16" moe >&2
            t=${name#moe-}; t=${t^^}
            if [ "$t" = F16 ]; then echo "$f16"; else
                requantize "$f16" "$dir/qwen3moe-1024.$t.gguf" "$t" && echo "$dir/qwen3moe-1024.$t.gguf"; fi ;;
        1b-*)
            local dir="$LLAMA_HOTSWAP_CACHE/models/bench" f16
            f16="$dir/llama-1B.F16.gguf"
            mkdir -p "$dir"
            [ -s "$f16" ] || bash scripts/setup-venv.sh >/dev/null
            [ -s "$f16" ] || "$VENV/bin/python" scripts/gen_bench_model.py "$smollm2" "$f16" >&2
            t=${name#1b-}; t=${t^^}
            if [ "$t" = F16 ]; then echo "$f16"; else
                requantize "$f16" "$dir/llama-1B.$t.gguf" "$t" && echo "$dir/llama-1B.$t.gguf"; fi ;;
        *) echo "unknown model $name" >&2; return 1 ;;
    esac
}
