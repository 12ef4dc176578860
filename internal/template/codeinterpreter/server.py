"""SPACE's code interpreter server: what E2B's code-interpreter SDKs call on
port 49999 of a sandbox (POST /execute, /contexts ...), served with the
standard library's http.server and jupyter_client (both from Debian).

Python contexts are IPython kernels (ipykernel) driven through
jupyter_client; Bash contexts are one long-lived bash process each, fed the
code through a file and ended with a sentinel line. /execute streams one JSON
object a line as the kernel emits its messages (nothing is buffered for the
whole execution):

  {"type": "stdout"|"stderr", "text": ..., "timestamp": ...}
  {"type": "result", "text": ..., "html": ..., "png": ..., "is_main_result": bool}
  {"type": "error", "name": ..., "value": ..., "traceback": ...}
  {"type": "number_of_executions", "execution_count": N}
  {"type": "end_of_execution"}

A kernel that dies while running code is restarted (the context keeps its
id, loses its state) and the execution ends with an error saying so. A
client that goes away (the SDK's timeoutMs) interrupts the execution.

The server keeps on disk (--state) which contexts ran code. A server that
starts and finds that file left by an earlier one in the same sandbox knows
their state was lost (an ns hibernation or a stop keeps the disk, not the
memory): the first call of each such default context answers a ContextLost
error and runs nothing, and an earlier named context is 404 saying why,
never a silently empty context.
"""

import argparse
import json
import os
import queue
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 16 << 20  # bytes of one request body
MAX_CONTEXTS = 64
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# MIME types of Jupyter's display data → the fields E2B's SDKs read.
FORMATS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}

LANGUAGES = {"python": "python", "python3": "python", "bash": "bash", "sh": "bash"}

# Languages E2B's SDKs offer that the template has no kernel for.
NO_KERNEL = {"js": "JavaScript", "javascript": "JavaScript", "ts": "TypeScript", "typescript": "TypeScript",
             "deno": "Deno", "r": "R", "java": "Java"}

RESTARTED = ("the code interpreter started anew in this sandbox (it was restored or started again without its "
             "memory: an ns hibernation, a stop, or a crash of the server)")
LOST = RESTARTED + (", so this context's variables and imports are gone; this code did not run: "
                    "run it again (and what it depends on)")


class RequestError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def now_us():
    return int(time.time() * 1e6)


def result_message(data, main):
    """A Jupyter display_data/execute_result bundle as E2B's result line."""
    out = {"type": "result", "is_main_result": main}
    for mime, value in data.items():
        key = FORMATS.get(mime, mime)
        if isinstance(value, list) and key != "json":
            value = "".join(value)
        out[key] = value
    return out


def parse_execute(body):
    """Checks an /execute request: code, context_id, language, env_vars."""
    if not isinstance(body, dict):
        raise RequestError(400, "request body: want a JSON object")
    code = body.get("code")
    if not isinstance(code, str):
        raise RequestError(400, "code: want a string")
    ctx = body.get("context_id")
    lang = body.get("language")
    if ctx is not None and not isinstance(ctx, str):
        raise RequestError(400, "context_id: want a string")
    if ctx and lang:
        raise RequestError(400, "give context_id or language, not both")
    if lang is not None:
        lang = language(lang)
    envs = body.get("env_vars")
    if envs is None:
        envs = {}
    if not isinstance(envs, dict):
        raise RequestError(400, "env_vars: want an object of strings")
    for k, v in envs.items():
        if not ENV_NAME.match(k) or not isinstance(v, str) or "\x00" in v:
            raise RequestError(400, "env_vars: %r: want a name of letters, digits and _ and a string value" % k[:80])
    return code, ctx, lang, envs


def language(lang):
    if not isinstance(lang, str):
        raise RequestError(400, "language: want a string")
    name = LANGUAGES.get(lang.lower())
    if name is None and lang.lower() in NO_KERNEL:
        raise RequestError(
            400, "language %r: %s contexts are not supported by SPACE's code interpreter (its template has no "
            "%s kernel): use python or bash" % (lang, NO_KERNEL[lang.lower()], NO_KERNEL[lang.lower()]))
    if name is None:
        raise RequestError(
            400, "language %r is not supported by SPACE's code interpreter: use python or bash" % lang[:40])
    return name


