#!/usr/bin/env bash
# The C tests (scripts/test-c.sh) built with AddressSanitizer + UndefinedBehaviorSanitizer on
# the C side, linked to the normal release library, run with leak detection on. No leak
# suppressions: a leak report from inside the library is a finding to fix.
. "$(dirname "$0")/test-common.sh"
export SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
exec bash "$ROOT/scripts/test-c.sh"
