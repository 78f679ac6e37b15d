"""Reading the server's answers: refusals as :class:`RewardServerError` with a hint, and tool results checked."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from rlvr_client.protocol import RewardServerError
from rlvr_client.tools import TOOLS_PATH, ToolCall, ToolResult, decode_results

#: The environment variable with the API key sent as ``Authorization: Bearer <key>``.
API_KEY_ENV = "RLVR_API_KEY"


def raise_for_status(response: httpx.Response, url: str, path: str) -> None:
    """Raise for a 4xx/5xx answer, with a hint for the usual causes.

    Raises:
        RewardServerError: ``status_code >= 400``.
    """
    if response.status_code >= 400:
        hint = ""
        if response.status_code == 413:
            hint = " (the batch exceeds the server's max_batch_items: lower the client's max_batch_items)"
        elif response.status_code == 401:
            hint = f" (the server needs an API key: pass api_key= or set {API_KEY_ENV})"
        raise RewardServerError(
            f"{url}{path} answered {response.status_code}{hint}: {response.text[:500]}",
            status_code=response.status_code,
            url=url,
        )


def decode_tools(response: httpx.Response, calls: Sequence[ToolCall], url: str) -> tuple[list[ToolResult], str]:
    """The results of ``POST /v1/tools/python`` in the calls' order, and the URL that answered.

    Raises:
        RewardServerError: a non-2xx answer, or one that does not match the calls.
    """
    raise_for_status(response, url, TOOLS_PATH)
    try:
        return decode_results(response.json(), calls), url
    except (ValueError, KeyError, TypeError) as exc:
        raise RewardServerError(f"{url}{TOOLS_PATH}: {exc}", url=url) from exc
