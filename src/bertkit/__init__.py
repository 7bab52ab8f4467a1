"""bertkit: a complete, fast and faithful BERT toolkit."""

__version__ = "0.1.0"
