"""Errors the test server answers with, shaped like Django REST framework's as NetBox sends them.

DRF answers 400 with `{"field": ["message", ...]}` (errors not tied to one field under `__all__` when they
come from a model's clean(), as in NetBox), and every other error with `{"detail": "message"}`. Raising
one of these anywhere in a handler produces exactly that response.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An HTTP error response with a JSON body."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None):
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}


def detail(status: int, message: str, headers: dict[str, str] | None = None) -> ApiError:
    """An error with DRF's `{"detail": ...}` body."""
    return ApiError(status, {"detail": message}, headers)


def not_found(object_name: str) -> ApiError:
    """What Django's get_object_or_404 gives through DRF ≥ 3.15 (NetBox 4.x)."""
    return detail(404, f"No {object_name} matches the given query.")


def permission_denied() -> ApiError:
    return detail(403, "You do not have permission to perform this action.")


class FieldError(Exception):
    """One field's value is invalid; collected into a 400 by the caller."""

    def __init__(self, *messages: str):
        super().__init__("; ".join(messages))
        self.messages = list(messages)


class ValidationFailed(Exception):
    """A 400 with DRF's field → messages mapping (or a list of them, for a list of objects)."""

    def __init__(self, errors: dict[str, list[str]] | list[dict[str, list[str]]]):
        super().__init__(str(errors))
        self.errors = errors

    @staticmethod
    def on(field: str, message: str) -> ValidationFailed:
        return ValidationFailed({field: [message]})

    @staticmethod
    def model(message: str) -> ValidationFailed:
        """An error raised by a model's clean() without naming a field."""
        return ValidationFailed({"__all__": [message]})

    def response(self) -> ApiError:
        return ApiError(400, self.errors)
