"""MLflow's scoring protocol (``mlflow models serve``'s ``/invocations``) on the predictor's REST port."""
