"""The wire package's one error: a body refused, naming the field and an API error code."""

from __future__ import annotations

from sidecar.errors import InvalidArgument


class WireError(InvalidArgument):
    """A request body the wire format refuses.

    `field` is the dotted body path of the culprit ("" for the body as a whole, e.g. not
    JSON); `code` the API's error code (OpenAI's `invalid_value`, `invalid_json`, ...).
    The message is `"{field}: {problem}"`, or the problem alone for the whole body.
    """

    def __init__(self, field: str, problem: str, code: str = "invalid_value") -> None:
        super().__init__(field, problem)
        self.code = code
        if not field:
            self.args = (problem,)

    @property
    def message(self) -> str:
        """What the client is told."""
        return str(self)


def bad_request(field: str, problem: str) -> WireError:
    """The refusal of a body field (dotted path) that is wrong."""
    return WireError(field, problem)


def invalid_json(problem: str) -> WireError:
    """The refusal of a body that is not the JSON this package reads."""
    return WireError("", problem, code="invalid_json")
