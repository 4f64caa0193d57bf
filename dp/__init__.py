"""dp package."""
