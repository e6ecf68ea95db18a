"""Systems beside trainwire: MLflow tracking (and the registry mirror), and trainwire's model registry."""
