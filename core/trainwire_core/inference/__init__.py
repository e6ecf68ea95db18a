"""Generated stubs of the Open Inference Protocol (``protos/inference``); regenerate with scripts/gen_protos.py.

Their descriptors live in a private pool (``_pool.py``), so they share a process
with tritonclient's (or any other package's) copy of the same ``inference.*`` protos.
"""
