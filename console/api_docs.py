"""GET /api/docs: the API's reference (Swagger UI over /api/v1/openapi.json), served from
the `swagger-ui-bundle` package installed with the console extra: no CDN, nothing loaded
from another host, so the console's CSP holds (scripts and styles from 'self' only)."""

from __future__ import annotations

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
ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript",
          "favicon-32x32.png": "image/png"}
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>horae API reference</title>
<link rel="stylesheet" href="/api/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/api/docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui" data-url="/api/v1/openapi.json"></div>
<script src="/api/docs/assets/swagger-ui-bundle.js"></script>
<script src="/static/api-docs.js"></script>
</body>
</html>
"""


def bundle_dir() -> Path:
    """Where the installed swagger-ui-bundle keeps Swagger UI's files.

    Raises:
        HTTPException: 404 naming the missing package (a console installed without its extra).
    """
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        raise HTTPException(404, "the API reference needs the package swagger-ui-bundle "
                                 "(pip install 'horae[console]')") from None
    return Path(swagger_ui_path)


@router.get("")
async def api_docs(request: Request, who: Who) -> Response:
    """The reference page (its script, /static/api-docs.js, starts Swagger UI)."""
    bundle_dir()
    return HTMLResponse(PAGE, headers={"Cache-Control": "no-store"})


@router.get("/assets/{name}")
async def api_docs_asset(request: Request, who: Who, name: str) -> Response:
    """One of Swagger UI's files (ASSETS) from the installed package."""
    if name not in ASSETS:
        raise HTTPException(404, f"no asset {name[:100]!r}; the reference serves {', '.join(sorted(ASSETS))}")
    return FileResponse(bundle_dir() / name, media_type=ASSETS[name], headers={"Cache-Control": "max-age=3600"})
