"""The one error type the CLI turns into a one-line message (no traceback without --debug)."""


class BertkitError(ValueError):
    """Bad input or state, with a message a user can act on (file, line, what was expected)."""
