#!/usr/bin/env bash
# The Rust unit and integration tests (cargo test), output shown as is.
. "$(dirname "$0")/test-common.sh"
cargo test
