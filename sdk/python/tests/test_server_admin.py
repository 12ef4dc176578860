"""Integration tests of the SDK's admin and security calls against a real
`space server --dev`: quotas, template egress, nodes, capability signing
keys, tenant encryption keys, the credential audit and a sandbox's
interception CA, each through the sync and the async client; and the
server-side sandbox list filters and pages, and the file stat route.

python_test.go starts the server and runs this file as it runs
test_server.py (SPACE_API_KEY is the admin key).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import uuid
from typing import Iterator, Tuple

import pytest

import space_sandbox as ss

pytestmark = pytest.mark.skipif(
    os.environ.get("SPACE_SDK_TEST_SERVER") != "1",
    reason="needs a running server: go test ./sdk/python/ starts one (SPACE_SDK_TEST_SERVER=1)",
)


@pytest.fixture(scope="module")
def client() -> Iterator[ss.Client]:
    with ss.Client() as c:
        yield c


@pytest.fixture()
def tenant(client: ss.Client) -> Iterator[Tuple[ss.Tenant, str]]:
    """A fresh tenant and its first key, deleted (with its sandboxes) after."""
    t, key = client.create_tenant("py-admin-" + uuid.uuid4().hex[:8])
    yield t, key
    with ss.Client(api_key=key) as theirs:
        for sb in theirs.list_sandboxes():
            sb.delete()
    client.delete_tenant(t.id)


def test_quota_is_set_and_enforced(client: ss.Client, tenant: Tuple[ss.Tenant, str]) -> None:
    t, key = tenant
    with pytest.raises(ValueError, match="max_sandboxes"):
        client.set_quota(t.id, max_sandboxes=-1)
    with pytest.raises(ValueError, match="max_cpus"):
        client.set_quota(t.id, max_cpus=True)  # type: ignore[arg-type]
    got = client.set_quota(t.id, max_sandboxes=1, max_memory_mib=4096, max_cpus=4)
    assert got.id == t.id and got.quota == {"max_sandboxes": 1, "max_memory_mib": 4096, "max_cpus": 4}
    assert next(x for x in client.list_tenants() if x.id == t.id).quota["max_sandboxes"] == 1
    with ss.Client(api_key=key) as theirs:
        first = theirs.create_sandbox("minimal", runtime="ns")
        assert client.set_quota(t.id, max_sandboxes=1, max_memory_mib=4096, max_cpus=4).usage["sandboxes"] == 1
        with pytest.raises(ss.ResourceExhausted) as over:
            theirs.create_sandbox("minimal", runtime="ns")
        assert "quota" in over.value.message
        # A tenant's key may not set quotas, its own neither.
        with pytest.raises(ss.PermissionDenied):
            theirs.set_quota(t.id, max_sandboxes=0)
        # 0 is unlimited again.
        assert client.set_quota(t.id).quota == {"max_sandboxes": 0, "max_memory_mib": 0, "max_cpus": 0}
        second = theirs.create_sandbox("minimal", runtime="ns")
        second.delete()
        first.delete()
    with pytest.raises(ss.NotFound):
        client.set_quota("t-nosuchtenant", max_sandboxes=1)


def test_template_egress(client: ss.Client) -> None:
    pol = ss.EgressPolicy(allow_internet=False, allow=ss.EgressRules(domains=["pypi.org"]))
    try:
        t = client.set_template_egress("minimal", pol)
        assert t.name == "minimal" and t.egress is not None and t.egress.allow.domains == ["pypi.org"]
        assert t.egress.allow_internet is False
        # A sandbox made from it starts with it.
        with client.create_sandbox("minimal", runtime="ns") as sb:
            got = sb.get_egress()
            assert got.allow_internet is False and got.allow.domains == ["pypi.org"]
    finally:
        cleared = client.set_template_egress("minimal", None)
    assert cleared.egress is None
    with pytest.raises(ss.NotFound):
        client.set_template_egress("py-no-such-template", pol)
    with pytest.raises(ss.InvalidArgument):
        client.set_template_egress("minimal", {"allow": {"cidrs": ["not-a-cidr"]}})


def test_nodes(client: ss.Client) -> None:
    nodes = client.list_nodes()
    assert [n.id for n in nodes] == ["local"]
    local = nodes[0]
    assert local.state == "ready" and local.live and "ns" in local.runtimes and local.cpus > 0 and local.memory_mib > 0
    assert local.last_heartbeat is not None
    # Undraining a node in service leaves it so. (Draining the one node of
    # the dev server would move the other tests' sandboxes.)
    assert client.undrain_node("local").state == "ready"
    with pytest.raises(ss.NotFound):
        client.drain_node("py-no-such-node")
    with pytest.raises(ss.NotFound):
        client.undrain_node("py-no-such-node")
    with pytest.raises(ValueError, match="node_id"):
        client.drain_node("")


def test_signing_keys(client: ss.Client) -> None:
    before = client.list_signing_keys()
    assert before.version >= 1 and any(k.signing for k in before.keys)
    signing = next(k for k in before.keys if k.signing)
    made = client.rotate_signing_key()
    assert made.id and made.id != signing.id and not made.signing
    assert made.active_at is not None and made.created_at is not None and made.active_at > made.created_at
    after = client.list_signing_keys()
    assert made.id in [k.id for k in after.keys] and after.version >= before.version
    # A rotation while a new key still waits to sign returns that key.
    assert client.rotate_signing_key().id == made.id
    # The key signing before still signs: calls go on.
    with client.create_sandbox("minimal", runtime="ns") as sb:
        assert sb.exec(["echo", "after rotation"]).stdout == "after rotation\n"


def test_encryption_keys_revoked_key_refuses_restore(client: ss.Client, tenant: Tuple[ss.Tenant, str]) -> None:
    t, key = tenant
    assert client.list_encryption_keys(t.id) == []
    with ss.Client(api_key=key) as theirs:
        sb = theirs.create_sandbox("minimal", runtime="ns")
        sb.files.write("/tmp/kept", b"sealed")
        assert sb.hibernate().state == "hibernated"
        keys = client.list_encryption_keys(t.id)
        assert len(keys) == 1 and keys[0].tenant == t.id and keys[0].revoked_at is None
        with pytest.raises(ss.PermissionDenied):
            theirs.list_encryption_keys(t.id)
        with pytest.raises(ss.NotFound):
            client.revoke_encryption_key(t.id, "kek-00000000000000000000000000000000")
        client.revoke_encryption_key(t.id, keys[0].id)
        revoked = client.list_encryption_keys(t.id)
        assert revoked[0].id == keys[0].id and revoked[0].revoked_at is not None
        with pytest.raises(ss.APIError) as refused:
            sb.restore(wait_timeout=120)
        assert "revoked" in refused.value.message
    with pytest.raises(ss.NotFound):
        client.list_encryption_keys("t-nosuchtenant")


def test_credential_audit(client: ss.Client, tenant: Tuple[ss.Tenant, str]) -> None:
    t, key = tenant
    with pytest.raises(ValueError, match="limit"):
        client.credential_audit(limit=0)
    with pytest.raises(ValueError, match="limit"):
        client.credential_audit(limit=1001)
    with pytest.raises(ValueError, match="sandbox"):
        client.credential_audit(sandbox="")
    with ss.Client(api_key=key) as theirs:
        # A new tenant has made no request through the gateway.
        assert theirs.credential_audit() == []
        assert theirs.credential_audit(limit=1000) == []
        # A tenant's key reads its own tenant's audit only.
        with pytest.raises(ss.PermissionDenied):
            theirs.credential_audit(tenant="t-sometenant")
    # The admin key may read any tenant's.
    assert client.credential_audit(tenant=t.id, sandbox="sb-none", credential="cr-none", limit=5) == []


def test_ca_certificate(client: ss.Client) -> None:
    with client.create_sandbox("minimal", runtime="ns") as sb:
        pem = sb.ca_certificate()
        assert pem.startswith("-----BEGIN CERTIFICATE-----") and pem.rstrip().endswith("-----END CERTIFICATE-----")
        # It is a certificate Python's TLS stack loads as a CA.
        ctx = ssl.create_default_context(cadata=pem)
        assert any("SPACE sandbox " + sb.id in str(c.get("subject")) for c in ctx.get_ca_certs())
    with pytest.raises(ss.NotFound):
        ss.Sandbox(client, ss.SandboxInfo.from_dict({"id": sb.id})).ca_certificate()


def test_async_admin_calls() -> None:
    async def main() -> None:
        async with ss.AsyncClient() as c:
            t, key = await c.create_tenant("py-admin-async-" + uuid.uuid4().hex[:8])
            try:
                got = await c.set_quota(t.id, max_sandboxes=2)
                assert got.quota["max_sandboxes"] == 2
                with pytest.raises(ValueError, match="max_memory_mib"):
                    await c.set_quota(t.id, max_memory_mib=-5)
                assert [n.id for n in await c.list_nodes()] == ["local"]
                assert (await c.undrain_node("local")).state == "ready"
                with pytest.raises(ss.NotFound):
                    await c.drain_node("py-no-such-node")
                made = await c.rotate_signing_key()
                assert made.id and made.active_at is not None
                assert made.id in [k.id for k in (await c.list_signing_keys()).keys]
                assert await c.credential_audit(tenant=t.id) == []
                pol = ss.EgressPolicy(allow_internet=False)
                try:
                    assert (await c.set_template_egress("minimal", pol)).egress is not None
                finally:
                    assert (await c.set_template_egress("minimal", None)).egress is None
                async with ss.AsyncClient(api_key=key) as theirs:
                    sb = await theirs.create_sandbox("minimal", runtime="ns")
                    pem = await sb.ca_certificate()
                    assert pem.startswith("-----BEGIN CERTIFICATE-----")
                    await sb.hibernate()
                    ek = await c.list_encryption_keys(t.id)
                    assert len(ek) == 1 and ek[0].revoked_at is None
                    await c.revoke_encryption_key(t.id, ek[0].id)
                    assert (await c.list_encryption_keys(t.id))[0].revoked_at is not None
                    await sb.delete()
            finally:
                await c.delete_tenant(t.id)

    asyncio.run(main())


def test_list_filters_and_pages_on_the_server(client: ss.Client, tenant: Tuple[ss.Tenant, str]) -> None:
    _, key = tenant
    with ss.Client(api_key=key) as theirs:
        made = [theirs.create_sandbox("minimal", runtime="ns", name=f"p{i % 2}", metadata={"i": str(i), "suite": "pages"}) for i in range(5)]
        made[1].pause()
        ids = [sb.id for sb in made]
        # Pages of 2, in creation order, every sandbox once.
        seen, token, pages = [], None, 0
        while True:
            page, token = theirs.list_sandboxes_page(limit=2, page_token=token)
            assert len(page) <= 2
            seen += [sb.id for sb in page]
            pages += 1
            if not token:
                break
        assert seen == ids and pages == 3
        assert [sb.id for sb in theirs.iter_sandboxes(page_size=1)] == ids
        assert [sb.id for sb in theirs.list_sandboxes(state="paused")] == [ids[1]]
        assert [sb.id for sb in theirs.list_sandboxes(name="p0")] == [ids[0], ids[2], ids[4]]
        assert [sb.id for sb in theirs.list_sandboxes(metadata={"suite": "pages", "i": "3"})] == [ids[3]]
        page, token = theirs.list_sandboxes_page(name="p1", state="running", limit=1)
        assert [sb.id for sb in page] == [ids[3]] and token == ""
        # A filter and pages together: the matches of the filter, a page at
        # a time, across more of them than a page holds.
        page, token = theirs.list_sandboxes_page(name="p0", limit=2)
        assert [sb.id for sb in page] == [ids[0], ids[2]] and token
        page, token = theirs.list_sandboxes_page(name="p0", limit=2, page_token=token)
        assert [sb.id for sb in page] == [ids[4]] and token == ""
        running = [ids[0], ids[2], ids[3], ids[4]]
        assert [sb.id for sb in theirs.iter_sandboxes(state="running", template="minimal", page_size=1)] == running
        assert [sb.id for sb in theirs.iter_sandboxes(metadata={"suite": "pages"}, state="running", page_size=3)] == running
        # The server itself refuses a bad filter or token (the SDK checks what it can first).
        with pytest.raises(ss.InvalidArgument, match="state"):
            theirs.list_sandboxes(state="sleeping")
        with pytest.raises(ss.InvalidArgument, match="page_token"):
            theirs.list_sandboxes_page(page_token="not-a-token")
        # Stat asks the sandbox for one file.
        sb = made[0]
        sb.files.write("/tmp/stat-me", b"12345")
        e = sb.files.stat("/tmp/stat-me")
        assert (e.name, e.path, e.type, e.size) == ("stat-me", "/tmp/stat-me", "file", 5)
        assert sb.files.stat("/tmp").type == "dir" and sb.files.stat("/").type == "dir"
        with pytest.raises(ss.NotFound):
            sb.files.stat("/tmp/no-such-file")
        assert not sb.files.exists("/tmp/no-such-file")

        async def run() -> None:
            async with ss.AsyncClient(api_key=key) as ac:
                page, token = await ac.list_sandboxes_page(limit=4)
                assert [x.id for x in page] == ids[:4] and token
                assert [x.id async for x in ac.iter_sandboxes(metadata={"suite": "pages"}, page_size=2)] == ids
                page, token = await ac.list_sandboxes_page(state="running", limit=3)
                assert [x.id for x in page] == [ids[0], ids[2], ids[3]] and token
                page, token = await ac.list_sandboxes_page(state="running", limit=3, page_token=token)
                assert [x.id for x in page] == [ids[4]] and token == ""
                assert [x.id async for x in ac.iter_sandboxes(name="p1", page_size=1)] == [ids[1], ids[3]]
                asb = await ac.get_sandbox(ids[0])
                assert (await asb.files.stat("/tmp/stat-me")).size == 5

        asyncio.run(run())
