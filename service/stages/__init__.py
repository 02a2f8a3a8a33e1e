"""The live pipeline's stages, in the order a round passes them: ingest into the window store,
the scoring tick, the alert state machine and the fleet alerts, the alert store and the labels.
Each stage reads what the one before left behind; `service.pipeline` calls them in order."""
