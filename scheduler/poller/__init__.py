"""Pollers: fetch offers and prices from providers into the store."""
