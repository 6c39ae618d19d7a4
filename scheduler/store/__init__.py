"""Redis: keys, the Lua scripts, the wire, the store, partitions and Redis Cluster."""