class PythonContext:
    """An IPython kernel through jupyter_client."""

    language = "python"

    def __init__(self, cid, cwd, kernel_args=None):
        self.id, self.cwd = cid, cwd
        self.kernel_args = list(kernel_args or [])  # the kernel's extra command line (tests)
        self.lock = threading.Lock()
        self.km = self.kc = None
        self.start()

    def start(self):
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=self.cwd, env=dict(os.environ), extra_arguments=self.kernel_args)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def restart(self):
        self.shutdown()
        self.start()

    def shutdown(self):
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None:
                self.km.shutdown_kernel(now=True)
        except Exception:
            traceback.print_exc()

    def _silent(self, code):
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False, stop_on_error=False)
        self._drain(msg_id, lambda m: None, None)

    def execute(self, code, envs, emit, gone):
        with self.lock:
            if envs:
                self._silent("import os as __space_os\n__space_env_saved = {k: __space_os.environ.get(k) for k in %r}\n"
                             "__space_os.environ.update(%r)" % (list(envs), envs))
            try:
                # input() raises StdinNotImplementedError: nobody can answer.
                # stop_on_error=False: with jupyter_client's default, an
                # error (an interrupt's KeyboardInterrupt too) makes the
                # kernel abort every execute request that reaches it before
                # it next turns to its queue. Ours are one at a time, so the
                # one aborted is the next call's (or the env restore below):
                # under load it came back at once, busy then idle, without
                # its result.
                msg_id = self.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
                self._drain(msg_id, emit, gone)
            finally:
                if envs and self.km.is_alive():
                    self._silent("for __k, __v in __space_env_saved.items():\n"
                                 "    __space_os.environ.pop(__k, None) if __v is None else __space_os.environ.__setitem__(__k, __v)\n"
                                 "del __space_env_saved, __k, __v")

    def _drain(self, msg_id, emit, gone):
        """Relays the kernel's messages for msg_id until it is idle again."""
        ran = False  # the kernel published the code's execute_input: it ran it
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.25)
            except queue.Empty:
                if not self.km.is_alive():
                    self.restart()
                    emit({"type": "error", "name": "KernelDied",
                          "value": "the Python kernel died while running this code; the context was restarted and its state is lost",
                          "traceback": ""})
                    return
                msg = None
            if gone is not None and gone():
                # The client left (the SDK's timeoutMs): interrupt, and keep
                # draining until the kernel is idle again.
                self.km.interrupt_kernel()
                gone = None
            if msg is None or msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                emit({"type": content["name"], "text": content["text"], "timestamp": now_us()})
            elif kind == "execute_input":
                ran = True
                emit({"type": "number_of_executions", "execution_count": content.get("execution_count")})
            elif kind == "execute_result":
                emit(result_message(content["data"], True))
            elif kind == "display_data":
                emit(result_message(content["data"], False))
            elif kind == "error":
                emit({"type": "error", "name": content.get("ename", ""), "value": content.get("evalue", ""),
                      "traceback": "\n".join(content.get("traceback", []))})
            elif kind == "status" and content.get("execution_state") == "idle":
                if not ran:
                    # Busy then idle without running the code: the kernel
                    # aborted the request. Said, never an empty success.
                    emit({"type": "error", "name": "ExecutionAborted",
                          "value": "the kernel aborted this execution without running it; run it again",
                          "traceback": ""})
                return


