# llama-hotswap — build, header, install, demo and tests.
# Quick start on a fresh machine:  make demo   |   make test
SHELL := /bin/bash
PREFIX ?= /usr/local
CARGO ?= cargo
CACHE_ENV := . scripts/env.sh
RELEASE_DIR := target/release
LIB := $(RELEASE_DIR)/libllama.so

.PHONY: all build header tools
all: build

# cbindgen, pinned, installed into the cache's cargo root when missing.
tools:
	@bash scripts/install-tools.sh

build:
	$(CARGO) build --release --lib

header: tools
	@$(CACHE_ENV); "$$LLAMA_HOTSWAP_CACHE/bin/cbindgen" --config cbindgen.toml --quiet --output include/llama.h .
