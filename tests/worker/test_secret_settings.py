"""Tokens and passwords in settings are SecretStr: kept out of reprs, unwrapped only to send."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from trainer.config import TrainerConfig
from worker.guest.settings import GuestSettings
from worker.providers.factory import make_provider
from worker.providers.vsphere import VsphereProvider
from worker.settings import WorkerSettings
from worker.tokens import secret_value

SECRET = "do-not-show-this-secret"


def test_worker_settings_keep_tokens_out_of_the_repr() -> None:
    s = WorkerSettings(token=SECRET, service_token=SECRET,
                       provider_options={"guest_token": SECRET})
    assert SECRET not in repr(s) and SECRET not in str(s)
    assert secret_value(s.service_token) == SECRET and secret_value(None) is None


def test_provider_options_become_secrets() -> None:
    options = {"host": "vc", "user": "u", "password": SECRET, "mode": "revert", "vm_names": ["a"],
               "guest_token": SECRET}
    provider = make_provider("vsphere", options)
    assert isinstance(provider, VsphereProvider)
    vsphere = provider.settings
    assert isinstance(vsphere.password, SecretStr) and isinstance(vsphere.guest_token, SecretStr)
    assert SECRET not in repr(vsphere)
    assert secret_value(vsphere.guest_token) == SECRET


def test_guest_and_trainer_settings_keep_tokens_out_of_the_repr(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CODA_ADMIN_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    guest = GuestSettings(token=SECRET)
    cfg = TrainerConfig(master_token=SECRET, planner_token=SECRET)
    for settings in (guest, cfg):
        assert SECRET not in repr(settings)
    assert cfg.master_bearer() == SECRET and cfg.planner_bearer() == SECRET
    monkeypatch.setenv("CODA_ADMIN_TOKEN", "from-env")
    assert TrainerConfig().master_bearer() == "from-env"
    assert TrainerConfig().planner_bearer() is None
