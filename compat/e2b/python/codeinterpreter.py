"""Runs the published `e2b-code-interpreter` Python SDK, unmodified, against
SPACE's code-interpreter template (driven by compat/e2b/codeinterpreter_test.go
once the template is built). E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set.
Each check prints a line; the first failure exits non-zero."""

import base64
import sys

from e2b_code_interpreter import Sandbox


def check(cond, what):
    if not cond:
        print("FAIL: " + what, flush=True)
        sys.exit(1)
    print("ok   " + what, flush=True)


def eq(got, want, what):
    check(got == want, f"{what}: got {got!r}, want {want!r}")


def main():
    sbx = Sandbox.create(timeout=300)  # the SDK's default template
    try:
        eq(sbx.run_code("1+1").text, "2", "run_code('1+1')")
        sbx.run_code("x = 41")
        eq(sbx.run_code("x + 1").text, "42", "state kept across calls")
        out = []
        ex = sbx.run_code("import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)",
                          on_stdout=lambda m: out.append(m.line))
        eq(ex.logs.stdout, ["to stdout\n"], "logs.stdout")
        eq(ex.logs.stderr, ["to stderr\n"], "logs.stderr")
        eq(out, ["to stdout\n"], "on_stdout streamed")
        ex = sbx.run_code("1/0")
        check(ex.error is not None and ex.error.name == "ZeroDivisionError", f"error name: {ex.error!r}")
        check("division by zero" in ex.error.value and "ZeroDivisionError" in ex.error.traceback, "error value and traceback")
        ex = sbx.run_code(
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
        pngs = [r.png for r in ex.results if r.png]
        check(len(pngs) == 1 and base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n", f"a matplotlib chart as PNG: {len(pngs)} images")
        eq(sbx.run_code("import os; os.environ['GREETING']", envs={"GREETING": "hi"}).text, "'hi'", "envs")
        ctx = sbx.create_code_context(cwd="/tmp")
        eq(sbx.run_code("import os; os.getcwd()", context=ctx).text, "'/tmp'", "a context's cwd")
        sbx.run_code("y = 1", context=ctx)
        check(sbx.run_code("y", context=ctx).error is None, "a context keeps its state")
        check(sbx.run_code("y").error is not None, "the default context does not share it")
        check(any(c.id == ctx.id for c in sbx.list_code_contexts()), "list_code_contexts")
        sbx.restart_code_context(ctx)
        check(sbx.run_code("y", context=ctx).error is not None, "restart_code_context drops the state")
        sbx.remove_code_context(ctx)
        check(all(c.id != ctx.id for c in sbx.list_code_contexts()), "remove_code_context")
        ex = sbx.run_code("echo $((6*7))", language="bash")
        eq(ex.logs.stdout, ["42\n"], "a bash context")
    finally:
        sbx.kill()
    print("done")


if __name__ == "__main__":
    main()
