"""GET /api/docs: the API's reference (Swagger UI over /api/v1/openapi.json), served from
the `swagger-ui-py` package installed with the console extra (Swagger UI 5, which reads
OpenAPI 3.1, FastAPI's version): no CDN, nothing loaded from another host, so the
console's CSP holds (scripts and styles from 'self' only)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from console.auth import Principal
from console.deps import GuardedRoute, caller

router = APIRouter(prefix="/api/docs", include_in_schema=False, route_class=GuardedRoute)
Who = Annotated[Principal, Depends(caller)]

# The only files of the bundle the page uses (its own index and initializer point at a demo
# document on another host: never served).
ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>horae API reference</title>
<link rel="stylesheet" href="/api/docs/assets/swagger-ui.css">
<link rel="stylesheet" href="/static/api-docs.css">
<link rel="icon" type="image/png" href="/api/docs/assets/favicon-32x32.png">
</head>
<body>
<p class="docs-back"><a href="/">← horae console</a></p>
<main><div id="swagger-ui" data-url="/api/v1/openapi.json"></div></main>
<script src="/api/docs/assets/swagger-ui-bundle.js"></script>
<script src="/static/api-docs.js"></script>
</body>
</html>
"""


def bundle_dir() -> Path:
    """Where the installed swagger-ui-py keeps Swagger UI's files (found without importing
    the package, which would load its adapters for other web frameworks).

    Raises:
        HTTPException: 404 naming the missing package (a console installed without its extra).
    """
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise HTTPException(
            404, "the API reference needs the package swagger-ui-py (pip install 'horae[console]')"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "static"


@router.get("")
async def api_docs(request: Request, who: Who) -> Response:
    """The reference page (its script, /static/api-docs.js, starts Swagger UI)."""
    bundle_dir()
    return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})


@router.get("/assets/{name}")
async def api_docs_asset(request: Request, who: Who, name: str) -> Response:
    """One of Swagger UI's files (ASSETS) from the installed package."""
    if name not in ASSETS:
        raise HTTPException(
            404, f"no asset {name[:100]!r}; the reference serves {', '.join(sorted(ASSETS))}"
        )
    return FileResponse(
        bundle_dir() / name, media_type=ASSETS[name], headers={"Cache-Control": "max-age=3600"}
    )
