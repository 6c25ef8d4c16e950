"""Error answers in the contract's shape: {"error": {"code", "message"}} (docs/api.md)."""

from __future__ import annotations

from aiohttp import web


def error_response(status: int, code: str, message: str, retry_after_s: int | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    hdrs = dict(headers or {})
    if retry_after_s is not None:
        hdrs["Retry-After"] = str(int(retry_after_s))
    return web.json_response(
        {"error": {"code": code, "message": message}}, status=status, headers=hdrs
    )
