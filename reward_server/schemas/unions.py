"""A union field that fails as one error at its own ``loc``.

Pydantic reports a value that matches no member of ``A | B | C`` once per member, each at a ``loc`` that ends in
the member's name (``components.accuracy.float``, ``...int``, ``...dict[str,any]``): three errors for one mistake,
at paths that are not fields. ``Annotated[A | B | C, one_error("...")]`` keeps the union's validation and schema
and replaces that list with one error that says what the field takes.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError


def one_error(expected: str) -> WrapValidator:
    """A validator for ``Annotated[<union>, one_error(expected)]``: a value that matches none of the union's members
    gives one ``union_type`` error, "Input should be <expected>", at the field's own ``loc``.

    Args:
        expected: what the field takes, completing "Input should be ...", e.g. "a number or an object".
    """

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("union_type", "Input should be {expected}", {"expected": expected}) from None

    return WrapValidator(validate)
