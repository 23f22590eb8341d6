"""The package version, at the bottom of the layer order so that servers can report it."""
__version__ = "0.1.0"
