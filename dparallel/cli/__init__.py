"""Thin command-line entry points: parse arguments, call the library, print results."""