class BashContext:
    """A long-lived bash: state (variables, functions, the directory) is kept
    across executions. Each execution sources a file of the code with stdin
    from /dev/null, then prints a sentinel with the exit status on both
    streams."""

    language = "bash"

    def __init__(self, cid, cwd):
        self.id, self.cwd = cid, cwd
        self.lock = threading.Lock()
        self.proc = None
        self.count = 0  # executions, as a kernel's execution_count
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["/bin/bash", "--noprofile", "--norc"], cwd=self.cwd, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, bufsize=0)

    def restart(self):
        self.shutdown()
        self.start()

    def shutdown(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()
        self.proc = None

    def execute(self, code, envs, emit, gone):
        with self.lock:
            self._execute(code, envs, emit, gone)

    def _execute(self, code, envs, emit, gone):
        token = "__SPACE_DONE_%s__" % secrets.token_hex(8)
        fd, path = tempfile.mkstemp(prefix=".space-exec-", suffix=".sh")
        pre, post = [], []
        for k, v in envs.items():
            quoted = "'" + v.replace("'", "'\\''") + "'"
            pre.append('if [ "${%s+set}" = set ]; then __space_o_%s=$%s; __space_s_%s=1; else __space_s_%s=0; fi; export %s=%s'
                       % (k, k, k, k, k, k, quoted))
            post.append('if [ "$__space_s_%s" = 1 ]; then export %s="$__space_o_%s"; else unset %s; fi; unset __space_o_%s __space_s_%s'
                        % (k, k, k, k, k, k))
        with os.fdopen(fd, "w") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        script = "".join(p + "\n" for p in pre)
        script += "source %s </dev/null\n__space_rc=$?\n" % path
        script += "".join(p + "\n" for p in post)
        script += "rm -f %s\nprintf '%%s %%d\\n' %s \"$__space_rc\"\nprintf '%%s\\n' %s >&2\n" % (path, token, token)
        try:
            self.proc.stdin.write(script.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        self.count += 1
        emit({"type": "number_of_executions", "execution_count": self.count})
        streams = {self.proc.stdout.fileno(): ("stdout", self.proc.stdout, bytearray()),
                   self.proc.stderr.fileno(): ("stderr", self.proc.stderr, bytearray())}
        done, marked, rc = set(), set(), None  # streams ended; of them, by the marker
        marker = token.encode()
        while len(done) < 2:
            if gone():
                # The client left (the SDK's timeoutMs): stop what runs,
                # and the shell's state with it.
                self.restart()
                return
            ready, _, _ = select.select([fd for fd in streams if fd not in done], [], [], 0.25)
            if not ready:
                if self.proc.poll() is not None:
                    break
                continue
            for fd in ready:
                name, f, buf = streams[fd]
                chunk = os.read(fd, 65536)
                if not chunk:
                    done.add(fd)
                    continue
                buf.extend(chunk)
                # Pass on what is complete; keep a tail that could be the
                # start of the marker.
                at = buf.find(marker)
                if at >= 0:
                    text, rest = bytes(buf[:at]), bytes(buf[at + len(marker):])
                    if text:
                        emit({"type": name, "text": text.decode(errors="replace"), "timestamp": now_us()})
                    if name == "stdout":
                        try:
                            rc = int(rest.split(b"\n", 1)[0].strip() or b"0")
                        except ValueError:
                            rc = None
                    buf.clear()
                    done.add(fd)
                    marked.add(fd)
                    continue
                cut = buf.rfind(b"\n") + 1
                if cut > 0:
                    emit({"type": name, "text": bytes(buf[:cut]).decode(errors="replace"), "timestamp": now_us()})
                    del buf[:cut]
                elif len(buf) > 65536:
                    emit({"type": name, "text": bytes(buf).decode(errors="replace"), "timestamp": now_us()})
                    buf.clear()
        if len(marked) < 2:
            # The shell ended without both markers: it exited.
            for name, f, buf in streams.values():
                if buf:
                    emit({"type": name, "text": bytes(buf).decode(errors="replace"), "timestamp": now_us()})
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            self.restart()
            emit({"type": "error", "name": "KernelDied",
                  "value": "bash exited (status %s) while running this code; the context was restarted and its state is lost" % code,
                  "traceback": ""})
            return
        if rc:
            emit({"type": "error", "name": "ExitCodeError", "value": "exit status %d" % rc, "traceback": ""})


class Interpreter:
    def __init__(self, default_cwd, state=None):
        self.default_cwd = default_cwd
        self.lock = threading.Lock()
        self.contexts = {}
        self.defaults = {}
        self.default_lock = threading.Lock()  # one default context a language
        # state: the file naming the contexts that ran code (see the module
        # doc); what an earlier server left there was lost.
        self.state = state
        self.ran = {"defaults": [], "contexts": []}
        self.lost = {"defaults": set(), "contexts": set()}
        if state:
            try:
                with open(state) as f:
                    old = json.load(f)
                self.lost = {k: set(v for v in old.get(k, []) if isinstance(v, str)) for k in self.lost}
            except FileNotFoundError:
                pass
            except (OSError, ValueError, AttributeError, TypeError) as e:
                # Unreadable: something ran before; say so for the defaults.
                print("code interpreter state %s: %s" % (state, e), file=sys.stderr, flush=True)
                self.lost["defaults"] = set(LANGUAGES.values())
            self._save()

    def _save(self):
        if not self.state:
            return
        os.makedirs(os.path.dirname(self.state), exist_ok=True)
        tmp = self.state + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.ran, f)
        os.replace(tmp, self.state)

    def ran_code(self, ctx):
        """Records (once) that ctx holds state a restart would lose."""
        with self.lock:
            default = [lang for lang, cid in self.defaults.items() if cid == ctx.id]
            key, name = ("defaults", default[0]) if default else ("contexts", ctx.id)
            if name in self.ran[key]:
                return
            self.ran[key].append(name)
            try:
                self._save()
            except OSError as e:
                print("code interpreter state %s: %s" % (self.state, e), file=sys.stderr, flush=True)

    def take_lost(self, lang):
        """Whether the default context of lang had state an earlier server
        lost, not yet reported (reported once)."""
        with self.lock:
            if lang in self.lost["defaults"]:
                self.lost["defaults"].discard(lang)
                return True
            return False

    def create(self, lang, cwd):
        lang = language(lang or "python")
        cwd = cwd or self.default_cwd
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise RequestError(400, "cwd: want an absolute path")
        if not os.path.isdir(cwd):
            raise RequestError(400, "cwd %r: no such directory in the sandbox" % cwd[:200])
        with self.lock:
            if len(self.contexts) >= MAX_CONTEXTS:
                raise RequestError(429, "at most %d contexts: remove one first" % MAX_CONTEXTS)
        cls = PythonContext if lang == "python" else BashContext
        ctx = cls(str(uuid.uuid4()), cwd)
        with self.lock:
            self.contexts[ctx.id] = ctx
        return ctx

    def default(self, lang):
        with self.default_lock:
            with self.lock:
                cid = self.defaults.get(lang)
                if cid in self.contexts:
                    return self.contexts[cid]
            ctx = self.create(lang, None)
            with self.lock:
                self.defaults[lang] = ctx.id
            return ctx

    def get(self, cid):
        with self.lock:
            ctx = self.contexts.get(cid)
        if ctx is None:
            if cid in self.lost["contexts"]:
                raise RequestError(404, "context %r not found: %s, which lost it with its state; create a new context"
                                   % (cid[:80], RESTARTED))
            raise RequestError(404, "context %r not found" % cid[:80])
        return ctx

    def remove(self, cid):
        with self.lock:
            ctx = self.contexts.pop(cid, None)
            for lang, d in list(self.defaults.items()):
                if d == cid:
                    del self.defaults[lang]
        if ctx is None:
            raise RequestError(404, "context %r not found" % cid[:80])
        ctx.shutdown()

    def list(self):
        with self.lock:
            return [describe(c) for c in self.contexts.values()]


def describe(ctx):
    return {"id": ctx.id, "language": ctx.language, "cwd": ctx.cwd}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    interp = None  # set by main

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise RequestError(413, "request body larger than %d bytes" % MAX_BODY)
        raw = self.rfile.read(n) if n else b"{}"
        try:
            return json.loads(raw or b"{}")
        except ValueError as e:
            raise RequestError(400, "request body: not JSON: %s" % e)

    def _send(self, status, obj=None):
        data = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = path.strip("/").split("/")
        try:
            if method == "GET" and path == "/health":
                return self._send(200, {"status": "ok"})
            if method == "POST" and path == "/execute":
                return self._execute()
            if parts[0] == "contexts":
                if method == "GET" and len(parts) == 1:
                    return self._send(200, self.interp.list())
                if method == "POST" and len(parts) == 1:
                    body = self._body()
                    if not isinstance(body, dict):
                        raise RequestError(400, "request body: want a JSON object")
                    return self._send(200, describe(self.interp.create(body.get("language"), body.get("cwd"))))
                if method == "DELETE" and len(parts) == 2:
                    self.interp.remove(parts[1])
                    return self._send(204)
                if method == "POST" and len(parts) == 3 and parts[2] == "restart":
                    self.interp.get(parts[1]).restart()
                    return self._send(204)
            raise RequestError(404, "%s %s: no such endpoint" % (method, path[:100]))
        except RequestError as e:
            self._send(e.status, {"error": str(e)})
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:
            traceback.print_exc()
            self._send(500, {"error": "%s: %s" % (type(e).__name__, e)})

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def _gone(self):
        """Whether the client closed the connection."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            return bool(r) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _execute(self):
        code, cid, lang, envs = parse_execute(self._body())
        ctx = self.interp.get(cid) if cid else self.interp.default(lang or "python")
        lost = not cid and self.interp.take_lost(ctx.language)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        state = {"gone": False}

        def emit(msg):
            if state["gone"]:
                return
            line = json.dumps(msg).encode() + b"\n"
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                state["gone"] = True

        def gone():
            if not state["gone"] and self._gone():
                state["gone"] = True
            return state["gone"]

        try:
            if lost:
                emit({"type": "error", "name": "ContextLost", "value": LOST, "traceback": ""})
            else:
                self.interp.ran_code(ctx)
                ctx.execute(code, envs, emit, gone)
        except Exception as e:
            traceback.print_exc()
            emit({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": traceback.format_exc()})
        emit({"type": "end_of_execution"})
        if not state["gone"]:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=49999)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--cwd", default=os.environ.get("HOME") or "/")
    ap.add_argument("--state", default=os.path.join(os.environ.get("HOME") or "/tmp", ".local", "state",
                                                    "space-code-interpreter", "contexts.json"),
                    help="the file naming the contexts that ran code ('' for none)")
    args = ap.parse_args()
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    interp = Interpreter(args.cwd if os.path.isdir(args.cwd) else "/", args.state)
    Handler.interp = interp
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    # The default Python context is started at once, so that the first
    # runCode does not wait for a kernel.
    threading.Thread(target=lambda: interp.default("python"), daemon=True).start()
    print("space code interpreter listening on %s:%d" % (args.host, args.port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
