"""The public API: frames, read_stream / read, write_stream."""
