"""Command-line interface (``infolm``): parsing and calls into the library, no logic of its own."""
