"""The Open Inference Protocol over gRPC: a thin servicer over the data plane, its codec, and generation."""
