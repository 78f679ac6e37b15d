"""JSON in and out of the HTTP API: request bodies read with errors that say what is wrong and where, and
responses that always encode.

FastAPI reads a body with ``json.loads`` and turns anything but a syntax error into a bare 400 "There was
an error parsing the body": an integer of more than 4,300 digits (Python's int-string limit), a body that
is not UTF-8, arrays nested past the recursion limit. :class:`JSONBodyRoute` (every router's
``route_class``) reads the body itself and answers 422 in FastAPI's validation shape, naming the field
where it can. :class:`SafeJSONResponse` (the app's default response class) writes a lone surrogate
(``"\\ud800"``, which JSON may carry but strict UTF-8 cannot encode) back as its JSON escape, so text
echoed from a request (an extracted answer, a field name in an error) can never turn an answer into a 500.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import re
import sys
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

__all__ = ["JSONBodyRoute", "SafeJSONResponse", "drop_frame_locals", "read_json", "read_json_in_pieces"]


class BodyError(ValueError):
    """A request body that is not the JSON it claims to be. ``loc`` starts with ``"body"``."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg

    def as_http(self) -> HTTPException:
        """The 422 a client gets, shaped like FastAPI's validation errors."""
        return HTTPException(status_code=422, detail=[{"loc": list(self.loc), "msg": self.msg, "type": "json_invalid"}])


class _HugeInt:
    """Stands for an integer literal too long for ``int()``, so the walk can say where it was."""

    def __init__(self, digits: str) -> None:
        self.digits = digits


def _parse_int(text: str) -> int | _HugeInt:
    try:
        return int(text)
    except ValueError:  # over sys.get_int_max_str_digits(): the only way an integer literal fails here
        return _HugeInt(text)


