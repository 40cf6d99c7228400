"""Conversion and I/O: other containers, tables, files, consolidation, printing."""
