#!/usr/bin/env python3
# burst-tree.py URL KEY N PID: N concurrent creates of minimal ns 1x256
# sandboxes through the REST API (scripts/burst.sh), with the CPU of PID's
# process tree (every thread's schedstat: server with its node, node-manager,
# bridges, guests) read just before the first request and just after the
# last answer, so the window is the burst's own (the deletes come after).
# Prints "tree_cpu_ms_per_create p50_ms p99_ms".
import json, os, sys, threading, time, urllib.request
url, key, n, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def tree_cpu():
    pids, i, s = [root], 0, 0
    while i < len(pids):
        try:
            tasks = os.listdir(f"/proc/{pids[i]}/task")
        except OSError:
            tasks = []
        for t in tasks:
            try:
                with open(f"/proc/{pids[i]}/task/{t}/children") as f:
                    pids += [int(x) for x in f.read().split()]
                with open(f"/proc/{pids[i]}/task/{t}/schedstat") as f:
                    s += int(f.read().split()[0])
            except (OSError, ValueError):
                pass
        i += 1
    return s

def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"null")

ids, lat, errs = [None] * n, [0.0] * n, []
go = threading.Barrier(n + 1)
def one(i):
    go.wait()
    t = time.monotonic()
    try:
        sb = call("POST", "/v1/sandboxes", {"template": "minimal", "runtime": "ns", "cpus": 1, "memory_mib": 256})
        ids[i] = sb["id"]
        if sb.get("state") != "running":
            errs.append(f"{sb['id']}: {sb.get('state')} {sb.get('reason', '')}")
    except Exception as e:
        errs.append(str(e))
    lat[i] = (time.monotonic() - t) * 1000
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
c0 = tree_cpu()
go.wait()
for t in threads:
    t.join()
c1 = tree_cpu()
for i in ids:
    if i:
        try:
            call("DELETE", "/v1/sandboxes/" + i)
        except Exception as e:
            errs.append(f"delete {i}: {e}")
lat.sort()
print("%.2f %.1f %.1f" % ((c1 - c0) / 1e6 / n, lat[n // 2], lat[min(n - 1, (n * 99 + 99) // 100 - 1)]))
for e in errs:
    print("error:", e, file=sys.stderr)
