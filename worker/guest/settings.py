"""Guest agent settings (environment prefix ``CODA_GUEST_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from coda.guestenv import MIN_TOKEN_LENGTH, TOKEN_ENV

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class MissingTokenError(RuntimeError):
    """The agent was asked to start without a token on a desktop that is not throw-away."""


class GuestSettings(BaseSettings):
    """How the agent serves its desktop. Every field can be set as ``CODA_GUEST_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="CODA_GUEST_", extra="ignore")

    host: str | None = Field(default=None, description="address to listen on; default all "
                             "(0.0.0.0), loopback for a throw-away local display")
    port: int = Field(default=5000, ge=1, le=65535, description="OSWorld's port")
    token: SecretStr | None = Field(default=None, description="bearer token clients must send")
    throwaway_local_display: bool = Field(
        default=False, description="no token needed: a throw-away local display (tests, dev)")
    display: str | None = Field(default=None, description="X display; default $DISPLAY")
    desktop_id: str = Field(default="", description="marks every process the agent starts")
    command_timeout_s: float = Field(default=120.0, gt=0, description="/execute bound")
    action_timeout_s: float = Field(default=60.0, gt=0, description="typed action bound")
    accessibility_timeout_s: float = Field(default=20.0, gt=0, description="/accessibility bound")
    tex_timeout_s: float = Field(default=120.0, gt=0, description="one pdflatex/bibtex run")
    max_upload_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    app_env: dict[str, str] = Field(
        default_factory=dict, description="extra environment for launched applications")
    lean_project: Path = Field(default=Path("/home/user/sci"),
                               description="ScienceBoard's Lean project (for /lean/check)")
    lake: Path = Field(default=Path("/home/user/.elan/bin/lake"))
    home_template: Path | None = Field(
        default=None, description="the home's template, restored by POST /coda/restore (the "
        "desktop image sets /opt/coda/home); unset: that route answers 503")
    log_level: str = "INFO"

    @field_validator("home_template", mode="before")
    @classmethod
    def _template(cls, value: object) -> object:
        """Empty is unset; a template must be an absolute path (never the working folder)."""
        if value in ("", None):
            return None
        if not Path(str(value)).is_absolute():
            raise ValueError(f"home_template must be an absolute path, got {value!r}")
        return value

    @property
    def bind_host(self) -> str:
        return self.host or ("127.0.0.1" if self.throwaway_local_display else "0.0.0.0")

    def check_token(self) -> None:
        """Refuse to serve without a (long enough) token unless the display is throw-away (and
        then only on the loopback interface)."""
        if self.throwaway_local_display:
            if self.token is None and self.bind_host not in LOOPBACK:
                raise MissingTokenError(
                    f"refusing to serve a throw-away display without a token on {self.bind_host}:"
                    f" bind to 127.0.0.1 or set {TOKEN_ENV}")
            return
        value = self.token.get_secret_value() if self.token else ""
        if len(value) < MIN_TOKEN_LENGTH:
            raise MissingTokenError(
                f"refusing to start: set {TOKEN_ENV} (or --token) to a secret of at least "
                f"{MIN_TOKEN_LENGTH} characters, or pass --throwaway-local-display for a local "
                "display nobody else can reach")
