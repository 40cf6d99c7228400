"""td_query: deterministic row hashing, hash-to-index maps, QueryModule and TensorDictMap."""

from td_query._hash_to_int import HashToInt
from td_query._map import TensorDictMap
from td_query._query import QueryModule
from td_query._siphash import DEFAULT_KEY, SipHash
from td_query._version import __version__

__all__ = [
    "__version__",
    "DEFAULT_KEY",
    "SipHash",
    "HashToInt",
    "QueryModule",
    "TensorDictMap",
]
