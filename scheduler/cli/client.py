"""The CLI's HTTP client for the daemon API (URL from GA_HOME/daemon.json, token from
GA_HOME/api-token or GA_API_TOKEN)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from core.config import home_dir


class CliError(Exception):
    """A message for the user; the CLI prints it and exits non-zero."""

    def __init__(self, message: str, problems: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class ApiClient:
    """Thin wrapper over httpx that turns HTTP failures into :class:`CliError`."""

    def __init__(self, home: Path | None = None, timeout_s: float = 30.0) -> None:
        import json

        self.home = home or home_dir()
        try:
            info = json.loads((self.home / "daemon.json").read_text())
        except (FileNotFoundError, ValueError):
            raise CliError(f"no daemon has run with GA_HOME={self.home}; start one with "
                           "`schedctl daemon` (or try `schedctl demo`)") from None
        token = os.environ.get("GA_API_TOKEN")
        self.token_source = "GA_API_TOKEN (set in the environment)"
        if not token:
            self.token_source = f"the token in {self.home}/api-token (GA_API_TOKEN is unset)"
            try:
                token = (self.home / "api-token").read_text().strip()
            except FileNotFoundError:
                raise CliError(f"no API token in {self.home}/api-token; set GA_API_TOKEN") from None
        self.base_url = info["api_url"]
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {token}"})

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError:
            raise CliError(f"the daemon at {self.base_url} is not answering; is "
                           "`schedctl daemon` running?") from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"detail": response.text}
            if response.status_code == 401:
                # Say where the token came from: the usual causes are a revoked token, or a
                # GA_API_TOKEN or api-token file from another GA_HOME than the daemon's.
                raise CliError(f"{body.get('detail', body)}: the CLI sends {self.token_source}; "
                               "use a valid token (one from `schedctl tokens create`, or the "
                               "daemon's own: GA_HOME/api-token of the daemon's GA_HOME, or the "
                               "GA_API_TOKEN it was started with)")
            raise CliError(describe(body.get("detail", body)), body.get("problems"))
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None) -> Any:
        import json as json_lib

        # httpx refuses to send NaN/Infinity (a YAML .nan or .inf); send them as JSON's
        # NaN/Infinity tokens so the daemon refuses them with a 422 naming the field.
        if json is None:
            return self.request("POST", path)
        return self.request("POST", path, content=json_lib.dumps(json, allow_nan=True),
                            headers={"Content-Type": "application/json"})


def describe(detail: Any) -> str:
    """An error body's ``detail`` as a sentence: FastAPI's list of validation errors becomes
    ``field: message (got value)`` per problem, ``body``/``query`` dropped from the field."""
    if not isinstance(detail, list):
        return str(detail)
    parts = []
    for e in detail:
        if not isinstance(e, dict):
            parts.append(str(e))
            continue
        loc = [str(x) for x in e.get("loc", []) if x not in ("body", "query", "path")]
        got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
        parts.append(f"{'.'.join(loc) or 'request'}: {e.get('msg', e)}{got}")
    return "; ".join(parts)

