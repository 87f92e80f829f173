#!/usr/bin/env bash
# llama-cpp-python's ctypes bindings (pinned sdist, unpacked in the cache) loading our
# library: `import llama_cpp` must work and llama_max_devices() print 16, then a few more
# calls (tests/python/test_import_llama_cpp.py).
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_venv
need_library
export PYTHONPATH="$UPSTREAM_DIR${PYTHONPATH:+:$PYTHONPATH}"
export LLAMA_CPP_LIB_PATH="$RELEASE_DIR"
py="$VENV/bin/python"
status=0

# The symbol check runs first so a failing import is explained by the list of missing names.
# The library's log goes to stderr: kept in a file, shown only on failure.
log="$WORK/test-python.log"
if "$py" tests/python/test_import_llama_cpp.py >"$log" 2>&1; then
    say "$(grep -c '^ok ' "$log") python checks ok: $(tail -n 1 "$log") (full output: $log)"
else
    status=1
    tail -n 80 "$log"
fi

if out="$("$py" -c 'import llama_cpp; print(llama_cpp.llama_max_devices())' 2>&1)" \
    && [ "$(printf '%s\n' "$out" | tail -n 1)" = 16 ]; then
    say "ok   python -c 'import llama_cpp; print(llama_cpp.llama_max_devices())' -> 16"
else
    say "FAIL python -c 'import llama_cpp; print(llama_cpp.llama_max_devices())':"
    printf '%s\n' "$out" | tail -n 8
    status=1
fi

# End to end on the real model: Llama(...).eval and create_completion, ours vs upstream's
# library, each in its own process (tests/python/test_eval_llama_cpp.py).
need_upstream_lib
model="$(bash scripts/fetch-models.sh)"
if out="$("$py" tests/python/test_eval_llama_cpp.py "$model" "$RELEASE_DIR" "$UPSTREAM_BUILD/bin" \
    "$WORK/python-eval" 2>&1)"; then
    say "ok   Llama(SmolLM2).eval + create_completion, ours vs upstream:"
    printf '%s\n' "$out" | sed 's/^/     /'
else
    say "FAIL Llama(SmolLM2).eval + create_completion, ours vs upstream:"
    printf '%s\n' "$out" | tail -n 20
    status=1
fi
# A vocab-only model: Llama(model_path, vocab_only=True) constructs as on upstream's library
# (tests/python/test_vocab_only_llama_cpp.py).
if out="$("$py" tests/python/test_vocab_only_llama_cpp.py "$model" "$RELEASE_DIR" "$UPSTREAM_BUILD/bin" \
    "$WORK/python-vocab-only" 2>&1)"; then
    say "ok   $out"
else
    say "FAIL Llama(SmolLM2, vocab_only=True), ours vs upstream:"
    printf '%s\n' "$out" | tail -n 20
    status=1
fi

# llama-cpp-python's create_completion (greedy; temperature 0.8 with seed 42) and
# create_chat_completion with response_format json_object / a JSON schema, ours vs upstream's
# library: the same tokens, texts and logits rows (bit-identical)
# (tests/python/test_completion_llama_cpp.py).
if out="$("$py" tests/python/test_completion_llama_cpp.py "$model" "$RELEASE_DIR" "$UPSTREAM_BUILD/bin" \
    "$WORK/python-completion" 2>&1)"; then
    say "ok   Llama(SmolLM2).create_completion (greedy, seeded) + create_chat_completion (JSON), ours vs upstream:"
    printf '%s\n' "$out" | sed 's/^/     /'
else
    say "FAIL Llama(SmolLM2).create_completion / create_chat_completion, ours vs upstream:"
    printf '%s\n' "$out" | tail -n 20
    status=1
fi
# Llama.save_state / load_state (tests/python/test_state_llama_cpp.py): the same next
# logits after a restore, equal state bytes and logits with upstream's library, and each
# library loading the other's state.
if out="$("$py" tests/python/test_state_llama_cpp.py "$model" "$RELEASE_DIR" "$UPSTREAM_BUILD/bin" \
    "$WORK/python-state" 2>&1)"; then
    say "ok   $out"
else
    say "FAIL Llama(SmolLM2).save_state / load_state, ours vs upstream:"
    printf '%s\n' "$out" | tail -n 20
    status=1
fi
# Llama(lora_path=...) (tests/python/test_lora_llama_cpp.py): a random rank-8 adapter
# (scripts/make_lora.py) at scales 1 and 0.5 moves the logits as upstream's library does.
adapter="$WORK/python-lora/smollm2-lora.gguf"
mkdir -p "$WORK/python-lora"
[ -s "$adapter" ] || "$py" scripts/make_lora.py "$model" "$adapter" >/dev/null
if out="$("$py" tests/python/test_lora_llama_cpp.py "$model" "$adapter" "$RELEASE_DIR" "$UPSTREAM_BUILD/bin" \
    "$WORK/python-lora" 2>&1)"; then
    say "ok   $out"
else
    say "FAIL Llama(SmolLM2, lora_path=...), ours vs upstream:"
    printf '%s\n' "$out" | tail -n 20
    status=1
fi
exit "$status"
