"""The chaos run (issue 16): many faults at once against real processes and servers.
`make chaos` runs the full version (python -m tests.chaos); tests/chaos/test_chaos.py a
60-second one inside `make test`."""
