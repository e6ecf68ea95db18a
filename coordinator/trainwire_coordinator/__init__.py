"""trainwire coordinator: accepts Fit RPCs and runs training on Ray."""
