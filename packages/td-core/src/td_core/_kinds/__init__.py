"""The kinds: `TensorDictBase`, which assembles the op families, and the containers built on it."""
