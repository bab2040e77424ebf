"""Ratchet's side of an external agent harness: the client of the rollout's endpoint and sandbox
bridge (client.py), and adapters that run an unchanged harness from PyPI against them
(nano_runner.py for nano-agent, mswea_runner.py for mini-swe-agent). Stdlib only here."""
