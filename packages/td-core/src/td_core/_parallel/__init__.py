"""Parallel and distributed: point-to-point, collectives, process pools, data loaders."""
