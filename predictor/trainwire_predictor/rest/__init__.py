"""The Open Inference Protocol over REST, split as MLServer's ``rest/``: endpoints, errors, codec, server."""
