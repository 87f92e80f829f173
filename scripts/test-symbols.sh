#!/usr/bin/env bash
# Exported symbols and C signatures versus upstream's llama.h; SONAME. See symbols_check.py.
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_library
python3 scripts/symbols_check.py "$LIB" include/llama.h "$WORK/symbols"
