"""A property-based fuzzer for the entry points that open a run directory (issue #65, item 7)."""
