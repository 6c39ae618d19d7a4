"""The job and its rules, pure: the model, input checks, retry, time, names, settings."""
