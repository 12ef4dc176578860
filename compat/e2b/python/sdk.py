"""Runs the published `e2b` Python SDK, unmodified, against SPACE (driven by
compat/e2b/python_test.go). Usage: sdk.py SECTION, with E2B_API_URL,
E2B_SANDBOX_URL, E2B_API_KEY and E2B_TEMPLATE set. Each check prints a line;
the first failure exits non-zero."""

import glob
import json
import os
import signal
import socket
import sys
import time
import uuid

from e2b import CommandExitException, NotFoundException, Sandbox, SandboxException, SandboxQuery, Template
from e2b.sandbox.commands.command_handle import PtySize

TEMPLATE = os.environ.get("E2B_TEMPLATE", "minimal")
TAG = "py-" + uuid.uuid4().hex[:8]


def check(cond, what):
    if not cond:
        print("FAIL: " + what, flush=True)
        sys.exit(1)
    print("ok   " + what, flush=True)


def eq(got, want, what):
    check(got == want, f"{what}: got {got!r}, want {want!r}")


def raises(fn, exc, what):
    names = "/".join(x.__name__ for x in (exc if isinstance(exc, tuple) else (exc,)))
    try:
        fn()
    except exc as e:
        print(f"ok   {what}: {type(e).__name__}", flush=True)
        return e
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__} {e}, want {names}")
    check(False, f"{what}: no exception, want {names}")


def wait_for(fn, what, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(0.2)
    check(False, what + " (timed out)")


def commands(sbx):
    r = sbx.commands.run("echo out; echo err >&2")
    eq((r.stdout, r.stderr, r.exit_code), ("out\n", "err\n", 0), "run")
    e = raises(lambda: sbx.commands.run("exit 3"), CommandExitException, "non-zero exit")
    eq(e.exit_code, 3, "exit code of the exception")
    eq(sbx.commands.run("echo $GREETING", envs={"GREETING": "hi"}).stdout, "hi\n", "envs")
    eq(sbx.commands.run("pwd", cwd="/tmp").stdout, "/tmp\n", "cwd")
    chunks = []
    sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=chunks.append)
    eq("".join(chunks), "1\n2\n3\n", "on_stdout streamed")
    h = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "text\n")
    eq(h.wait().stdout, "got text\n", "stdin of a background command")
    h = sbx.commands.run("sleep 300", background=True)
    check(any(p.pid == h.pid for p in sbx.commands.list()), "background command listed")
    check(sbx.commands.kill(h.pid), "kill")
    wait_for(lambda: not any(p.pid == h.pid for p in sbx.commands.list()), "killed command gone")


def pty(sbx):
    h = sbx.pty.create(PtySize(rows=24, cols=80), timeout=60)
    data = []
    sbx.pty.send_stdin(h.pid, b"echo pty-$((6*7))\n")
    sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(h.pid, b"stty size; exit\n")
    h.wait(on_pty=data.append)
    text = b"".join(data).decode(errors="replace")
    check("pty-42" in text, f"pty output {text[-200:]!r}")
    check("30 100" in text, "resize seen by stty")


def files(sbx):
    info = sbx.files.write("/home/user/a.txt", "hello")
    eq(info.path, "/home/user/a.txt", "write")
    eq(sbx.files.read("/home/user/a.txt"), "hello", "read text")
    sbx.files.write("/home/user/b.bin", b"\x00\xff")
    eq(bytes(sbx.files.read("/home/user/b.bin", format="bytes")), b"\x00\xff", "read bytes")
    sbx.files.write_files([{"path": "/home/user/d/one", "data": "1"}, {"path": "/home/user/d/two", "data": "2"}])
    eq(sorted(e.name for e in sbx.files.list("/home/user/d")), ["one", "two"], "write_files and list")
    check(sbx.files.exists("/home/user/a.txt"), "exists")
    check(not sbx.files.exists("/home/user/nope"), "not exists")
    eq(sbx.files.get_info("/home/user/a.txt").size, 5, "get_info size")
    sbx.files.rename("/home/user/a.txt", "/home/user/c.txt")
    eq(sbx.files.read("/home/user/c.txt"), "hello", "rename")
    check(sbx.files.make_dir("/home/user/newdir"), "make_dir")
    sbx.files.remove("/home/user/c.txt")
    check(not sbx.files.exists("/home/user/c.txt"), "remove")
    raises(lambda: sbx.files.read("/home/user/missing"), NotFoundException, "read of a missing file")


