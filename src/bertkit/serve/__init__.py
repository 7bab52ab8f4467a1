"""`bertkit serve`: an HTTP API over the library and the BERT explorer page (an application,
like the CLI). Needs the `serve` extra (FastAPI, uvicorn): `pip install 'bertkit[serve]'`.

`models` loads the folders, `views`/`predict` compute each endpoint's answer, `batching` gathers
concurrent requests into one forward pass off the event loop, `safety` holds the limits, `app`
wires the HTTP routes and the page (`static/`)."""
