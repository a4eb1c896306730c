#!/usr/bin/env bash
# Runs every fuzz target for a short, fixed time: the CI smoke run of seglog's fuzzing.
#
#   fuzz/ci-smoke.sh [SECONDS_PER_TARGET]     (default 20; or FUZZ_SECONDS=N)
#
# Needs the nightly toolchain and cargo-fuzz (.ci/run installs them); without them it prints
# "SKIP: fuzz smoke: ..." and exits 0, except under CI=true, where it exits 1.
# Exits non-zero when a target finds a crash, a timeout or an out-of-memory input (the input is
# left under fuzz/artifacts/<target>/ and named in the output). Builds into $CARGO_TARGET_DIR
# (default fuzz/target); the corpus grows under fuzz/corpus/<target>/ (not checked in), seeded
# from fuzz/seeds/<target>/.
set -euo pipefail

seconds="${1:-${FUZZ_SECONDS:-20}}"
fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
targets=(batch_decode decompress recovery_scan index_load checkpoint_parse file_name_parse sim_ops)

# A smoke run that cannot run says so, and fails under CI=true (as seglog::testing::skip does).
skip() {
    echo "SKIP: fuzz smoke: $*"
    if [ "${CI:-}" = true ]; then
        echo "fuzz smoke: FAIL: under CI=true the fuzz smoke must run" >&2
        exit 1
    fi
    exit 0
}
if ! command -v cargo >/dev/null 2>&1 || ! cargo +nightly --version >/dev/null 2>&1; then
    skip "'cargo +nightly' is not available (rustup toolchain install nightly)"
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    skip "cargo-fuzz is not installed (cargo install cargo-fuzz)"
fi

target_dir="${CARGO_TARGET_DIR:-$fuzz_dir/target}"
cd "$fuzz_dir"
cargo +nightly fuzz build --target-dir "$target_dir"

failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "seeds/$target"
    echo "fuzz smoke: $target for ${seconds}s"
    log="$(mktemp)"
    if cargo +nightly fuzz run "$target" --target-dir "$target_dir" \
        "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
        >"$log" 2>&1; then
        grep -E '^stat::(number_of_executed_units|new_units_added)|^Done ' "$log" || true
    else
        grep -E -A3 'panicked at|ERROR: libFuzzer|Test unit written to|^SUMMARY' "$log" || tail -n 60 "$log"
        failed+=("$target")
    fi
    rm -f "$log"
done

if ((${#failed[@]} > 0)); then
    echo "fuzz smoke: FINDINGS in: ${failed[*]} (inputs under fuzz/artifacts/)"
    exit 1
fi
echo "fuzz smoke: ${#targets[@]} targets, ${seconds}s each, no findings"
