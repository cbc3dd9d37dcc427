"""Atomic, crash-safe exports: staging, writer locks, recovery, and the
one-step renames they publish with.
"""
