"""Free functions over the kinds: merging and stacking lists, padding, parsing a printed TensorDict, comparing."""