def lifecycle(sbx):
    items = Sandbox.list(query=SandboxQuery(metadata={"suite": TAG})).next_items()
    eq([s.sandbox_id for s in items], [sbx.sandbox_id], "list by metadata")
    info = sbx.get_info()
    eq(info.sandbox_id, sbx.sandbox_id, "get_info id")
    eq(info.metadata.get("suite"), TAG, "get_info metadata")
    check(sbx.is_running(), "is_running")
    sbx.set_timeout(240)
    end = sbx.get_info().end_at.timestamp()
    check(200 < end - time.time() <= 250, f"set_timeout moved the end to {end - time.time():.0f}s from now")
    metrics = sbx.get_metrics()
    check(isinstance(metrics, list), "get_metrics")
    sbx.files.write("/home/user/kept.txt", "still here")
    check(sbx.pause(), "pause")
    eq(sbx.get_info().state, "paused", "state after pause")
    again = Sandbox.connect(sbx.sandbox_id, timeout=300)
    eq(again.get_info().state, "running", "state after connect")
    eq(again.files.read("/home/user/kept.txt"), "still here", "file after resume")
    sbx.files.write("/home/user/snap.txt", "in the snapshot")
    snap = sbx.create_snapshot()
    listed = Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()
    check(any(s.snapshot_id == snap.snapshot_id for s in listed), "list_snapshots")
    child = Sandbox.create(snap.snapshot_id, timeout=120)
    try:
        eq(child.files.read("/home/user/snap.txt"), "in the snapshot", "sandbox from the snapshot")
    finally:
        child.kill()
    check(Sandbox.delete_snapshot(snap.snapshot_id), "delete_snapshot")
    sbx.files.write("/home/user/fork.txt", "from the parent")
    forks = sbx.fork(timeout=120)
    for f in forks:
        check(not isinstance(f, Exception), f"fork: {f!r}")
        try:
            eq(f.files.read("/home/user/fork.txt"), "from the parent", "file in the fork")
        finally:
            f.kill()
    victim = Sandbox.create(TEMPLATE, timeout=60)
    check(victim.kill(), "kill")
    check(not Sandbox.kill(victim.sandbox_id), "kill again")
    raises(lambda: Sandbox.get_info(victim.sandbox_id), NotFoundException, "get_info after kill")
    raises(lambda: Sandbox.connect("doesnotexist0000000000000"), (NotFoundException, SandboxException), "connect to a missing sandbox")


def network(sbx):
    closed = Sandbox.create(TEMPLATE, timeout=60, allow_internet_access=False)
    try:
        net = closed.get_info().network
        check(net is not None and "0.0.0.0/0" in (net.get("deny_out") or []), f"no internet access in get_info: {net!r}")
        closed.update_network({"allow_out": ["1.1.1.1"], "deny_out": ["0.0.0.0/0"]})
        net = closed.get_info().network
        allowed = net.get("allow_out") or []
        check("1.1.1.1/32" in allowed or "1.1.1.1" in allowed, f"update_network: {net!r}")
    finally:
        closed.kill()


def fields(sbx):
    """The request fields SPACE once ignored, now read or refused by name
    (docs/e2b-api.md), and a route SPACE lacks refused rather than 404."""
    e = raises(lambda: sbx.update_network({"dns_servers": ["1.1.1.1"]}), Exception, "update_network dns_servers refused")
    check("network.dnsServers" in str(e), f"the refusal names network.dnsServers: {e}")
    sbx.files.write("/home/user/fs.txt", "on disk")
    snap = sbx.create_snapshot(mode="filesystem")
    child = Sandbox.create(snap.snapshot_id, timeout=120)
    try:
        eq(child.files.read("/home/user/fs.txt"), "on disk", "sandbox from a filesystem snapshot")
    finally:
        child.kill()
    check(Sandbox.delete_snapshot(snap.snapshot_id), "delete the filesystem snapshot")
    if sbx.get_info().metadata.get("space.runtime") == "ns":
        e = raises(lambda: sbx.create_snapshot(mode="full"), Exception, "full snapshot on ns refused")
        check("snapshot memory true" in str(e), f"the refusal names the snapshot's memory: {e}")
    check(sbx.pause(strict=True), "pause(strict=True) of a healthy sandbox")
    eq(sbx.get_info().state, "paused", "state after the strict pause")
    Sandbox.connect(sbx.sandbox_id, timeout=300)
    check(Template.exists(TEMPLATE), "Template.exists of a SPACE template")
    check(not Template.exists(TEMPLATE + "-no-such"), "Template.exists of a free name")


