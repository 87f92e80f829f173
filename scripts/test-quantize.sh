#!/usr/bin/env bash
# llama_model_quantize against upstream's llama-quantize, byte for byte, on an F16 copy of
# SmolLM2 (tests/quantize_upstream.rs, release build). QUANT_TYPES picks the ftypes (default:
# one of each family, to keep CI inside its time; QUANT_TYPES=all runs every type the test knows).
# The grid IQ types (IQ1_S/M, IQ2_XXS/XS/S, IQ3_XXS/S) run with an imatrix from upstream's
# llama-imatrix on a 3-layer --pure cut of the model (smollm2_grid_iq_types_are_byte_identical).
# A model split in three files by llama-gguf-split as input, one output and --keep-split's three
# (split_input_is_byte_identical). NVFP4 as per-tensor overrides, the only way upstream's
# llama-quantize writes it, and its file type refused (smollm2_nvfp4_overrides_are_byte_identical).
# The options (--pure, --output-tensor-type, --token-embedding-type, --tensor-type,
# --prune-layers, --leave-output-tensor: smollm2_options_are_byte_identical) and every
# test-llama-archs fixture in Q4_K_M, Q8_0 and MXFP4_MOE (architecture_fixtures_are_byte_identical).
# Upstream's llama-eval-callback on both libraries: the same tensor names, types, ops, shapes
# and values (scripts/eval-callback-check.sh).
. "$(dirname "$0")/test-common.sh"
types="${QUANT_TYPES:-F16,BF16,Q8_0,Q4_0,Q5_1,Q4_K_M,Q6_K,IQ4_XS,TQ2_0,MXFP4_MOE,IQ2_XXS,IQ2_XS,IQ2_M,IQ3_XXS,IQ3_S,IQ1_S,IQ1_M}"
[ "$types" = all ] && unset QUANT_TYPES || export QUANT_TYPES="$types"
status=0
cargo test --release --test quantize_upstream -- --ignored --exact smollm2_every_type_is_byte_identical smollm2_tensor_quantizer_matches_upstream_files \
    smollm2_grid_iq_types_are_byte_identical split_input_is_byte_identical \
    smollm2_nvfp4_overrides_are_byte_identical smollm2_options_are_byte_identical \
    architecture_fixtures_are_byte_identical || status=1
bash scripts/eval-callback-check.sh || status=1
exit $status
