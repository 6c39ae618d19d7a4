"""What a running horae tells the outside: metrics, traces, logs, health probes."""
