"""One exception type for every user-facing failure: the CLI prints its message as one line."""


class EngineError(Exception):
    """Bad input or a state the user can fix: the message says what happened and what to do."""
