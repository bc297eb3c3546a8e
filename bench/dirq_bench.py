"""python-dirq on the same filesystem: add (its send), count (its poll), lock+get+remove (its
claim). dirq never fsyncs. Prints markdown rows like the field benchmark's."""
import os, statistics, sys, tempfile, time

from dirq.queue import Queue

def median_us(n, f):
    for _ in range(3):
        f()
    t = []
    for _ in range(n):
        s = time.perf_counter(); f(); t.append(time.perf_counter() - s)
    return statistics.median(t) * 1e6

def main(parent):
    with tempfile.TemporaryDirectory(prefix="sigbox-dirq-", dir=parent) as d:
        q = Queue(os.path.join(d, "q"), schema={"body": "string"})
        add = median_us(300, lambda: q.add({"body": '{"type":"INFO","target":"Executor"}'}))
        print(f"| dirq add (no fsync) | {add:.1f} us |")
        for n in (100, 1000, 10000):
            while q.count() < n:
                q.add({"body": "pending"})
            c = median_us(30 if n >= 10000 else 200, q.count)
            print(f"| dirq count, {n} queued | {c:.1f} us |")
        names = []
        name = q.first()
        while name and len(names) < 300:
            names.append(name)
            name = q.next()
        def claim():
            n = names.pop()
            if q.lock(n):
                q.get(n)
                q.remove(n)
        c = median_us(250, claim)
        print(f"| dirq lock+get+remove (its claim, no fsync) | {c:.1f} us |")

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
