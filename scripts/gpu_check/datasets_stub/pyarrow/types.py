"""pyarrow.types stand-in (see pyarrow/__init__.py)."""
from . import __getattr__  # noqa: F401
