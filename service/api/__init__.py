"""The HTTP API: the FastAPI app factory (app), its lifespan, the read endpoints and
line-protocol writes (InfluxDB v1-compatible `/write`).

The API reads the state the stages leave behind (pipeline.risk, .alerts, .store, .events,
.stats) and never reaches into a stage's internals. Reads of the live window store hold the
pipeline lock so they never see half an ingest; the risk snapshot is replaced, never changed,
at each tick. Alert-store queries run outside the pipeline lock to keep it short.

Role files: schemas (wire shapes), state (what the lifespan builds), views (pipeline state to
wire shapes), read (probes, fleet and alert endpoints), write (line-protocol ingest), app (the
factory and its lifespan).
"""
