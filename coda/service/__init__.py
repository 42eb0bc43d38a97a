"""What every CODA HTTP service shares (the master and the three model services).

- :func:`create_service_app` (:mod:`.app`): health, readiness, metrics, the request pipeline;
- :mod:`.middleware`: request ids and metrics, the JSON 500, body limits and timeouts, strict
  JSON, concurrency slots, deadlines, cancel on disconnect;
- :mod:`.auth`: bearer tokens with roles, checked before the body is read;
- :mod:`.errors`: one error format (:class:`FieldError`), OpenAPI error responses;
- :mod:`.jsonguard`: strict JSON parsing; :mod:`.cancellation`: the per-request cancel event.
"""

from coda.service.app import create_service_app
from coda.service.auth import TokenAuth, require
from coda.service.cancellation import current_cancel_event, is_cancelled
from coda.service.errors import ErrorBody, FieldError, error_responses, safe_json
from coda.service.jsonguard import JSONBodyError, strict_loads

__all__ = [
    "ErrorBody",
    "FieldError",
    "JSONBodyError",
    "TokenAuth",
    "create_service_app",
    "current_cancel_event",
    "error_responses",
    "is_cancelled",
    "require",
    "safe_json",
    "strict_loads",
]
