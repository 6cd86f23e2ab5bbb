"""The batch protocol (plan, read, process, write, commit), the local runner and StreamingQuery."""
