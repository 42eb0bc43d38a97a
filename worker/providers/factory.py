"""Build the provider a worker's settings name (``local``, ``docker``, ``vmware``, ``vsphere``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from worker.providers.base import Provider, ProviderConfigError


def _settings(cls: type[Any], options: dict[str, Any], provider: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ProviderConfigError(
            f"provider_options.{unknown[0]}: not an option of the {provider} provider "
            f"(options: {', '.join(sorted(known))})")
    values = {}
    for name, value in options.items():
        kind = str(known[name].type)
        if isinstance(value, str) and "Path" in kind:
            value = Path(value)
        elif isinstance(value, str) and "SecretStr" in kind:
            value = SecretStr(value)  # a guest token or password: kept out of reprs and logs
        values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:  # a required option is missing
        raise ProviderConfigError(f"provider_options: {exc}") from None


def make_provider(name: str, options: dict[str, Any] | None = None, *,
                  screen: tuple[int, int] = (1280, 800), slot_root: Path | None = None,
                  owner: str | None = None, instance: str | None = None,
                  alive: tuple[float, float] | None = None) -> Provider[Any]:
    """The provider ``name`` with its ``options``; ``owner`` (the worker's name) is whose
    desktops its clean-up may remove, and the default of their names' prefix (docker,
    vsphere), unless the options say otherwise; ``instance`` names the worker process and
    ``alive`` is how often it renews the liveness marks of its desktops and how long one
    holds (docker, vsphere: :mod:`worker.providers.liveness`)."""
    opts = dict(options or {})
    if name in ("docker", "vsphere"):
        marks = {"owner": owner, "instance": instance,
                 "alive_interval_s": alive[0] if alive else None,
                 "alive_ttl_s": alive[1] if alive else None}
        for key, value in marks.items():
            if value is not None:
                opts.setdefault(key, value)
    if name == "local":
        from worker.providers.local import LocalProvider, LocalSettings

        opts.setdefault("screen", tuple(screen))
        if slot_root is not None:
            opts.setdefault("root", slot_root)
        return LocalProvider(_settings(LocalSettings, opts, name))
    if name == "docker":
        from worker.providers.docker import DockerProvider, DockerSettings

        if opts.get("qcow2") is None:  # desktop containers: the worker's screen size
            opts.setdefault("screen", tuple(screen))
        return DockerProvider(_settings(DockerSettings, opts, name))
    if name == "vmware":
        from worker.providers.vmware import VmwareProvider, VmwareSettings

        return VmwareProvider(_settings(VmwareSettings, opts, name))
    if name == "vsphere":
        from worker.providers.vsphere import VsphereProvider, VsphereSettings

        return VsphereProvider(_settings(VsphereSettings, opts, name))
    raise ProviderConfigError(f"provider: unknown provider {name!r} "
                              "(local, docker, vmware, vsphere)")
