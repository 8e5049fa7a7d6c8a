"""Compatibility shim: ``from vikingdb import APIKey`` for code written against the VikingDB
memory SDK, served by mnemo-client. Do not install next to the real ``vikingdb`` package."""

from mnemo_client import APIKey, MnemoError

__all__ = ["APIKey", "MnemoError"]
