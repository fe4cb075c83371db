"""The error hierarchy: every failure the project raises on purpose is a KeystoneError.

Each part maps these to its own surface in one place (HTTP statuses, CLI exit codes).
"""


class KeystoneError(Exception):
    """Base of every deliberate error; its message is meant for the user."""


class StackError(KeystoneError):
    """The embedded stack could not do what was asked (a port taken, a download failed...)."""
