"""Logical plan nodes, validation against output modes, and the physical plan."""
