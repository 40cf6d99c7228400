"""The op families: one mixin (or table) per family, written against the storage contract."""
