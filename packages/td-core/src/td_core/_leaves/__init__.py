"""Entries that are not TensorDicts: non-tensor leaves, unbatched tensors, metadata, list entries."""
