"""python-dirq in DIR: add (its send), count (its poll) as the queue grows, lock+get+remove (its
claim). dirq never fsyncs. Prints one JSON object of medians in microseconds, for the field
benchmark (bench/src/bin/field.rs), which runs this script and puts dirq beside sigbox.
Leaves its files in DIR (the caller removes them), so that no mass deletion slows what is
measured after it on the same filesystem."""
import json, os, statistics, sys, time

from dirq.queue import Queue

def median_us(n, f):
    for _ in range(3):
        f()
    t = []
    for _ in range(n):
        s = time.perf_counter(); f(); t.append(time.perf_counter() - s)
    return statistics.median(t) * 1e6

def main(d):
    out = {"count_us": {}}
    q = Queue(os.path.join(d, "q"), schema={"body": "string"})
    out["count_us"]["0"] = median_us(300, q.count)
    body = '{"type":"INFO","target":"Executor","message":"m"}'
    out["add_us"] = median_us(300, lambda: q.add({"body": body}))
    for n in (100, 1000, 10000):
        while q.count() < n:
            q.add({"body": "pending"})
        out["count_us"][str(n)] = median_us(30 if n >= 10000 else 200, q.count)
    names = []
    name = q.first()
    while name and len(names) < 303:
        names.append(name)
        name = q.next()
    def claim():
        n = names.pop()
        if q.lock(n):
            q.get(n)
            q.remove(n)
    out["claim_us"] = median_us(300, claim)
    print(json.dumps(out))

if __name__ == "__main__":
    main(sys.argv[1])
