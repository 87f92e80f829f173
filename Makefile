# llama-hotswap — build, header, install, demo and tests.
# Quick start on a fresh machine:  make demo   |   make test
SHELL := /bin/bash
PREFIX ?= /usr/local
DESTDIR ?=
CARGO ?= cargo
CACHE_ENV := . scripts/env.sh
RELEASE_DIR := target/release
LIB := $(RELEASE_DIR)/libllama.so
# The llama.cpp version whose API this library mirrors (llama_version() reports the same).
LLAMA_PC_VERSION := 0.5.0-dev
TEST_PARTS := rust cuda-mock header abi symbols c asan valgrind python differential tokenizer chat sampling grammar engine status perplexity sweep programs quantize rpc

.PHONY: all build header tools install demo test setup $(addprefix test-,$(TEST_PARTS))
all: build

# cbindgen, pinned, installed into the cache's cargo root when missing.
tools:
	@bash scripts/install-tools.sh

build:
	$(CARGO) build --release --lib

header: tools
	@$(CACHE_ENV); "$$LLAMA_HOTSWAP_CACHE/bin/cbindgen" --config cbindgen.toml --quiet --output include/llama.h .

# Installs like llama.cpp: lib/libllama.so.0 (the SONAME) with a libllama.so link,
# include/llama.h and lib/pkgconfig/llama.pc, and bin/llama-hotswap-perplexity.  `make install PREFIX=$HOME/.local`
install: build
	$(CARGO) build --release --bin llama-hotswap-perplexity
	install -d "$(DESTDIR)$(PREFIX)/lib/pkgconfig" "$(DESTDIR)$(PREFIX)/include" "$(DESTDIR)$(PREFIX)/bin"
	install -m 755 $(LIB) "$(DESTDIR)$(PREFIX)/lib/libllama.so.0"
	install -m 755 $(RELEASE_DIR)/llama-hotswap-perplexity "$(DESTDIR)$(PREFIX)/bin/llama-hotswap-perplexity"
	ln -sfn libllama.so.0 "$(DESTDIR)$(PREFIX)/lib/libllama.so"
	install -m 644 include/llama.h "$(DESTDIR)$(PREFIX)/include/llama.h"
	printf '%s\n' \
	    'prefix=$(PREFIX)' \
	    'exec_prefix=$${prefix}' \
	    'libdir=$${exec_prefix}/lib' \
	    'includedir=$${prefix}/include' \
	    '' \
	    'Name: llama' \
	    'Description: llama-hotswap: drop-in libllama with tensor hot-swap' \
	    'Version: $(LLAMA_PC_VERSION)' \
	    'Libs: -L$${libdir} -lllama' \
	    'Cflags: -I$${includedir}' \
	    >"$(DESTDIR)$(PREFIX)/lib/pkgconfig/llama.pc"

# The demo program is scripts/demo.sh (maintained with the demo itself).
demo: build
	@if [ -f scripts/demo.sh ]; then \
	    bash scripts/demo.sh; \
	else \
	    echo "make demo: scripts/demo.sh does not exist yet (the demo has not landed)." >&2; \
	    exit 1; \
	fi

# Installs what the tests need into the cache (idempotent): pinned cbindgen, the Python venv,
# upstream llama.cpp sources and its CPU library (the oracle).
setup:
	@bash scripts/install-tools.sh
	@bash scripts/setup-venv.sh >/dev/null
	@bash scripts/fetch-upstream.sh >/dev/null
	@bash scripts/build-upstream.sh >/dev/null

# Every part; ends with "N passed, N failed[, N skipped]" and fails if any part failed.
test:
	@bash scripts/test-all.sh $(TEST_PARTS)

# One part each: make test-abi, make test-c, ...
$(addprefix test-,$(TEST_PARTS)):
	@bash scripts/$@.sh

# Benchmarks (not tests): ours vs upstream in the same run; newest runs in docs/benchmarks.md.
.PHONY: bench-load
bench-load:
	bash scripts/bench-load.sh

# Tokenizer throughput on ≥ 1 MiB of mixed text, ours vs upstream (SPM, llama-bpe, qwen2, WPM).
.PHONY: bench-tokenize
bench-tokenize:
	bash scripts/bench-tokenize.sh

# Decode speed (pp128, tg64), ours vs upstream, SmolLM2-135M and a generated 1B llama in several
# types, 1 and 2 threads; BENCH_REPS, BENCH_MODELS, BENCH_THREADS: see scripts/bench-decode.sh.
.PHONY: bench-decode
bench-decode:
	bash scripts/bench-decode.sh

# Issue 39's benchmark: llama-bench pp128/pp512/tg64 of upstream built for this CPU (native, AMX
# off), the same program on our library (fast and exact mode) and ik_llama.cpp (pinned; sources
# from IK_LLAMA_GIT_DIR, skipped without), interleaved rounds. Benchmark only: the two extra
# builds go into the cache on first use (~15 min each on 2 cores); see scripts/bench-decode-native.sh.
.PHONY: bench-decode-native
bench-decode-native:
	bash scripts/bench-decode-native.sh

# Upload bandwidth to the first CUDA device: fill_from_file vs a raw pinned copy, the host floor,
# a pageable write and model loads with every layer on the GPU (skips without
# a GPU); see examples/bench_upload.rs.
.PHONY: bench-upload
bench-upload:
	BENCH_UPLOAD_MODEL=1 $(CARGO) run --release --example bench_upload

# Hot-swap reload path (poll, 64 MiB reload vs pread and vs a full reload, RSS over 1,000
# oscillations); see scripts/bench-hotswap.sh.
.PHONY: bench-hotswap
bench-hotswap:
	bash scripts/bench-hotswap.sh

# Devices on upstream's rpc-server (one local server): pp/tg remote vs local, both libraries,
# and a 64 MiB tensor's hot-swap remote vs local; see scripts/bench-rpc.sh.
.PHONY: bench-rpc
bench-rpc:
	bash scripts/bench-rpc.sh

# Every cargo-fuzz target for FUZZ_SECONDS (default 30) each, ASan on nightly (not a test part:
# the instrumented build takes minutes; `cargo test` replays the harnesses).
.PHONY: fuzz-smoke
fuzz-smoke:
	bash scripts/fuzz-smoke.sh

# One quantization-sweep round (swap + evaluate + swap back) vs the evaluation alone and vs a
# full reload (ours and upstream's llama-perplexity), SmolLM2 in one-tensor shards.
.PHONY: bench-sweep
bench-sweep:
	bash scripts/bench-sweep.sh

# A whole model's full-precision weights pushed into a loaded model (llama_ext_tensors_push)
# vs llama_model_quantize of the same weights into a file; goal push <= 1.2x.
.PHONY: bench-push
bench-push:
	bash scripts/bench-push.sh
