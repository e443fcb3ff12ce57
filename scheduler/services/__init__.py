"""Service functions behind the API routes: validation, then store calls."""