def guest_daemon_pid(marker):
    """The host pid of the ns sandbox's guest daemon: the init (pid 1) of a
    pid namespace whose root holds marker. The test runs as root on the
    sandbox's host."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                nspid = next((l.split()[1:] for l in f if l.startswith("NSpid:")), [])
            if len(nspid) >= 2 and nspid[-1] == "1" and os.path.exists(f"/proc/{pid}/root{marker}"):
                found.append(int(pid))
        except OSError:
            continue
    eq(len(found), 1, f"guest daemons holding {marker}")
    return found[0]


def qmp(sbx, command):
    """Runs one QMP command on the QEMU of the vm sandbox sbx, through the
    QMP socket in its execution's directory under the server's data
    directory (SPACE_DATA_DIR; internal/driver/vm/driver.go's layout), as
    an operator on the host would. The driver opens QMP only for its own
    steps, so the socket is free between them."""
    data = os.environ.get("SPACE_DATA_DIR")
    check(bool(data), "SPACE_DATA_DIR is set (python_test.go sets it)")
    dirs = []
    for st in glob.glob(os.path.join(data, "**", "exec", "*", "state.json"), recursive=True):
        with open(st) as f:
            if json.load(f).get("sandbox_id") == sbx.sandbox_id:
                dirs.append(os.path.dirname(st))
    eq(len(dirs), 1, f"vm executions of sandbox {sbx.sandbox_id} under {data}")
    # The directory's path may exceed sun_path's 108 bytes: reach the
    # socket through a descriptor of the directory, as the driver does.
    fd = os.open(dirs[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(f"/proc/self/fd/{fd}/qmp.sock")
    finally:
        os.close(fd)
    with s, s.makefile("rwb") as f:
        def execute(name):
            f.write(json.dumps({"execute": name}).encode() + b"\n")
            f.flush()
            while True:
                m = json.loads(f.readline())
                if "return" in m:
                    return m["return"]
                check("error" not in m, f"QMP {name}: {m.get('error')}")
        check("QMP" in json.loads(f.readline()), "QMP greets")
        execute("qmp_capabilities")
        return execute(command)


def hang(sbx):
    """Makes sbx's guest agent really hang from the host and returns the
    function that lets it run again. ns: its guest daemon stopped with
    SIGSTOP. vm: the daemon is PID 1 inside the VM, so the whole guest is
    stopped, QMP `stop` of its vCPUs (the wedged guest: QEMU lives, its
    channel takes the request, nothing in the guest answers)."""
    if sbx.get_info().metadata.get("space.runtime") == "vm":
        qmp(sbx, "stop")
        eq(qmp(sbx, "query-status").get("status"), "paused", "the VM's vCPUs stopped (QMP query-status)")
        return lambda: qmp(sbx, "cont")
    marker = "/tmp/hung-" + TAG
    sbx.files.write(marker, "here")
    pid = guest_daemon_pid(marker)
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


def hung(sbx):
    """pause(strict=True) of a sandbox whose guest agent really hangs
    (hang: SIGSTOP of its guest daemon on ns, QMP stop of the VM's vCPUs on
    vm): ServiceBusyException (503, naming requireHealthyGuest) within the
    probe's 5 s, and the sandbox left running, as E2B documents; once the
    guest runs again it answers and a strict pause passes."""
    from e2b import ServiceBusyException  # not in 2.45, which runs no hung section

    eq(sbx.commands.run("echo before").stdout, "before\n", "the guest answers before it hangs")
    resume = hang(sbx)
    try:
        t0 = time.time()
        e = raises(lambda: sbx.pause(strict=True), ServiceBusyException, "pause(strict=True) of a hung guest")
        took = time.time() - t0
        check("requireHealthyGuest" in str(e) and "left running" in str(e), f"the refusal says why and what it left: {e}")
        check(took < 60, f"the refusal came after {took:.1f} s")
        eq(Sandbox.get_info(sbx.sandbox_id).state, "running", "state after the refused strict pause")
    finally:
        resume()
    eq(sbx.commands.run("echo back").stdout, "back\n", "the guest answers once it runs again")
    check(sbx.pause(strict=True), "pause(strict=True) once the guest answers")
    eq(sbx.get_info().state, "paused", "state after the strict pause")


SECTIONS = {"commands": commands, "pty": pty, "files": files, "lifecycle": lifecycle, "network": network, "fields": fields, "hung": hung}


def main():
    section = SECTIONS[sys.argv[1]]
    sbx = Sandbox.create(TEMPLATE, timeout=300, metadata={"suite": TAG})
    try:
        section(sbx)
    finally:
        try:
            sbx.kill()
        except Exception:  # noqa: BLE001
            pass
    print("done " + sys.argv[1])


if __name__ == "__main__":
    main()
