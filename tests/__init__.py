"""The test suite, a package: helpers are imported relatively (``from .helpers import x``),
never through sys.path."""
