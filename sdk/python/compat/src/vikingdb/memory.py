"""``from vikingdb.memory import VikingMem`` → mnemo-client's ``MemoryClient``."""

from mnemo_client import MemoryClient as VikingMem

__all__ = ["VikingMem"]
