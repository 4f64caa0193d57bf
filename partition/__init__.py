"""partition package."""
