"""Test-side helpers, one module per topic: ports, stacks, private services, processes, metrics."""
