"""Worked examples of the extension points, kept runnable by the test suite (``docs/new_kernel.md``)."""
