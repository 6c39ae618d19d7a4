"""The Scheduler's calls, one module per concern; scheduler/api.py composes them."""
