#!/usr/bin/env bash
# Runs every benchmark side by side on one filesystem and prints their markdown tables.
# Usage: bench/run.sh [DIR]   (DIR: where the test mailboxes go; default: the current directory)
set -euo pipefail
dir="${1:-.}"
cd "$(dirname "$0")/.."
cargo build --release -p sigbox-client -p sigbox-bench
echo "## Checkpoint pass and durable send"; ./target/release/checkpoint "$dir"
echo; echo "## Against the field"; ./target/release/field "$dir"
echo; echo "## Waiting"; ./target/release/wait "$dir"
echo; echo "## Stream parsers"; ./target/release/streams
echo; echo "## python-dirq (same filesystem)"
if python3 -c 'import dirq' 2>/dev/null || python3 -m pip install --quiet dirq 2>/dev/null; then
  echo "| operation | median |"; echo "|---|---|"
  python3 bench/dirq_bench.py "$dir"
else
  echo "(dirq could not be installed: skipped)"
fi
