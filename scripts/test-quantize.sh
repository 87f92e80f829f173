#!/usr/bin/env bash
# llama_model_quantize against upstream's llama-quantize, byte for byte, on an F16 copy of
# SmolLM2 (tests/quantize_upstream.rs, release build). QUANT_TYPES picks the ftypes (default:
# one of each family, to keep CI inside its time; QUANT_TYPES=all runs every type the test knows).
. "$(dirname "$0")/test-common.sh"
types="${QUANT_TYPES:-F16,BF16,Q8_0,Q4_0,Q5_1,Q4_K_M,Q6_K,IQ4_XS,TQ2_0,MXFP4_MOE}"
[ "$types" = all ] && unset QUANT_TYPES || export QUANT_TYPES="$types"
cargo test --release --test quantize_upstream -- --ignored --exact smollm2_every_type_is_byte_identical smollm2_tensor_quantizer_matches_upstream_files
