"""The vsphere provider under the faults a vSphere farm sees, injected from outside through the
vSphere API of VMware's simulator (vcsim) and the network in front of it: a template deleted
and put back, vSphere unreachable in the middle of a reset (a TCP proxy cut), a password
changed while the provider runs, a ``ca_file`` that cannot be read, an endpoint that is not
vSphere, a certificate pinned by its thumbprint, and two workers given one clone prefix. The
infrastructure's faults are :class:`ProviderDown` (the worker waits them out, no episode is
charged); a reset never loses track of a clone it could not destroy; a worker never touches
VMs it does not own. Nothing is left behind (VMs, containers, volumes)."""

from __future__ import annotations

import hashlib
import http.server
import secrets
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coda.contracts.desktop import BrokenReason, ProviderDown, ProviderFault
from coda_app.vcsim import Vcsim, create_vm, desktop_run
from tests.fixtures.proxy import proxy
from tests.fixtures.vcsim import (
    destroy_vm,
    end_other_sessions,
    template_vm,
    vm_names_of,
    vsphere_provider,
)
from worker.providers.base import ProviderConflict
from worker.providers.factory import ProviderConfigError, make_provider
from worker.providers.vsphere import (
    VsphereProvider,
    VsphereSettings,
    find_vm,
    owner_of,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _clones(si: Any, prefix: str) -> list[str]:
    return [n for n in vm_names_of(si, prefix) if "-clone-" in n]


# ----------------------------------------------------------------------------- the template


def test_a_template_deleted_and_put_back_is_found_again(
        vcsim: Vcsim, si: Any, prefix: str, desktop_vm_image: str,
        clones: Callable[..., VsphereProvider]) -> None:
    with clones() as provider:
        d = provider.desktop(0)
        d.reset()
        template = f"{prefix}-template"
        destroy_vm(si, template)
        with pytest.raises(ProviderDown) as err:
            d.reset()  # the cached template is gone: looked up again, and not found
        assert err.value.fault is ProviderFault.MISSING
        assert err.value.reason is BrokenReason.START_FAILED
        assert err.value.detail == f"no template VM {template!r}"
        with pytest.raises(ProviderDown):
            provider.probe()
        template_vm(si, prefix, desktop_run(desktop_vm_image, network=vcsim.network))  # back
        provider.probe()
        d.reset()  # a clone of the template put back (a new VM of the same name)
        assert d.health().ok
        assert _clones(si, prefix) == [f"{prefix}-clone-0"]
    assert _clones(si, prefix) == []


def test_a_template_without_its_snapshot_is_missing_naming_both(
        vcsim: Vcsim, si: Any, prefix: str) -> None:
    template = f"{prefix}-bare"
    create_vm(si, template, None, template=True)  # no snapshot to link clones to
    with vsphere_provider(vcsim, mode="clone", template=template,
                   clone_prefix=f"{prefix}-clone") as provider:
        with pytest.raises(ProviderDown) as err:
            provider.probe()
        assert err.value.fault is ProviderFault.MISSING
        assert err.value.reason is BrokenReason.START_FAILED
        assert f"template {template!r} has no snapshot 'sci_bench'" in err.value.detail


# ----------------------------------------------------------------------------- an outage


def test_a_reset_in_an_outage_keeps_track_of_the_clone_it_could_not_destroy(
        vcsim: Vcsim, si: Any, prefix: str, desktop_vm_image: str) -> None:
    """vSphere unreachable (the network to it cut) while a slot resets: the reset fails as the
    infrastructure's fault naming host:port, the old clone stays tracked, and the first reset
    after the outage destroys it before cloning: one clone, nothing left running."""
    template = template_vm(si, prefix, desktop_run(desktop_vm_image, network=vcsim.network))
    with proxy(("127.0.0.1", vcsim.port)) as cut, vsphere_provider(
            vcsim, mode="clone", template=template, port=cut.port,
            clone_prefix=f"{prefix}-clone") as provider:
        d = provider.desktop(0)
        d.reset()
        first = d.vm._moId
        cut.cut()
        with pytest.raises(ProviderDown) as err:
            d.reset()
        assert err.value.fault is ProviderFault.UNREACHABLE
        assert f"vSphere 127.0.0.1:{cut.port}" in err.value.detail
        assert d.vm is not None and d.vm._moId == first  # still tracked
        with pytest.raises(ProviderDown):
            provider.probe()
        cut.restore()
        provider.probe()
        d.reset()
        assert d.vm._moId != first and d.health().ok
        assert _clones(si, prefix) == [f"{prefix}-clone-0"]  # the old one destroyed
        assert find_vm(si, f"{prefix}-clone-0")._moId == d.vm._moId
    assert _clones(si, prefix) == []


def test_a_password_changed_while_running_is_refused_credentials_until_it_is_back(
        vcsim: Vcsim, si: Any, clones: Callable[..., VsphereProvider]) -> None:
    before = vcsim.password
    with clones() as provider:
        d = provider.desktop(0)
        d.reset()
        rotated = "rotated-" + secrets.token_hex(8)
        try:
            vcsim.change_password(rotated)
            assert end_other_sessions(si) >= 1  # the provider's session ends
            with pytest.raises(ProviderDown) as err:
                d.reset()
            assert err.value.fault is ProviderFault.CREDENTIALS_REFUSED
            assert err.value.detail.endswith(f"login of {vcsim.user!r} refused")
            assert before not in err.value.detail and rotated not in err.value.detail
            with pytest.raises(ProviderDown) as err:
                provider.probe()
            assert err.value.fault is ProviderFault.CREDENTIALS_REFUSED
        finally:
            vcsim.change_password(before)
        provider.probe()
        d.reset()
        assert d.health().ok


# ----------------------------------------------------------------------------- TLS, endpoints


def test_a_ca_file_that_cannot_be_read_is_misconfigured_naming_it(
        vcsim: Vcsim, tmp_path: Path) -> None:
    for path, says in ((tmp_path / "missing.pem", "cannot be read"),
                       (tmp_path / "garbage.pem", "not a PEM bundle")):
        if path.name == "garbage.pem":
            path.write_text("not a certificate\n")
        options = {**vcsim.options(ca_file=str(path)), "mode": "revert", "vm_names": ["x"]}
        with make_provider("vsphere", options) as p, pytest.raises(ProviderDown) as err:
            p.probe()
        assert err.value.fault is ProviderFault.MISCONFIGURED
        assert err.value.detail.startswith(f"provider_options.ca_file: {path}: {says}")


@pytest.fixture
def not_vsphere(tmp_path: Path) -> Iterator[int]:
    """An https server that is not vSphere (every path 404), with a certificate of its own."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_an_endpoint_that_is_not_vsphere_is_misconfigured_naming_it(not_vsphere: int) -> None:
    options = {"host": "127.0.0.1", "port": not_vsphere, "user": "u", "password": "p",
               "insecure": True, "mode": "revert", "vm_names": ["x"]}
    with make_provider("vsphere", options) as p, pytest.raises(ProviderDown) as err:
        p.probe()
    assert err.value.fault is ProviderFault.MISCONFIGURED
    assert err.value.detail.startswith(
        f"vSphere 127.0.0.1:{not_vsphere}: not a vSphere API endpoint")


def test_a_certificate_pinned_by_its_thumbprint_is_trusted_and_another_refused(
        vcsim: Vcsim, si: Any, prefix: str, desktop_vm_image: str) -> None:
    der = ssl.PEM_cert_to_DER_cert(vcsim.cert.read_text())
    digest = hashlib.sha256(der).hexdigest()
    pinned = ":".join(digest[i:i + 2] for i in range(0, 64, 2)).upper()  # as vSphere shows it
    template = template_vm(si, prefix, desktop_run(desktop_vm_image, network=vcsim.network))
    options = {k: v for k, v in vcsim.options().items() if k != "ca_file"}
    base = {**options, "mode": "clone", "template": template, "clone_prefix": f"{prefix}-clone"}
    with make_provider("vsphere", {**base, "thumbprint": pinned}) as p:
        p.probe()  # connected, logged in, the template found: no CA involved
    sha1 = hashlib.sha1(der).hexdigest()  # vSphere shows SHA-1 thumbprints too
    with make_provider("vsphere", {**base, "thumbprint": sha1}) as p:
        p.probe()
    with (make_provider("vsphere", {**base, "thumbprint": "00" * 32}) as p,
          pytest.raises(ProviderDown) as err):
        p.probe()
    assert err.value.fault is ProviderFault.MISCONFIGURED
    assert f"certificate thumbprint {digest} is not the pinned {'00' * 32}" in err.value.detail
    with pytest.raises(ProviderConfigError, match=r"provider_options\.thumbprint"):
        make_provider("vsphere", {**base, "thumbprint": "not-a-fingerprint"})


# ----------------------------------------------------------------------------- owners


def test_clone_names_are_the_workers_own_by_default() -> None:
    s = VsphereSettings(host="vc", user="u", password="p", template="t",  # type: ignore[arg-type]
                        owner="vm server/1")
    assert s.prefix == "coda-vm-server-1"
    assert VsphereSettings(host="vc", user="u", password="p",  # type: ignore[arg-type]
                           owner="b").prefix != s.prefix
    p = make_provider("vsphere", {"host": "vc", "user": "u", "password": "p", "template": "t"},
                      owner="gpu-7")
    assert isinstance(p, VsphereProvider) and p.desktop(3).vm_name == "coda-gpu-7-3"


def test_a_clone_prefix_in_use_by_another_worker_is_refused_and_its_vm_untouched(
        si: Any, prefix: str, clones: Callable[..., VsphereProvider]) -> None:
    with clones(owner="worker-a") as a:
        da = a.desktop(0)
        da.reset()
        mine = da.vm._moId
        assert owner_of(si, find_vm(si, f"{prefix}-clone-0")) == "worker-a"  # the mark
        with clones(owner="worker-b") as b:
            with pytest.raises(ProviderConflict) as err:
                b.probe()
            assert "in use by worker 'worker-a'" in str(err.value)
            assert f"{prefix}-clone-0 (worker-a, poweredOn)" in str(err.value)
            with pytest.raises(ProviderConflict):
                b.desktop(0).reset()  # nor does a reset touch it
        clone = find_vm(si, f"{prefix}-clone-0")
        assert clone._moId == mine and str(clone.runtime.powerState) == "poweredOn"
        assert da.health().ok
    assert _clones(si, prefix) == []
