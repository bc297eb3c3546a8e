#!/usr/bin/env bash
# Runs every benchmark side by side on one filesystem and prints their markdown tables, after a
# summary: the machine, then every row with a bound, its ratio beside its target, met or missed.
# Usage: bench/run.sh [DIR]   (DIR: where the test mailboxes go; default: the current directory)
# The tables stream to stderr while they run; stdout gets the summary first, then the tables.
#
# As root, with losetup and mkfs.ext4, it also runs the `churn` benchmark on three fresh 2 GiB
# ext4 images (no journal with discard, no journal without discard, journal with discard),
# about 10 minutes in all; set SIGBOX_BENCH_NO_CHURN=1 to skip it.
set -euo pipefail
dir="${1:-.}"
cd "$(dirname "$0")/.."
# Each shipped program on its own, as a user builds it (README, "Installing"): `cargo ship`
# (statically linked, .cargo/config.toml says why), the bridge dynamically. Built together,
# their dependencies' features would be unified, and each binary would carry the others' (the
# `sigbox` CLI 10% larger, with a start-up to match). The benchmarks last (they build only
# libraries of the others) and find the programs in SIGBOX_BIN_DIR.
for crate in sigbox-client sigbox-mcp sigbox-console; do
  cargo ship -p "$crate"
done
cargo build --release --locked --target host-tuple -p sigbox-bridge
cargo build --release -p sigbox-bench
SIGBOX_BIN_DIR="$PWD/target/$(rustc -vV | sed -n 's/^host: //p')/release"
export SIGBOX_BIN_DIR
if ! python3 -c 'import dirq' 2>/dev/null; then
  python3 -m pip install --quiet dirq 2>/dev/null || echo "(python-dirq could not be installed: the field table goes without it)"
fi
summary="$(mktemp)"; tables="$(mktemp)"
trap 'rm -f "$summary" "$tables"' EXIT
export SIGBOX_BENCH_SUMMARY="$summary"
benches() {
  echo "## Checkpoint pass and durable send"; ./target/release/checkpoint "$dir"
  echo; echo "## Against the field"; ./target/release/field "$dir"
  echo; echo "## Waiting"; ./target/release/wait "$dir"
  echo; echo "## Stream parsers"; ./target/release/streams
  echo; echo "## Coding-agent hooks"; ./target/release/hooks "$dir"
  echo; echo "## Asking a person"; ./target/release/asks "$dir"
  echo; echo "## MCP server"; ./target/release/mcp "$dir"
  echo; echo "## Across hosts (sigbox bridge over NATS JetStream)"; ./target/release/bridge "$dir"
  echo; echo "## The console (sigbox ui)"; ./target/release/console "$dir"
  echo; echo "## Python package"
  py="${SIGBOX_PYTHON:-$PWD/target/py-tools/bin/python}"
  if "$py" -m maturin --version >/dev/null 2>&1; then
    rm -rf target/py-wheels-release
    (cd python && "$py" -m maturin build --release --quiet -o ../target/py-wheels-release -i "$py")
    "$py" -m pip install --quiet --force-reinstall --no-deps target/py-wheels-release/*.whl
    "$py" bench/py_poll.py "$dir" target/release
  else
    echo "(no Python with maturin: run .ci/run once, or set SIGBOX_PYTHON)"
  fi
  echo; echo "## Producers after mass deletions (churn)"
  if [ -n "${SIGBOX_BENCH_NO_CHURN:-}" ]; then
    echo "(skipped: SIGBOX_BENCH_NO_CHURN is set)"
  elif [ "$(id -u)" != 0 ] || ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; then
    echo "(fresh ext4 images need root, losetup and mkfs.ext4: measuring $dir as it is)"
    ./target/release/churn "$dir"
  else
    work="$(mktemp -d)"
    trap 'umount "$work"/mnt 2>/dev/null || true; rm -rf "$work"' EXIT
    mkdir "$work/mnt"
    for fs in "no journal, discard:-O ^has_journal:discard" \
              "no journal, no discard:-O ^has_journal:nodiscard" \
              "journal, discard::discard"; do
      IFS=: read -r label mkfs_opts mount_opts <<<"$fs"
      echo; echo "### ext4 image: $label"
      truncate -s 2G "$work/img"
      # shellcheck disable=SC2086 # mkfs_opts is a list of options
      mkfs.ext4 -q -F $mkfs_opts "$work/img"
      mount -o "loop,$mount_opts" "$work/img" "$work/mnt"
      ./target/release/churn "$work/mnt"
      umount "$work/mnt"
      rm -f "$work/img"
    done
  fi
}
benches 2>&1 | tee "$tables" >&2
echo "# sigbox benchmarks"
echo
echo "$(date -u +%Y-%m-%dT%H:%MZ) on $(uname -sr), $(nproc) cores, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}'),"
echo "filesystem of $dir: $(stat -f -c %T "$dir")$(findmnt -no FSTYPE,OPTIONS -T "$dir" 2>/dev/null | sed 's/^/ (/;s/$/)/')"
echo; echo "## Summary"; echo
echo "| row | ratio | target | verdict |"
echo "|---|---|---|---|"
cat "$summary"
echo
cat "$tables"
