"""Builders of plain test data, one module per noun."""
