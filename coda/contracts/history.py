"""A past step as the models see it: the planner's text, the executor's action text and the
screenshot (a key of the artifact store, or the image inline). The planner and executor take
it in their requests, and a GRPO group's stored state keeps its history in the same shape, so
the trainer rebuilds exactly the planner input the group was sampled from.

Strings refuse NUL characters and lone surrogates (:data:`Text`): neither can reach a
tokenizer, a log line, an error message or PostgreSQL.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

MAX_TEXT = 65_536
"""Characters of one instruction / thought (the model's context bounds the prompt further)."""
MAX_HISTORY = 256
"""Past steps in one request or stored state."""
SCREENSHOT_KEY = r"^sha256/[0-9a-f]{2}/[0-9a-f]{64}\.(png|jpg|webp)$"
"""A screenshot in the artifact store (coda.artifacts keys of the image types)."""


def _clean_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains a lone surrogate (not valid Unicode)") from None
    return value


Text = Annotated[str, AfterValidator(_clean_text)]
"""A string without NUL characters or lone surrogates."""


class ImageRef(BaseModel):
    """A screenshot: the key of an artifact in the service's artifact store, or the image
    inline (base64 PNG/JPEG/WebP, optionally as a ``data:image/...;base64,`` URL)."""

    model_config = ConfigDict(extra="forbid")

    ref: str | None = Field(default=None, pattern=SCREENSHOT_KEY, max_length=100,
                            description="artifact-store key: sha256/<2 hex>/<64 hex>.png|jpg|webp")
    b64: Text | None = Field(default=None, description="base64 image bytes or a data: URL")

    @model_validator(mode="after")
    def _one(self) -> ImageRef:
        if (self.ref is None) == (self.b64 is None):
            raise ValueError("give exactly one of 'ref' or 'b64'")
        return self


class HistoryStep(BaseModel):
    """A past step as the models see it."""

    model_config = ConfigDict(extra="forbid")

    thought: Text = Field(max_length=MAX_TEXT,
                          description="the planner's 'Thought: ...\\nAction: ...' text")
    action_text: Text | None = Field(default=None, max_length=MAX_TEXT,
                                     description="the executor's raw action text")
    screenshot: ImageRef | None = None
