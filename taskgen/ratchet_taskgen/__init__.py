"""Ratchet's offline task generator: real PyPI packages, synthesized bugs, verified by their own tests."""

__version__ = "0.1.0"
