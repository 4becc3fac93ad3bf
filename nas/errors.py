"""Errors a user can cause.

Every mistake a user can make (a YAML file, a flag, a corpus path) raises a
:class:`UserError`; the CLI prints its message as one line on stderr and exits
with status 2.  It subclasses ``ValueError`` so library callers can catch it as
the usual "bad argument" error.
"""

from __future__ import annotations

#: longest message a ConfigError shows (the path and file name come on top)
MAX_MESSAGE = 400


class UserError(ValueError):
    """A mistake in user input; the message names what is wrong and what is valid."""


class ConfigError(UserError):
    """An invalid architecture, search space or training recipe.

    ``path`` is the dotted location inside the document (``layers.2.attention.kernel``);
    ``source`` is the file it came from, when known.  ``str()`` joins them.
    """

    def __init__(self, message: str, path: str = "", source: str = "") -> None:
        self.message = message
        self.path = path
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = ": ".join(p for p in (self.source, self.path) if p)
        message = self.message
        if len(message) > MAX_MESSAGE:  # a value from a file quoted whole could be megabytes long
            message = message[: MAX_MESSAGE - 5] + " ..."
        return f"{where}: {message}" if where else message

    def at(self, prefix: str) -> ConfigError:
        """The same error, located under ``prefix`` (used while descending a document)."""
        path = f"{prefix}.{self.path}" if self.path else prefix
        return ConfigError(self.message, path, self.source)

    def in_file(self, source: str) -> ConfigError:
        return ConfigError(self.message, self.path, str(source))


class CheckpointError(UserError):
    """A checkpoint file that is missing, unreadable, truncated or edited; the message names the file."""
