"""Errors of the data step, shared by the readers and the loaders.

All are ValueErrors: the data cannot be used as configured, and the message
says what to change.
"""

from __future__ import annotations


class DataError(ValueError):
    """Base class: the data cannot be used as configured."""


class DataFormatError(DataError):
    """A data file does not have the layout its format and task require."""


class MissingDataFileError(DataError):
    """A configured data file does not exist."""


class HubUnavailableError(DataError):
    """The Hugging Face Hub cannot be reached."""