def _find_huge_int(value: Any) -> tuple[tuple[str | int, ...], _HugeInt] | None:
    """The path and value of the first :class:`_HugeInt` in ``value`` (walked without recursion)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _HugeInt):
            return path, node
        if isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))
    return None


def read_json(body: bytes) -> Any:
    """Parse a request body (UTF-8, or the UTF-16/32 that ``json.loads`` detects) as JSON.

    Raises:
        BodyError: the body is not text in that encoding (the byte offset is in ``loc``), not JSON (the
            character offset, with the line and column in the message), nests deeper than the parser
            allows, or holds an integer longer than ``sys.get_int_max_str_digits()`` (the field's path).
    """
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        reason = exc.msg.removesuffix(" at")  # "Invalid control character at"
        raise BodyError(("body", exc.pos), f"invalid JSON: {reason} at line {exc.lineno}, column {exc.colno}") from exc
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start : exc.start + 1]
        raise BodyError(
            ("body", exc.start),
            f"the body is not {exc.encoding.upper()} text: byte {exc.start} ({byte!r}) is {exc.reason}; "
            "send JSON encoded as UTF-8",
        ) from exc
    except RecursionError as exc:
        raise BodyError(
            ("body",), f"the JSON nests arrays and objects too deeply (the parser stops near {sys.getrecursionlimit()})"
        ) from exc
    except ValueError as exc:
        # Integer literals over Python's int-string limit; parse again to find which one, and where.
        found = _find_huge_int(json.loads(body, parse_int=_parse_int))
        if found is None:
            raise BodyError(("body",), f"invalid JSON: {exc}") from exc
        path, huge = found
        limit = sys.get_int_max_str_digits()
        raise BodyError(
            ("body", *path),
            f"an integer of {len(huge.digits.lstrip('-'))} digits; at most {limit} are accepted "
            "(send a longer number as a string)",
        ) from exc


# Past this size a body is parsed in a thread, piece by piece (issue 14: nothing CPU-heavy on the event
# loop). json.loads takes about 2.5 ms a megabyte and holds the GIL for the whole call, so in a thread it
# would still stall the loop for the whole of a 100 MB batch; read one value at a time, the thread gives the
# GIL back between them.
_PARSE_IN_THREAD_BYTES = 1 << 20
_DECODE_CHUNK_BYTES = 1 << 22
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def read_json_in_pieces(body: bytes) -> Any:
    """:func:`read_json` for a large body, one top-level value (and one element of a top-level array) at a
    time, so that a thread running it holds the GIL briefly at a time. Anything unusual (not UTF-8, not an
    object at the top, a syntax error) is parsed again by :func:`read_json`, which raises its errors.

    Raises:
        BodyError: as :func:`read_json`.
    """
    try:
        decoder = codecs.getincrementaldecoder("utf-8")()
        text = "".join(
            decoder.decode(body[i : i + _DECODE_CHUNK_BYTES], final=i + _DECODE_CHUNK_BYTES >= len(body))
            for i in range(0, len(body), _DECODE_CHUNK_BYTES)
        )
        return _object_in_pieces(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return read_json(body)


def _object_in_pieces(text: str) -> dict[str, Any]:
    def skip(i: int) -> int:
        end: int = _WHITESPACE.match(text, i).end()  # type: ignore[union-attr]
        return end

    def expect(i: int, char: str) -> int:
        if text[i : i + 1] != char:
            raise ValueError(f"expected {char!r}")
        return skip(i + 1)

    out: dict[str, Any] = {}
    i = expect(skip(0), "{")
    while text[i : i + 1] != "}":
        key, i = _DECODER.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError("a key must be a string")
        i = expect(skip(i), ":")
        if text[i : i + 1] == "[":
            values: list[Any] = []
            i = skip(i + 1)
            while text[i : i + 1] != "]":
                value, i = _DECODER.raw_decode(text, i)
                values.append(value)
                i = skip(i)
                if text[i : i + 1] == ",":
                    i = skip(i + 1)
                    if text[i : i + 1] == "]":
                        raise ValueError("trailing comma")
                elif text[i : i + 1] != "]":
                    raise ValueError("expected ',' or ']'")
            out[key] = values
            i = skip(i + 1)
        else:
            out[key], i = _DECODER.raw_decode(text, i)
            i = skip(i)
        if text[i : i + 1] == ",":
            i = skip(i + 1)
            if text[i : i + 1] == "}":
                raise ValueError("trailing comma")
        elif text[i : i + 1] != "}":
            raise ValueError("expected ',' or '}'")
    if skip(i + 1) != len(text):
        raise ValueError("extra data")
    return out


class _JSONBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                if len(body) > _PARSE_IN_THREAD_BYTES:
                    self._json = await asyncio.to_thread(read_json_in_pieces, body)
                else:
                    self._json = read_json(body)
            except BodyError as exc:
                # FastAPI passes an HTTPException through; anything else would become a bare 400.
                raise exc.as_http() from exc
        return self._json


class JSONBodyRoute(APIRoute):
    """A route that reads its JSON body with :func:`read_json`: a malformed body is a 422 that says why."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_body_with_clear_errors(request: Request) -> Response:
            try:
                return await handler(_JSONBodyRequest(request.scope, request.receive))
            except Exception as exc:
                drop_frame_locals(exc)
                raise

        return read_body_with_clear_errors


def drop_frame_locals(exc: BaseException) -> None:
    """Clear the locals of the finished frames in the tracebacks of ``exc`` and of its causes and contexts.

    A request that fails (the client left mid-upload, a 429 or a 503 once the body is read) fails with an
    exception whose traceback keeps every frame it passed through, and with them the body: the chunks read so
    far, the bytes, the parsed items. Those frames sit in reference cycles (FastAPI's handler keeps the
    ``HTTPException`` it raises in a local of a frame on that exception's own traceback), so without this the
    body stays until a full garbage collection, which may not come for minutes. The line numbers stay, so
    logging the traceback still works.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        error = todo.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        todo += [error.__cause__, error.__context__]


class SafeJSONResponse(JSONResponse):
    """``JSONResponse`` whose strings may hold lone surrogates: each is written as its ``\\uXXXX`` escape,
    valid JSON that decodes to the string the client sent."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
        # With ensure_ascii=False a surrogate can only sit inside a string, where "\udXXX" is its escape.
        return text.encode("utf-8", "backslashreplace")
