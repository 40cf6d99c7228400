"""The bottom layer: the storage contract and the shared vocabulary (keys, flags, traversals, small utilities).

Modules here import nothing else of td_core but `td_core.errors`."""
