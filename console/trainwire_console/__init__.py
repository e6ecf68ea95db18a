"""trainwire console: a web page of runs, metric curves, logs, checkpoints and served models.

It reaches the coordinator and the predictors only through their gRPC APIs, with its own token.
"""
