#!/usr/bin/env bash
# README.md's status table is true (see scripts/check_status.py).
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_library
python3 scripts/check_status.py README.md "$LIB" "$WORK/status"
