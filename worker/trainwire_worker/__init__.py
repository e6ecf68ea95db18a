"""trainwire worker: the Ray actor runtime and the framework backends."""
