"""`sigbox.Checkpoint.poll()` from Python on an empty inbox, beside the Rust poll and a
`subprocess` run of `sigbox poll`, in the same run and on the same mailbox.

Usage (bench/run.sh does it): python bench/py_poll.py DIR TARGET_RELEASE_DIR
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import sigbox


def pct(samples, q):
    s = sorted(samples)
    return s[max(0, min(len(s) - 1, int(len(s) * q + 0.999999) - 1))]


def main():
    parent, release = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="sigbox-bench-py-", dir=parent) as d:
        root = os.path.join(d, "signals")
        sigbox.init(root)
        rust = json.loads(
            subprocess.run([os.path.join(release, "rust_poll"), root, "5000"],
                           capture_output=True, text=True, check=True).stdout
        )
        py = []
        with sigbox.Checkpoint(root, "Executor") as cp:
            for _ in range(200):
                cp.poll()
            for _ in range(5000):
                t = time.perf_counter_ns()
                cp.poll()
                py.append((time.perf_counter_ns() - t) / 1000)
        sub = []
        # The shipped `sigbox` (bench/run.sh sets SIGBOX_BIN_DIR), else the one beside rust_poll.
        shipped = os.environ.get("SIGBOX_BIN_DIR", release)
        cmd = [os.path.join(shipped, "sigbox"), "--root", root, "poll", "--as", "Planner", "--discard"]
        for _ in range(200):
            t = time.perf_counter_ns()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            sub.append((time.perf_counter_ns() - t) / 1000)
        p50, p99 = pct(py, 0.5), pct(py, 0.99)
        s50, s99 = pct(sub, 0.5), pct(sub, 0.99)
        print("| operation | Rust poll p50 / p99 | Python p50 / p99 | ratio p50 | subprocess `sigbox poll` p50 / p99 | subprocess / Python p50 | target |")
        print("|---|---|---|---|---|---|---|")
        print(
            f"| `Checkpoint.poll()` on an empty inbox | {rust['p50_us']:.1f} us / {rust['p99_us']:.1f} us "
            f"| {p50:.1f} us / {p99:.1f} us | {p50 / rust['p50_us']:.2f}x "
            f"| {s50:.0f} us / {s99:.0f} us | {s50 / p50:.0f}x "
            f"| within 1.3x of Rust plus a few us; 100x faster than the subprocess |"
        )


if __name__ == "__main__":
    main()
