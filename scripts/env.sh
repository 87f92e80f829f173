# Shared settings for the scripts and the Makefile: where pinned upstream material is cached.
# Everything lives outside the checkout so a fresh clone stays clean.
: "${LLAMA_HOTSWAP_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/llama-hotswap}"
UPSTREAM_VERSION=0.3.36
UPSTREAM_DIR="$LLAMA_HOTSWAP_CACHE/llama_cpp_python-$UPSTREAM_VERSION"
UPSTREAM_LLAMA="$UPSTREAM_DIR/vendor/llama.cpp"
# One upstream build tree for the oracle library and every upstream program the tests run
# (the library alone used to have a tree of its own: ggml and libllama compiled twice).
UPSTREAM_BUILD="$LLAMA_HOTSWAP_CACHE/upstream-tools-$UPSTREAM_VERSION"
VENV="$LLAMA_HOTSWAP_CACHE/venv"
CBINDGEN_VERSION=0.29.2
export LLAMA_HOTSWAP_CACHE UPSTREAM_VERSION UPSTREAM_DIR UPSTREAM_LLAMA UPSTREAM_BUILD VENV CBINDGEN_VERSION
