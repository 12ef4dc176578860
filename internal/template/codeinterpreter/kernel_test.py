"""Tests of the server's Python contexts against a real IPython kernel.
They need jupyter_client and ipykernel, so they run inside the
code-interpreter template (e2e.TestRunCode copies them into a sandbox)."""

import os
import tempfile
import time
import unittest

import server

# ipykernel aborts, after an error, the execute requests that reach it
# within stop_on_error_timeout (0 s by default: only those already queued
# when it next looks; under load, the next call of ours). Widened here so
# that a request sent right after an error always falls in that window.
WIDE_ABORT_WINDOW = ["--Kernel.stop_on_error_timeout=3"]


class Python(unittest.TestCase):
    def setUp(self):
        self.ctx = server.PythonContext("id", tempfile.mkdtemp(), kernel_args=WIDE_ABORT_WINDOW)
        self.addCleanup(self.ctx.shutdown)

    def run_code(self, code, envs=None, gone=lambda: False):
        out = []
        self.ctx.execute(code, envs or {}, out.append, gone)
        return out

    def main_text(self, msgs):
        return [m.get("text") for m in msgs if m["type"] == "result" and m["is_main_result"]]

    def test_call_after_an_error_has_its_result(self):
        msgs = self.run_code("1/0")
        self.assertEqual([m["name"] for m in msgs if m["type"] == "error"], ["ZeroDivisionError"])
        msgs = self.run_code("1+1")
        self.assertEqual(self.main_text(msgs), ["2"], "the call after an error: %r" % msgs)

    def test_interrupt_keeps_state_and_the_next_call_answers(self):
        # The flake of compat/e2b TestCodeInterpreterSDK ('timeoutMs
        # interrupts the execution and keeps the state'): the interrupt's
        # KeyboardInterrupt is an error, and the next call was aborted.
        self.run_code("kept = 5")
        t0 = time.monotonic()
        msgs = self.run_code("import time\nfor i in range(600): time.sleep(0.1)",
                             gone=lambda: time.monotonic() - t0 > 0.5)
        self.assertLess(time.monotonic() - t0, 30, "the loop was not interrupted")
        self.assertIn("KeyboardInterrupt", [m.get("name") for m in msgs if m["type"] == "error"], msgs)
        msgs = self.run_code("kept + 1")
        self.assertEqual(self.main_text(msgs), ["6"], "the call after the interrupt: %r" % msgs)

    def test_envs_restored_after_an_error(self):
        msgs = self.run_code("import os\nassert os.environ['SPACE_K'] == 'v'\nraise ValueError('x')", envs={"SPACE_K": "v"})
        self.assertEqual([m["name"] for m in msgs if m["type"] == "error"], ["ValueError"], msgs)
        msgs = self.run_code("import os\nstr(os.environ.get('SPACE_K'))")
        self.assertEqual(self.main_text(msgs), ["'None'"], msgs)

    def test_an_aborted_request_is_an_error(self):
        # A request the kernel aborts (here: one error sent the way
        # jupyter_client does by default, stop_on_error, then ours within
        # the window) comes back busy then idle, never run: an error.
        self.ctx._drain(self.ctx.kc.execute("1/0", stop_on_error=True), lambda m: None, None)
        msgs = self.run_code("1+1")
        self.assertEqual([m.get("name") for m in msgs if m["type"] == "error"], ["ExecutionAborted"], msgs)
        self.assertEqual(self.main_text(msgs), [])


if __name__ == "__main__":
    unittest.main()
