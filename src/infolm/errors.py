"""User-facing errors: the CLI prints one line for these and exits non-zero."""


class InfolmError(Exception):
    """Bad input from the user (config, data, paths, names). Printed as one line, no traceback."""
