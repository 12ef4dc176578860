"""Unit tests of the code interpreter server's request parsing, result
mapping and Bash contexts (stdlib only: run by TestCodeInterpreterServerUnit
with the host's python3; the Python contexts need jupyter_client and are
tested in the template by compat/e2b/codeinterpreter.mjs)."""

import os
import tempfile
import unittest

import server


class ParseExecute(unittest.TestCase):
    def test_valid(self):
        self.assertEqual(server.parse_execute({"code": "1+1"}), ("1+1", None, None, {}))
        self.assertEqual(server.parse_execute({"code": "x", "language": "Python3", "env_vars": {"A_1": "v"}}),
                         ("x", None, "python", {"A_1": "v"}))
        self.assertEqual(server.parse_execute({"code": "x", "context_id": "c", "env_vars": None}), ("x", "c", None, {}))

    def test_invalid(self):
        for body, status, words in [
            ([], 400, "JSON object"),
            ({}, 400, "code"),
            ({"code": 1}, 400, "code"),
            ({"code": "", "context_id": 3}, 400, "context_id"),
            ({"code": "", "context_id": "c", "language": "python"}, 400, "not both"),
            ({"code": "", "language": "r"}, 400, "R contexts are not supported"),
            ({"code": "", "language": "perl"}, 400, "'perl' is not supported"),
            ({"code": "", "language": "js"}, 400, "JavaScript contexts are not supported"),
            ({"code": "", "language": "JavaScript"}, 400, "JavaScript contexts are not supported"),
            ({"code": "", "language": 7}, 400, "language"),
            ({"code": "", "env_vars": []}, 400, "env_vars"),
            ({"code": "", "env_vars": {"A B": "v"}}, 400, "env_vars"),
            ({"code": "", "env_vars": {"A": 1}}, 400, "env_vars"),
            ({"code": "", "env_vars": {"A": "a\x00b"}}, 400, "env_vars"),
            ({"code": "", "env_vars": {"1A": "v"}}, 400, "env_vars"),
        ]:
            with self.assertRaises(server.RequestError, msg=repr(body)) as cm:
                server.parse_execute(body)
            self.assertEqual(cm.exception.status, status)
            self.assertIn(words, str(cm.exception))


class ResultMessage(unittest.TestCase):
    def test_formats(self):
        got = server.result_message({"text/plain": "2", "image/png": "iVBO", "text/html": ["<b>", "x</b>"],
                                     "application/json": {"a": [1]}, "application/x-custom": "c"}, True)
        self.assertEqual(got, {"type": "result", "is_main_result": True, "text": "2", "png": "iVBO",
                               "html": "<b>x</b>", "json": {"a": [1]}, "application/x-custom": "c"})


class Bash(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.ctx = server.BashContext("id", self.dir)
        self.addCleanup(self.ctx.shutdown)

    def run_code(self, code, envs=None, gone=lambda: False):
        out = []
        self.ctx.execute(code, envs or {}, out.append, gone)
        return out

    def text(self, msgs, kind):
        return "".join(m["text"] for m in msgs if m["type"] == kind)

    def test_state_and_streams(self):
        msgs = self.run_code("V=kept; cd /; echo out; echo err >&2; printf tail")
        self.assertEqual(self.text(msgs, "stdout"), "out\ntail")
        self.assertEqual(self.text(msgs, "stderr"), "err\n")
        self.assertEqual(msgs[0], {"type": "number_of_executions", "execution_count": 1})
        msgs = self.run_code('echo "$V $PWD"')
        self.assertEqual(self.text(msgs, "stdout"), "kept /\n")
        self.assertEqual(msgs[0]["execution_count"], 2)
        self.assertFalse([m for m in msgs if m["type"] == "error"])

    def test_envs_restored(self):
        os.environ.pop("SPACE_T", None)
        self.run_code("export KEEP=old")
        msgs = self.run_code('echo "$SPACE_T $KEEP"', {"SPACE_T": "it's $x", "KEEP": "new"})
        self.assertEqual(self.text(msgs, "stdout"), "it's $x new\n")
        msgs = self.run_code('echo "[${SPACE_T-unset}] $KEEP"')
        self.assertEqual(self.text(msgs, "stdout"), "[unset] old\n")

    def test_exit_status_and_exit(self):
        msgs = self.run_code("echo x; false")
        self.assertEqual([m["name"] for m in msgs if m["type"] == "error"], ["ExitCodeError"])
        msgs = self.run_code("V=1; exit 4")
        errs = [m for m in msgs if m["type"] == "error"]
        self.assertEqual(errs[0]["name"], "KernelDied")
        self.assertIn("status 4", errs[0]["value"])
        self.assertEqual(self.text(self.run_code('echo "[$V]"'), "stdout"), "[]\n")

    def test_stdin_is_not_the_protocol(self):
        msgs = self.run_code("read line; echo \"[$line]\"")
        self.assertEqual(self.text(msgs, "stdout"), "[]\n")
        self.assertEqual(self.text(self.run_code("echo next"), "stdout"), "next\n")

    def test_gone_stops_the_execution(self):
        calls = []

        def gone():
            calls.append(1)
            return len(calls) > 3

        msgs = self.run_code("sleep 30; echo never", gone=gone)
        self.assertNotIn("never", self.text(msgs, "stdout"))
        self.assertEqual(self.text(self.run_code("echo alive"), "stdout"), "alive\n")


class LostState(unittest.TestCase):
    """A server started where an earlier one ran code reports the loss."""

    def test_a_restart_reports_the_lost_contexts_once(self):
        d = tempfile.mkdtemp()
        state = os.path.join(d, "state", "contexts.json")
        first = server.Interpreter(d, state)
        self.assertFalse(first.take_lost("bash"))
        dflt = first.default("bash")
        named = first.create("bash", None)
        first.ran_code(dflt)
        first.ran_code(named)
        for c in (dflt, named):
            c.shutdown()
        second = server.Interpreter(d, state)
        self.assertFalse(second.take_lost("python"), "python's default context never ran code")
        self.assertTrue(second.take_lost("bash"))
        self.assertFalse(second.take_lost("bash"), "reported once")
        with self.assertRaises(server.RequestError) as cm:
            second.get(named.id)
        self.assertEqual(cm.exception.status, 404)
        self.assertIn("started anew", str(cm.exception))
        # The second server ran nothing: a third finds nothing lost.
        third = server.Interpreter(d, state)
        self.assertFalse(third.take_lost("bash"))
        with self.assertRaises(server.RequestError) as cm:
            third.get(named.id)
        self.assertNotIn("started anew", str(cm.exception))

    def test_no_state_file_no_report(self):
        d = tempfile.mkdtemp()
        first = server.Interpreter(d, None)
        c = first.default("bash")
        first.ran_code(c)
        c.shutdown()
        self.assertFalse(server.Interpreter(d, None).take_lost("bash"))


if __name__ == "__main__":
    unittest.main()
