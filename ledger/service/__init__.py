"""`ledger serve`: the team ledger as an ASGI service (Starlette under uvicorn).

Starlette rather than FastAPI: the request bodies are signed DSSE envelopes
that `ledger.write.ingest` verifies byte for byte with its own models, so FastAPI's
pydantic request models would only parse every body a second time, and its
dependency injection buys nothing for a dozen routes. The OpenAPI document at
`/openapi.json` is written out in `ledger.service.openapi` instead of being
generated, and a property test sends requests drawn from it.

Modules: `app` (assembly), `state` (what every request shares), `api` (the
JSON routes), `auth` (bearer tokens), `limits` (body size and the
whole-request deadline; the connection cap and timeouts are uvicorn's, set in
`run`), `web/` (the reviewer's pages). Arrows run app -> api and app -> state; a
route reaches the shared state through `responses`, never the app.
Importing `ledger` never imports this package: it needs the `server` extra.
"""
