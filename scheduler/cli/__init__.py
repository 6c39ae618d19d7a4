"""The `horae` command."""
