"""specchat: a terminal chat that shows, token by token, what speculative decoding did."""

__version__ = "0.1.0"
