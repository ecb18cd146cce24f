"""`ticketiq/client/models.py` is what `make client-models` writes from the app's OpenAPI document: an API
changed without writing them again fails here."""

from __future__ import annotations

from ticketiq.cli import client_models


def test_the_committed_models_are_the_ones_the_openapi_writes() -> None:
    written = client_models.module_text(client_models.openapi())
    assert client_models.MODELS.read_text() == written, "the API changed: run `make client-models`"


def test_a_keyword_field_is_written_in_the_functional_form_and_optional_fields_as_not_required() -> None:
    schema = {
        "description": "A call.\n\nMore.",
        "properties": {"class": {"type": "string"}, "at": {"anyOf": [{"type": "null"}, {"type": "string"}]}},
        "required": ["class"],
    }
    assert client_models.model_text("Call", schema) == (
        '# A call.\nCall = TypedDict(\n    "Call",\n    {\n        "class": str,\n'
        '        "at": NotRequired[str | None],\n    },\n)'
    )
