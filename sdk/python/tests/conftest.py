"""Fixtures shared by the integration test files."""

from __future__ import annotations

import pytest

import space_sandbox as ss


@pytest.fixture(scope="session")
def code_interpreter_template() -> str:
    """The name of the code-interpreter template, built once for the whole
    run from the server's built-in (python_test.go points the server at
    $SPACE_TEST_CACHE_DIR, where its Debian tree is kept, so only a cold
    cache pays for debootstrap); test_server_code.py and test_server_vm.py
    both use it, in whichever order they run."""
    name = "code-interpreter"
    with ss.Client(timeout=120) as c:
        if not any(t.name == name and t.state == "ready" for t in c.list_templates()):
            c.build_template(name, "code-interpreter", wait_timeout=1800)
    return name
