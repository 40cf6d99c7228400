"""Free functions over the kinds: merging and stacking lists, padding, comparing."""
