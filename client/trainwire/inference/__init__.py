"""Generated stubs of the Open Inference Protocol (``protos/inference``); regenerate with scripts/gen_protos.py."""
